//! Checkpoint loading errors: missing tensors, shape mismatches, unsupported configs.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use capstan_reader::{Architecture, Checkpoint, Error, Llama, LlamaConfig, RopeScaling};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("config.json")).unwrap())
        .unwrap()
}

fn load_with(name: &str, cfg: serde_json::Value) -> capstan_reader::Result<Llama> {
    let cfg: LlamaConfig = serde_json::from_value(cfg).unwrap();
    let vb = Checkpoint::open(fixture(name))
        .unwrap()
        .var_builder(DType::F32, &Device::Cpu)?;
    Llama::load(vb, &cfg)
}

#[test]
fn missing_tensor_is_named() {
    let mut cfg = config("llama-tied");
    cfg["tie_word_embeddings"] = false.into();
    match load_with("llama-tied", cfg) {
        Err(Error::MissingTensor { name }) => assert_eq!(name, "lm_head.weight"),
        other => panic!("expected MissingTensor, got {other:?}"),
    }
    // Sharded PyTorch pickles report the same way.
    let mut cfg = config("llama-gqa-bin");
    cfg["num_hidden_layers"] = 4.into();
    match load_with("llama-gqa-bin", cfg) {
        Err(e @ Error::MissingTensor { .. }) => {
            assert!(e.to_string().contains("model.layers.3."), "{e}")
        }
        other => panic!("expected MissingTensor, got {other:?}"),
    }
}

#[test]
fn shape_mismatch_reports_both_shapes() {
    let mut cfg = config("llama-gqa-sharded");
    cfg["intermediate_size"] = 96.into();
    match load_with("llama-gqa-sharded", cfg) {
        Err(Error::ShapeMismatch {
            name,
            expected,
            actual,
        }) => {
            assert_eq!(name, "model.layers.0.mlp.gate_proj.weight");
            assert_eq!(expected, vec![96, 64]);
            assert_eq!(actual, vec![128, 64]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}

#[test]
fn unsupported_architecture_and_rope_scaling() {
    let mut cfg = config("llama-tied");
    cfg["architectures"] = serde_json::json!(["MistralForCausalLM"]);
    let cfg: LlamaConfig = serde_json::from_value(cfg).unwrap();
    assert!(matches!(
        Architecture::from_config(&cfg),
        Err(Error::UnsupportedArchitecture { .. })
    ));

    let mut cfg = config("llama-tied");
    cfg["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 2.0});
    let parsed: LlamaConfig = serde_json::from_value(cfg.clone()).unwrap();
    assert_eq!(parsed.rope_scaling().unwrap(), RopeScaling::Linear(2.0));
    cfg["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 2.0});
    let parsed: LlamaConfig = serde_json::from_value(cfg).unwrap();
    assert!(matches!(
        parsed.rope_scaling(),
        Err(Error::UnsupportedConfig { .. })
    ));
}

#[test]
fn no_weights_is_reported() {
    let dir = std::env::temp_dir().join(format!("capstan-reader-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        fixture("llama-tied").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let err = Checkpoint::open(&dir).unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    assert!(matches!(err, Error::NoWeights { .. }), "{err}");
}
