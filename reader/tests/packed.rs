//! A packed step (continuous batching) computes what each sequence computes alone: the same
//! logits up to rounding and the same greedy tokens, with sequences of different lengths
//! joining and leaving between steps, CEPE sequences with different chunk counts included.

use candle_core::Tensor;
use capstan_reader::{argmax, Cache, Llama, PackedInput};

mod common;
use common::{last_logits, load_f32};

const TOL: f32 = 1e-4;

/// A deterministic prompt of `len` ids below `vocab`.
fn prompt(seed: u32, len: usize, vocab: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503) >> 7) % vocab as u32)
        .map(|t| t.max(3))
        .collect()
}

struct Case {
    prompt: Vec<u32>,
    chunks: Vec<Vec<u32>>,
    new_tokens: usize,
    /// Step at which the sequence joins the batch.
    joins: usize,
}

fn fresh_cache(model: &Llama, case: &Case) -> Cache {
    let mut cache = Cache::new(model);
    if !case.chunks.is_empty() {
        model
            .set_encoder_context(std::slice::from_ref(&case.chunks), 2, &mut cache)
            .unwrap();
    }
    cache
}

/// Per step logits and greedy tokens of `case` alone.
fn alone(model: &Llama, case: &Case) -> (Vec<Vec<f32>>, Vec<u32>) {
    let mut cache = fresh_cache(model, case);
    let mut input = case.prompt.clone();
    let (mut rows, mut tokens) = (Vec::new(), Vec::new());
    for _ in 0..case.new_tokens {
        let row = last_logits(model, &mut cache, &input);
        let next = argmax(&row);
        rows.push(row);
        tokens.push(next);
        input = vec![next];
    }
    (rows, tokens)
}

/// The same cases stepped together: each joins at its step with its whole prompt, decodes one
/// token per step, leaves after its last token.
fn together(model: &Llama, cases: &[Case]) -> Vec<(Vec<Vec<f32>>, Vec<u32>)> {
    let mut caches: Vec<Cache> = cases.iter().map(|c| fresh_cache(model, c)).collect();
    let mut next: Vec<Vec<u32>> = cases.iter().map(|c| c.prompt.clone()).collect();
    let mut out: Vec<(Vec<Vec<f32>>, Vec<u32>)> = vec![(Vec::new(), Vec::new()); cases.len()];
    for step in 0.. {
        let active: Vec<usize> = (0..cases.len())
            .filter(|&i| cases[i].joins <= step && out[i].1.len() < cases[i].new_tokens)
            .collect();
        if active.is_empty() && cases.iter().all(|c| c.joins <= step) {
            break;
        }
        if active.is_empty() {
            continue;
        }
        let mut inputs: Vec<PackedInput> = caches
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| active.contains(i))
            .map(|(i, cache)| PackedInput {
                tokens: &next[i],
                cache,
            })
            .collect();
        let logits = model.forward_packed(&mut inputs).unwrap();
        let rows = logits.to_vec2::<f32>().unwrap();
        drop(inputs);
        for (&i, row) in active.iter().zip(rows) {
            let t = argmax(&row);
            out[i].0.push(row);
            out[i].1.push(t);
            next[i] = vec![t];
        }
    }
    out
}

fn check(name: &str, cases: Vec<Case>) {
    let model = load_f32(name);
    let packed = together(&model, &cases);
    for (i, case) in cases.iter().enumerate() {
        let (want_rows, want_tokens) = alone(&model, case);
        let (rows, tokens) = &packed[i];
        assert_eq!(tokens, &want_tokens, "{name}: sequence {i}: greedy tokens");
        for (step, (g, w)) in rows.iter().zip(&want_rows).enumerate() {
            let d = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(d <= TOL, "{name}: sequence {i} step {step}: max diff {d}");
        }
    }
}

fn decoder_cases(vocab: usize) -> Vec<Case> {
    [
        (1, 9, 6, 0),
        (2, 3, 10, 0),
        (3, 17, 4, 2),
        (4, 1, 7, 3),
        (5, 30, 5, 3),
    ]
    .into_iter()
    .map(|(seed, len, new_tokens, joins)| Case {
        prompt: prompt(seed, len, vocab),
        chunks: Vec::new(),
        new_tokens,
        joins,
    })
    .collect()
}

#[test]
fn packed_llama3_rope_equals_each_sequence_alone() {
    check("llama3-rope-tiny", decoder_cases(256));
}

#[test]
fn packed_qwen2_equals_each_sequence_alone() {
    let vocab = load_f32("qwen2-tiny").config().vocab_size;
    check("qwen2-tiny", decoder_cases(vocab));
}

#[test]
fn packed_llama_abf_equals_each_sequence_alone() {
    let vocab = load_f32("llama-abf-tiny").config().vocab_size;
    check("llama-abf-tiny", decoder_cases(vocab));
}

#[test]
fn packed_cepe_rows_keep_their_own_chunks() {
    let vocab = load_f32("cepe-tiny").config().vocab_size;
    let chunk = |seed, len| prompt(seed, len, vocab);
    let cases = vec![
        Case {
            prompt: prompt(11, 6, vocab),
            chunks: vec![chunk(21, 8), chunk(22, 5), chunk(23, 8)],
            new_tokens: 6,
            joins: 0,
        },
        Case {
            prompt: prompt(12, 4, vocab),
            chunks: vec![chunk(24, 3)],
            new_tokens: 8,
            joins: 0,
        },
        Case {
            prompt: prompt(13, 9, vocab),
            chunks: Vec::new(),
            new_tokens: 5,
            joins: 1,
        },
        Case {
            prompt: prompt(14, 2, vocab),
            chunks: vec![chunk(25, 7), chunk(26, 7)],
            new_tokens: 4,
            joins: 2,
        },
    ];
    check("cepe-tiny", cases);
}

#[test]
fn packed_step_rejects_padded_or_batched_caches() {
    let model = load_f32("llama3-rope-tiny");
    let mut cache = Cache::new(&model);
    let ids = Tensor::new(&[[5u32, 6], [7, 8]], model.device()).unwrap();
    model.forward_last(&ids, None, &mut cache).unwrap();
    let err = model
        .forward_packed(&mut [PackedInput {
            tokens: &[3],
            cache: &mut cache,
        }])
        .unwrap_err();
    assert!(err.to_string().contains("one unpadded sequence"), "{err}");
}
