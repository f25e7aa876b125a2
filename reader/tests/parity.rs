//! Parity with the reference implementations (Hugging Face transformers `LlamaForCausalLM`,
//! the official CEPE `LlamaForCausalContextLM`) on tiny random checkpoints whose expected
//! outputs were produced by the reference code (see each fixture's `expected*.json` `notes`
//! and `fixtures/make_fixtures.py`).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use capstan_reader::{Cache, Checkpoint, GenerationParams, Generator, Llama, Request};
use serde_json::Value;

mod common;
use common::{fixture, greedy, ids, json, logits, logits_cached};

const TOL: f32 = 2e-4;

fn rows_f32(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn load(dir: &Path) -> (Checkpoint, Llama) {
    let ckpt = Checkpoint::open(dir).unwrap();
    let model = ckpt.load_model(&Device::Cpu, Some(DType::F32)).unwrap();
    (ckpt, model)
}

/// Max abs difference between two equally shaped matrices.
fn max_diff(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.len(), want.len(), "row count");
    let mut m = 0f32;
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "row width");
        for (a, b) in g.iter().zip(w) {
            let d = (a - b).abs();
            assert!(!d.is_nan(), "NaN in output");
            m = m.max(d);
        }
    }
    m
}

fn encoder_chunks(inputs: &Value) -> Vec<Vec<u32>> {
    inputs
        .get("encoder_input_ids")
        .map(|c| c.as_array().unwrap().iter().map(ids).collect())
        .unwrap_or_default()
}

/// Logits of every position of batch-1 `prompt` (with optional encoder chunks).
/// Checks logits and greedy tokens of a batch-1 fixture against one expected file.
fn check_decoder(name: &str, expected_file: &str, with_encoder: bool) -> f32 {
    check_decoder_with(name, expected_file, with_encoder, &|_| {})
}

/// [`check_decoder`] with the model set up by `configure` first (fused kernels, where the
/// cross-attention keys and values live).
fn check_decoder_with(
    name: &str,
    expected_file: &str,
    with_encoder: bool,
    configure: &dyn Fn(&mut Llama),
) -> f32 {
    let dir = fixture(name);
    let (_, mut model) = load(&dir);
    configure(&mut model);
    let fused = model.fused_kernels();
    let inputs = json(&dir.join("inputs.json"));
    let expected = json(&dir.join(expected_file));
    let prompt = ids(&inputs["input_ids"][0]);
    let chunks = if with_encoder {
        encoder_chunks(&inputs)
    } else {
        Vec::new()
    };
    let pad = inputs["encoder_pad_token_id"].as_u64().unwrap_or(2) as u32;
    let mut got = logits(&model, &prompt, &chunks, pad);
    if let Some(pos) = expected.get("positions") {
        got = ids(pos).iter().map(|&p| got[p as usize].clone()).collect();
    }
    let diff = max_diff(&got, &rows_f32(&expected["logits"]));
    println!("{name}/{expected_file} (fused {fused}): logits max abs diff {diff:.3e}");
    assert!(
        diff <= TOL,
        "{name}/{expected_file}: logits differ by {diff}"
    );
    let n = inputs["max_new_tokens"].as_u64().unwrap() as usize;
    let tokens = greedy(&model, &prompt, &chunks, pad, n);
    assert_eq!(
        tokens,
        ids(&expected["greedy_tokens"]),
        "{name}: greedy tokens"
    );
    diff
}

/// The CUDA path's model code (fused RoPE with Llama 3 and linear scaling, RMSNorm with the
/// residual, CEPE's cross-attention through the attention kernel) against the same references.
#[test]
fn fused_kernels_match_the_references() {
    for (name, file, with_encoder) in [
        ("llama-abf-tiny", "expected.json", false),
        ("cepe-tiny", "expected.json", true),
        ("cepe-tiny", "expected_no_encoder.json", false),
        ("llama-gqa-sharded", "expected.json", false),
        ("llama-tied", "expected.json", false),
        ("llama-linear-rope", "expected.json", false),
        ("llama3-rope-tiny", "expected.json", false),
        ("qwen2-tiny", "expected.json", false),
    ] {
        check_decoder_with(name, file, with_encoder, &|m| m.set_fused_kernels(true));
    }
}

