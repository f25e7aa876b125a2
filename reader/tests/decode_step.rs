//! The CUDA decoding step's CPU oracle (`capstan_kernels::step::ReferenceStep`, what
//! decode_step.cu computes, written out) against the model's own forward pass: the step fed a
//! prompt one token at a time, from an empty cache, gives at every position the logits the
//! layer-by-layer pass gives for the whole prompt. The weights are those `Llama::step_model`
//! hands the CUDA step (float tensors as loaded, a GGUF file's blocks as stored), so this also
//! checks what the step reads: which matrices, rows in which order, biases, the rotation, the
//! tied output layer. `kernels/tests/gpu.rs` then checks the kernels against the same oracle.

use candle_core::{DType, Device};
use capstan_kernels::step::{ReferenceStep, StepKvHost, StepMatrix};
use capstan_reader::{Checkpoint, Llama};

mod common;
use common::{fixture, logits};

/// The largest difference between the step's and the model's logits over `prompt`, relative
/// to the largest logit, and the positions whose top token differs.
fn compare(model: &Llama, prompt: &[u32]) -> (f32, usize) {
    let want = logits(model, prompt, &[], 0);
    let reference = ReferenceStep::new(&model.step_model().unwrap()).unwrap();
    let mut kv = vec![StepKvHost::default(); model.config().num_hidden_layers];
    let (mut worst, mut flips) = (0f32, 0);
    for (pos, &token) in prompt.iter().enumerate() {
        let got = reference.step(token, pos, &mut kv).unwrap();
        let scale = want[pos].iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
        for (g, w) in got.iter().zip(&want[pos]) {
            assert!(g.is_finite(), "position {pos}: {g}");
            worst = worst.max((g - w).abs() / scale);
        }
        if capstan_reader::argmax(&got) != capstan_reader::argmax(&want[pos]) {
            flips += 1;
        }
    }
    eprintln!("decode step: worst {worst}, flips {flips}");
    (worst, flips)
}

fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

fn load(name: &str, dtype: DType) -> Llama {
    Checkpoint::open(fixture(name))
        .unwrap()
        .load_model(&Device::Cpu, Some(dtype))
        .unwrap()
}

#[test]
fn step_equals_the_forward_pass_on_float_checkpoints() {
    // Grouped heads over two files (.bin), Qwen2's q/k/v biases, Llama 3's RoPE scaling, a
    // tied output layer.
    for name in [
        "llama-gqa-bin",
        "qwen2-tiny",
        "llama3-rope-tiny",
        "llama-tied",
    ] {
        let model = load(name, DType::F32);
        let p = prompt(24, model.config().vocab_size);
        let (worst, flips) = compare(&model, &p);
        assert!(
            worst < 1e-4,
            "{name} f32: logits differ by {worst} of the largest"
        );
        assert_eq!(flips, 0, "{name} f32");
        // bf16: the step rounds where the model does not (and the reverse); same tokens.
        let model = load(name, DType::BF16);
        let (worst, _) = compare(&model, &p);
        assert!(
            worst < 0.05,
            "{name} bf16: logits differ by {worst} of the largest"
        );
    }
}

#[test]
fn step_mutations_are_caught() {
    // The comparison above fails when the step reads a wrong matrix: k and v swapped.
    let model = load("llama-gqa-bin", DType::F32);
    let mut m = model.step_model().unwrap();
    for l in &mut m.layers {
        std::mem::swap(&mut l.k, &mut l.v);
    }
    let reference = ReferenceStep::new(&m).unwrap();
    let p = prompt(8, model.config().vocab_size);
    let want = logits(&model, &p, &[], 0);
    let mut kv = vec![StepKvHost::default(); model.config().num_hidden_layers];
    let mut worst = 0f32;
    for (pos, &t) in p.iter().enumerate() {
        let got = reference.step(t, pos, &mut kv).unwrap();
        for (g, w) in got.iter().zip(&want[pos]) {
            worst = worst.max((g - w).abs());
        }
    }
    assert!(worst > 1e-2, "swapped k and v went unnoticed ({worst})");
}

#[test]
fn step_equals_the_forward_pass_on_smollm2_gguf() {
    let path = capstan_reader::default_model_path().expect("HOME is set");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    let model = Checkpoint::open(&path)
        .unwrap()
        .load_model(&Device::Cpu, None)
        .unwrap();
    let m = model.step_model().unwrap();
    // The step reads the file's blocks, not dequantized copies.
    assert!(matches!(m.layers[0].q, StepMatrix::Ggml(_)));
    assert!(matches!(m.embed, StepMatrix::Ggml(_)));
    let p = prompt(12, model.config().vocab_size);
    let (worst, flips) = compare(&model, &p);
    // The model's quantized products round their inputs to 8 bits (as llama.cpp's); the
    // step's read them in the activations' type (0.045 measured).
    assert!(
        worst < 0.08,
        "SmolLM2: logits differ by {worst} of the largest"
    );
    assert!(
        flips <= 1,
        "SmolLM2: {flips} of {} top tokens differ",
        p.len()
    );
}
