//! Checkpoint loading errors: missing tensors, shape mismatches, unsupported configs.

use candle_core::{DType, Device};
use capstan_reader::{Architecture, Checkpoint, Error, Llama, LlamaConfig, RopeScaling};

mod common;
use common::fixture;

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

/// Configs the model cannot run are refused at load, naming the key.
#[test]
fn out_of_range_and_unimplemented_config_values_are_named() {
    let cases: [(&str, serde_json::Value, &str); 6] = [
        ("rope_theta", serde_json::json!(0.0), "rope_theta"),
        ("rms_norm_eps", serde_json::json!(-1e-6), "rms_norm_eps"),
        ("hidden_size", serde_json::json!(0), "hidden_size"),
        (
            "use_sliding_window",
            serde_json::json!(true),
            "use_sliding_window",
        ),
        (
            "rope_parameters",
            serde_json::json!({"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}),
            "rope_parameters.rope_type",
        ),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "llama3", "factor": 8.0}),
            "rope_scaling.low_freq_factor",
        ),
    ];
    for (key, value, named) in cases {
        let mut cfg = config("llama-tied");
        cfg[key] = value;
        let parsed: LlamaConfig = serde_json::from_value(cfg).unwrap();
        match parsed.validate() {
            Err(Error::UnsupportedConfig { field, .. }) => assert_eq!(field, named, "{key}"),
            other => panic!("{key}: expected UnsupportedConfig, got {other:?}"),
        }
    }
}

/// transformers 5.x writes `rope_parameters`; it wins over a stale top-level `rope_theta`.
#[test]
fn rope_parameters_spelling_is_read() {
    let mut cfg = config("llama-tied");
    cfg["rope_theta"] = serde_json::json!(10000.0);
    cfg["rope_parameters"] =
        serde_json::json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0});
    let parsed: LlamaConfig = serde_json::from_value(cfg).unwrap();
    assert_eq!(parsed.rope_base(), 500000.0);
    assert_eq!(parsed.rope_scaling().unwrap(), RopeScaling::Linear(2.0));
}