/// CEPE's cross-attention keys and values projected as each layer runs (the memory the CAPE
/// paper counts) instead of cached: the same logits and tokens, fused or not; and a budget
/// too small to cache them chooses that form.
#[test]
fn cepe_cross_kv_projected_per_layer_matches_reference() {
    for fused in [false, true] {
        check_decoder_with("cepe-tiny", "expected.json", true, &|m| {
            m.set_fused_kernels(fused);
            m.set_cross_kv(capstan_reader::CrossKv::Projected);
        });
    }
    check_decoder_with("cepe-tiny", "expected.json", true, &|m| {
        m.set_cross_kv(capstan_reader::CrossKv::Auto { max_bytes: 1 });
    });
    // What each form holds: every cross layer's keys and values, or the encoder states.
    let dir = fixture("cepe-tiny");
    let (_, mut model) = load(&dir);
    let inputs = json(&dir.join("inputs.json"));
    let chunks = encoder_chunks(&inputs);
    let held = |model: &Llama| {
        let mut cache = Cache::new(model);
        model
            .set_encoder_context(std::slice::from_ref(&chunks), 2, &mut cache)
            .unwrap();
        cache.encoder_context_bytes()
    };
    let cfg = model.config().clone();
    let enc = cfg.encoder_config.as_ref().unwrap();
    let n: usize = chunks.len() * chunks.iter().map(Vec::len).max().unwrap();
    let kv_width = cfg.kv_heads() * (cfg.hidden_size / cfg.num_attention_heads);
    model.set_cross_kv(capstan_reader::CrossKv::Cached);
    assert_eq!(
        held(&model),
        n * cfg.num_cross_attn_layers * 2 * kv_width * 4
    );
    model.set_cross_kv(capstan_reader::CrossKv::Projected);
    assert_eq!(held(&model), n * enc.hidden_size * 4);
}

#[test]
fn llama_abf_tiny_matches_transformers() {
    check_decoder("llama-abf-tiny", "expected.json", false);
}

#[test]
fn cepe_tiny_matches_reference() {
    check_decoder("cepe-tiny", "expected.json", true);
}

#[test]
fn cepe_tiny_without_encoder_is_plain_llama() {
    check_decoder("cepe-tiny", "expected_no_encoder.json", false);
}

#[test]
fn cepe_tiny_encoder_states_match_reference() {
    let dir = fixture("cepe-tiny");
    let (_, model) = load(&dir);
    let inputs = json(&dir.join("inputs.json"));
    let expected = json(&dir.join("expected.json"));
    let chunks = encoder_chunks(&inputs);
    let pad = inputs["encoder_pad_token_id"].as_u64().unwrap() as u32;
    let enc = model.encode_chunks(&chunks, pad).unwrap();
    let states = enc.hidden_states.to_vec3::<f32>().unwrap();
    let want = expected["encoder_last_hidden_state"].as_array().unwrap();
    assert_eq!(want.len(), chunks.len());
    let mut worst = 0f32;
    for (c, chunk) in chunks.iter().enumerate() {
        let len = states[c].len();
        let real = &states[c][len - chunk.len()..];
        worst = worst.max(max_diff(real, &rows_f32(&want[c])));
    }
    println!("cepe-tiny: encoder states max abs diff {worst:.3e}");
    assert!(worst <= TOL, "encoder states differ by {worst}");
}

#[test]
fn gqa_sharded_safetensors_matches_transformers() {
    check_decoder("llama-gqa-sharded", "expected.json", false);
}

