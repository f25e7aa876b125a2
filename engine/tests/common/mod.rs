//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use capstan_reader::{LanguageModel, LoadOptions};

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
