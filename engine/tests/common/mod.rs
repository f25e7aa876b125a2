//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use capstan_engine::scheduler::Event;
use capstan_engine::Scheduler;
use capstan_reader::{GenerationParams, Generator, LanguageModel, LoadOptions, Request};

pub fn reader_fixture(name: &str) -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("../reader/tests/fixtures")
        .join(name)
}

/// A reader test checkpoint with a word-level tokenizer (`t0`, `t1`, ...) added, since the
/// tiny checkpoints have none and a language model needs one to decode text.
pub fn tiny(name: &str) -> (tempfile::TempDir, LanguageModel) {
    let dir = tempfile::tempdir().unwrap();
    let src = reader_fixture(name);
    for f in ["config.json", "generation_config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let vocab = cfg["vocab_size"].as_u64().unwrap();
    let words: serde_json::Map<String, serde_json::Value> =
        (0..vocab).map(|i| (format!("t{i}"), i.into())).collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "t0"}
    });
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let lm = LanguageModel::load(dir.path(), &Device::Cpu, f32_options()).unwrap();
    (dir, lm)
}

pub fn f32_options() -> LoadOptions {
    LoadOptions {
        dtype: Some(DType::F32),
        no_chat_template: false,
    }
}

pub fn prompt(seed: u32, len: usize, vocab: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503) >> 7) % vocab as u32)
        .map(|t| t.max(4))
        .collect()
}

pub fn alone(lm: &LanguageModel, request: &Request, params: &GenerationParams) -> Vec<u32> {
    Generator::new(lm.model(), Some(lm.tokenizer()), lm.pad_id())
        .generate(request, params)
        .unwrap()
        .tokens
}

/// Waits for a sequence's end, ignoring its tokens.
pub fn finish(seq: &capstan_engine::scheduler::Sequence) -> capstan_reader::Generation {
    loop {
        match seq.next_event().expect("scheduler alive") {
            Event::Done(g) => return g,
            Event::Token(_) => {}
            Event::Failed(e) => panic!("{e}"),
            Event::Scored(_) => panic!("a generation answered with scores"),
        }
    }
}

/// The SmolLM2 GGUF: `$CAPSTAN_LLM`, else `$CAPSTAN_HOME/models/...` (scripts/setup.sh puts it
/// there).
pub fn smollm2() -> PathBuf {
    let path = capstan_reader::default_model_path().expect("HOME is set");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// A decoder-only request for `prompt`.
pub fn decoder_request(prompt: &[u32]) -> Request {
    Request {
        prompt: prompt.to_vec(),
        encoder_chunks: Vec::new(),
    }
}

pub fn run(scheduler: &Scheduler, prompt: &[u32], params: &GenerationParams) -> Vec<u32> {
    scheduler
        .generate(decoder_request(prompt), params.clone())
        .unwrap()
        .tokens
}