/// The same weights as `llama-gqa-sharded`, as sharded PyTorch pickles.
#[test]
fn gqa_sharded_pytorch_bin_matches_transformers() {
    let dir = fixture("llama-gqa-bin");
    let (ckpt, model) = load(&dir);
    assert!(matches!(
        ckpt.weights(),
        capstan_reader::WeightFormat::Pytorch(files) if files.len() == 2
    ));
    let reference = fixture("llama-gqa-sharded");
    let inputs = json(&reference.join("inputs.json"));
    let expected = json(&reference.join("expected.json"));
    let prompt = ids(&inputs["input_ids"][0]);
    let diff = max_diff(
        &logits(&model, &prompt, &[], 2),
        &rows_f32(&expected["logits"]),
    );
    println!("llama-gqa-bin: logits max abs diff {diff:.3e}");
    assert!(diff <= TOL, "logits differ by {diff}");
    let n = inputs["max_new_tokens"].as_u64().unwrap() as usize;
    assert_eq!(
        greedy(&model, &prompt, &[], 2, n),
        ids(&expected["greedy_tokens"])
    );
}

#[test]
fn tied_embeddings_match_transformers() {
    check_decoder("llama-tied", "expected.json", false);
}

#[test]
fn linear_rope_scaling_matches_transformers() {
    check_decoder("llama-linear-rope", "expected.json", false);
}

