//! End-to-end: `capstan model forward` and `generate` on every parity fixture
//! (reader/tests/fixtures: HF transformers and the official CEPE code made
//! the expected values), through the real binary and its JSON files.

mod common;

use std::path::{Path, PathBuf};

use common::{ok, s, smollm2};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("../reader/tests/fixtures")
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn rows(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

fn max_diff(got: &[Vec<f64>], want: &[Vec<f64>]) -> f64 {
    assert_eq!(got.len(), want.len(), "number of positions");
    got.iter()
        .zip(want)
        .flat_map(|(g, w)| {
            assert_eq!(g.len(), w.len(), "vocabulary size");
            g.iter().zip(w).map(|(a, b)| (a - b).abs())
        })
        .fold(0.0, f64::max)
}

/// Runs forward and generate for `model` on `inputs`, comparing with `expected`.
fn check(model: &Path, inputs: &Path, expected: &Value, tmp: &Path, name: &str) {
    let out = tmp.join(format!("{name}-forward.json"));
    ok(&[
        "model",
        "forward",
        "--model",
        s(model),
        "--input",
        s(inputs),
        "--out",
        s(&out),
    ]);
    let logits = rows(&read(&out)["logits"]);
    let diff = if let Some(last) = expected.get("last_logits") {
        let want = rows(last);
        max_diff(&logits[logits.len() - want.len()..], &want)
    } else if let Some(positions) = expected.get("positions") {
        // Only the listed positions were stored.
        let picked: Vec<Vec<f64>> = positions
            .as_array()
            .unwrap()
            .iter()
            .map(|p| logits[p.as_u64().unwrap() as usize].clone())
            .collect();
        max_diff(&picked, &rows(&expected["logits"]))
    } else {
        max_diff(&logits, &rows(&expected["logits"]))
    };
    assert!(diff <= 2e-4, "{name}: logits differ by {diff}");

    let n = read(inputs)["max_new_tokens"].as_u64().unwrap().to_string();
    let out = tmp.join(format!("{name}-generate.json"));
    ok(&[
        "model",
        "generate",
        "--model",
        s(model),
        "--input",
        s(inputs),
        "--max-new-tokens",
        &n,
        "--out",
        s(&out),
    ]);
    assert_eq!(
        read(&out)["tokens"],
        expected["greedy_tokens"],
        "{name}: greedy tokens"
    );
}

#[test]
fn forward_and_generate_equal_the_references_on_every_fixture() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixtures();
    for name in [
        "llama-abf-tiny",
        "llama-gqa-sharded",
        "llama-linear-rope",
        "llama-tied",
        "llama-long-abf",
        "cepe-tiny",
    ] {
        let f = dir.join(name);
        check(
            &f,
            &f.join("inputs.json"),
            &read(&f.join("expected.json")),
            tmp.path(),
            name,
        );
    }
    // The PyTorch .bin shards hold the same weights as the sharded safetensors.
    let gqa = dir.join("llama-gqa-sharded");
    check(
        &dir.join("llama-gqa-bin"),
        &gqa.join("inputs.json"),
        &read(&gqa.join("expected.json")),
        tmp.path(),
        "llama-gqa-bin",
    );
    // CEPE without encoder input is plain Llama.
    let cepe = dir.join("cepe-tiny");
    let mut inputs = read(&cepe.join("inputs.json"));
    inputs.as_object_mut().unwrap().remove("encoder_input_ids");
    let plain = tmp.path().join("cepe-no-encoder.json");
    std::fs::write(&plain, inputs.to_string()).unwrap();
    check(
        &cepe,
        &plain,
        &read(&cepe.join("expected_no_encoder.json")),
        tmp.path(),
        "cepe-no-encoder",
    );
}

#[test]
fn bad_model_input_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixtures().join("llama-abf-tiny");
    let input = tmp.path().join("in.json");
    std::fs::write(&input, r#"{"input_ids": [[1, 99999]]}"#).unwrap();
    let err = common::fails(&[
        "model",
        "forward",
        "--model",
        s(&model),
        "--input",
        s(&input),
    ]);
    assert!(err.contains("99999"), "{err}");
    std::fs::write(&input, r#"{"input_ids": "oops"}"#).unwrap();
    let err = common::fails(&[
        "model",
        "forward",
        "--model",
        s(&model),
        "--input",
        s(&input),
    ]);
    assert!(err.contains("in.json"), "{err}");
    std::fs::write(&input, r#"{"input_ids": [[1, 2, 3]]}"#).unwrap();
    let err = common::fails(&[
        "model",
        "forward",
        "--model",
        "/no/such/model",
        "--input",
        s(&input),
    ]);
    assert!(err.contains("/no/such/model"), "{err}");
}

/// Runs `capstan model COMMAND` on `input` (written to a file) and returns its output JSON.
fn model_json(command: &str, model: &Path, input: Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in.json"), dir.path().join("out.json"));
    std::fs::write(&inp, input.to_string()).unwrap();
    ok(&[
        "model",
        command,
        "--model",
        s(model),
        "--input",
        s(&inp),
        "--out",
        s(&out),
    ]);
    read(&out)
}

/// `model tokenize` and `model chat-template` on a GGUF file equal transformers' (the
/// reader's SmolLM2 fixtures), through the binary and its JSON files.
#[test]
fn tokenize_and_chat_template_commands_match_transformers() {
    let model = smollm2();
    let tok = read(&fixtures().join("smollm2/tokenizer.json"));
    let got = model_json(
        "tokenize",
        &model,
        serde_json::json!({"texts": tok["texts"]}),
    );
    assert_eq!(got["ids"], tok["ids"]);
    let chat = read(&fixtures().join("smollm2/chat_template.json"));
    let input = serde_json::json!({"conversations": chat["conversations"]});
    let got = model_json("chat-template", &model, input);
    assert_eq!(got["rendered"], chat["rendered"]);
}

/// `model info` on a GGUF file names its quantization types.
#[test]
fn info_shows_a_gguf_files_quantization() {
    let out = ok(&["model", "info", "--model", s(&smollm2())]);
    for want in ["Q4_1", "Q8_0", "layers       30", "chat template"] {
        assert!(out.contains(want), "{want} not in:\n{out}");
    }
}

/// A bad `--cape-cross-kv` is refused before anything is opened, naming the flag and its forms.
#[test]
fn bad_cape_cross_kv_is_refused() {
    let err = common::fails(&[
        "ask",
        "/nonexistent-index",
        "who?",
        "--cape-cross-kv",
        "lots",
    ]);
    assert!(
        err.contains("--cape-cross-kv") && err.contains("auto:MIB"),
        "{err}"
    );
}