/// 5,000 tokens with RoPE ABF (rope_theta 500,000), through chunked prefill.
#[test]
fn long_input_rope_abf_matches_transformers() {
    let dir = fixture("llama-long-abf");
    let (_, model) = load(&dir);
    let inputs = json(&dir.join("inputs.json"));
    let expected = json(&dir.join("expected.json"));
    let prompt = ids(&inputs["input_ids"][0]);
    assert_eq!(prompt.len(), 5000);
    let got = logits(&model, &prompt, &[], 2);
    let diff = max_diff(&got[got.len() - 8..], &rows_f32(&expected["last_logits"]));
    println!("llama-long-abf: last-8 logits max abs diff {diff:.3e}");
    assert!(diff <= TOL, "logits differ by {diff}");
    let argmax = ids(&expected["argmax"]);
    let margin: Vec<f64> = expected["top2_margin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_f64().unwrap())
        .collect();
    let mut compared = 0;
    for (p, row) in got.iter().enumerate() {
        // Near-ties (within numerical noise) may legitimately flip.
        if margin[p] > 1e-3 {
            assert_eq!(
                capstan_reader::argmax(row),
                argmax[p],
                "argmax at position {p}"
            );
            compared += 1;
        }
    }
    assert!(compared > 4900);
    let n = inputs["max_new_tokens"].as_u64().unwrap() as usize;
    assert_eq!(
        greedy(&model, &prompt, &[], 2, n),
        ids(&expected["greedy_tokens"])
    );
}

/// Two prompts of different lengths, left-padded and masked.
#[test]
fn batch_left_padding_matches_transformers() {
    let dir = fixture("llama-batch-leftpad");
    let (_, model) = load(&dir);
    let inputs = json(&dir.join("inputs.json"));
    let expected = json(&dir.join("expected.json"));
    let prompts: Vec<Vec<u32>> = inputs["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let pad = inputs["pad_token_id"].as_u64().unwrap() as u32;
    let len = prompts.iter().map(Vec::len).max().unwrap();
    let mut flat = Vec::new();
    let mut mask = Vec::new();
    for p in &prompts {
        flat.extend(std::iter::repeat_n(pad, len - p.len()).chain(p.iter().copied()));
        mask.extend((0..len).map(|i| u32::from(i >= len - p.len())));
    }
    let dev = model.device();
    let input = Tensor::from_vec(flat, (prompts.len(), len), dev).unwrap();
    let mask = Tensor::from_vec(mask, (prompts.len(), len), dev).unwrap();
    let mut cache = Cache::new(&model);
    let out = model.forward(&input, Some(&mask), &mut cache).unwrap();
    let out = out.to_vec3::<f32>().unwrap();
    let mut worst = 0f32;
    for (r, p) in prompts.iter().enumerate() {
        let real = &out[r][len - p.len()..];
        worst = worst.max(max_diff(real, &rows_f32(&expected["logits"][r])));
    }
    println!("llama-batch-leftpad: logits max abs diff {worst:.3e}");
    assert!(worst <= TOL, "logits differ by {worst}");
    let n = inputs["max_new_tokens"].as_u64().unwrap() as usize;
    let requests: Vec<Request> = prompts
        .iter()
        .map(|p| Request {
            prompt: p.clone(),
            ..Request::default()
        })
        .collect();
    let tokens = Generator::new(&model, None, 2)
        .generate_batch(&requests, &GenerationParams::greedy(n), pad)
        .unwrap();
    let want: Vec<Vec<u32>> = expected["greedy_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    assert_eq!(tokens, want);
}

/// Llama 3.1 RoPE scaling (`rope_type: "llama3"`, transformers 4.x spelling) at 3,000 tokens
/// past `original_max_position_embeddings`, with tied embeddings, an explicit `head_dim` that
/// differs from `hidden_size / heads`, and a list of eos ids.
#[test]
fn llama3_rope_scaling_matches_transformers() {
    let dir = fixture("llama3-rope-tiny");
    let ckpt = Checkpoint::open(&dir).unwrap();
    assert!(matches!(
        ckpt.config().rope_scaling().unwrap(),
        capstan_reader::RopeScaling::Llama3 { .. }
    ));
    assert_eq!(ckpt.eos_token_ids(), vec![2, 3]);
    assert_ne!(
        ckpt.config().head_size(),
        ckpt.config().hidden_size / ckpt.config().num_attention_heads
    );
    check_decoder("llama3-rope-tiny", "expected.json", false);
}

/// Qwen2 (biases on Q, K and V), saved by transformers 5.x (`rope_parameters`).
#[test]
fn qwen2_matches_transformers() {
    let dir = fixture("qwen2-tiny");
    let ckpt = Checkpoint::open(&dir).unwrap();
    assert_eq!(
        capstan_reader::Architecture::from_config(ckpt.config()).unwrap(),
        capstan_reader::Architecture::Qwen2
    );
    check_decoder("qwen2-tiny", "expected.json", false);
}

/// CAPE's passage cache: a request whose chunks were read before (in another order, or
/// among others) gives the logits of encoding them afresh, bit for bit; under a budget too
/// small for all of them it evicts and stays exact.
#[test]
fn cepe_passage_cache_is_exact_in_any_order() {
    let dir = fixture("cepe-tiny");
    let (_, model) = load(&dir);
    let inputs = json(&dir.join("inputs.json"));
    let prompt = ids(&inputs["input_ids"][0]);
    let pad = inputs["encoder_pad_token_id"].as_u64().unwrap() as u32;
    let chunks = encoder_chunks(&inputs);
    assert!(chunks.len() >= 2, "the fixture has several chunks");
    let total: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    let mut reversed = chunks.clone();
    reversed.reverse();
    let extra = prompt[..3.min(prompt.len())].to_vec();
    let mixed = vec![
        chunks[0].clone(),
        extra.clone(),
        chunks[chunks.len() - 1].clone(),
    ];
    for budget in [
        usize::MAX,
        0,
        4 * model.config().encoder_config.as_ref().unwrap().hidden_size * 9,
    ] {
        let mut passages = capstan_reader::PassageCache::new(budget);
        for (round, order) in [&chunks, &reversed, &mixed, &chunks]
            .into_iter()
            .enumerate()
        {
            let afresh = logits(&model, &prompt, order, pad);
            let cached = logits_cached(&model, &prompt, order, pad, &mut passages);
            assert_eq!(cached, afresh, "budget {budget}, round {round}");
        }
        let s = passages.stats();
        let read: u64 = [&chunks, &reversed, &mixed, &chunks]
            .iter()
            .flat_map(|o| o.iter())
            .map(|c| c.len() as u64)
            .sum();
        assert_eq!(s.hit_tokens + s.encoded_tokens, read, "{s:?}");
        match budget {
            usize::MAX => {
                // Each distinct chunk encoded once.
                assert_eq!(s.encoded_tokens, total + extra.len() as u64, "{s:?}");
                assert_eq!(s.evicted, 0);
            }
            0 => assert_eq!((s.hit_tokens, s.bytes), (0, 0), "{s:?}"),
            _ => {
                assert!(s.evicted > 0 && s.hit_tokens > 0, "{s:?}");
                assert!(s.bytes <= budget, "{s:?}");
            }
        }
    }
}
