//! End-to-end: `capstan eval qa`, `eval position` (extractive reader over a small
//! generated corpus) and the synthetic probes `eval kv-retrieval` / `eval passkey`
//! (a tiny random Llama checkpoint with a word-level tokenizer): the files each
//! run writes, their counts and ranges, and resuming after an interruption.

mod common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use common::{fails, ok, s};
use serde_json::Value;

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Keeps the first `n` lines of `path` and a torn half line, as a kill mid-write leaves it.
fn interrupt(path: &Path, n: usize) {
    let all = lines(path);
    let torn = &all[n][..all[n].len() / 2];
    std::fs::write(path, all[..n].join("\n") + "\n" + torn).unwrap();
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 2000,
        "{}",
        path.display()
    );
}

fn fraction(v: &Value) -> f64 {
    let x = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!((0.0..=1.0).contains(&x), "{x} not in [0, 1]");
    x
}

#[test]
fn qa_and_position_on_a_generated_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, index) = common::generated_index(tmp.path(), 60, 20, 7);
    let questions = data.join("questions.jsonl");

    // eval qa: metrics, recall monotone in k, latency per stage, plot.
    let out = tmp.path().join("qa");
    let qa = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "qa",
            s(&index),
            "--questions",
            s(&questions),
            "--out",
            s(&out),
            "-q",
        ];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let table = qa(&["--concurrency", "3"]);
    assert!(table.contains("answer recall@5"), "{table}");
    let r = read_json(&out.join("results.json"));
    assert_eq!(r["questions"], 20);
    assert_eq!(
        (r["reader"].as_str(), r["mode"].as_str(), r["k"].as_u64()),
        (Some("extractive"), Some("hybrid"), Some(5))
    );
    fraction(&r["em"]);
    fraction(&r["f1"]);
    let recall: Vec<f64> = ["1", "5", "20", "100"]
        .iter()
        .map(|k| fraction(&r["answer_recall"][k]))
        .collect();
    assert!(recall.windows(2).all(|w| w[0] <= w[1]), "{recall:?}");
    assert!(recall[1] > 0.5, "answer recall@5 = {}", recall[1]);
    for stage in ["retrieve", "assemble", "read", "total"] {
        let l = &r["latency_ms"][stage];
        let (mean, p50, p99) = (
            l["mean"].as_f64().unwrap(),
            l["p50"].as_f64().unwrap(),
            l["p99"].as_f64().unwrap(),
        );
        assert!(mean >= 0.0 && p50 <= p99, "{stage}: {l}");
    }
    assert!(r["latency_ms"]["total"]["mean"].as_f64().unwrap() > 0.0);
    assert_png(&out.join("answer_recall.png"));
    assert!(out.join("results.md").is_file());
    let items = out.join("items.jsonl");
    assert_eq!(lines(&items).len(), 20);

    // Interrupted: 12 lines kept plus a torn one; the re-run redoes only the rest.
    interrupt(&items, 12);
    qa(&[]);
    assert_eq!(lines(&items).len(), 20);
    let again = read_json(&out.join("results.json"));
    for key in ["questions", "em", "f1", "answer_recall"] {
        assert_eq!(again[key], r[key], "{key} after resuming");
    }
    // A changed configuration is refused unless --restart.
    let err = fails(&[
        "eval",
        "qa",
        s(&index),
        "--questions",
        s(&questions),
        "--out",
        s(&out),
        "-q",
        "-k",
        "3",
    ]);
    assert!(err.contains("--restart") && err.contains('k'), "{err}");
    qa(&["-k", "3", "--restart"]);
    assert_eq!(read_json(&out.join("results.json"))["k"], 3);
    assert_eq!(lines(&items).len(), 20);

    // A bad question line is named.
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"question\":\"Who?\",\"answers\":[\"x\"]}\n{\"question\":\"What?\"}\n",
    )
    .unwrap();
    let err = fails(&[
        "eval",
        "qa",
        s(&index),
        "--questions",
        s(&bad),
        "--out",
        s(&tmp.path().join("bad")),
        "-q",
    ]);
    assert!(err.contains("bad.jsonl:2"), "{err}");

    // eval position: the gold passage at positions 0, 2 and 4 among 4 distractors.
    let out = tmp.path().join("position");
    let table = ok(&[
        "eval",
        "position",
        s(&index),
        "--questions",
        s(&questions),
        "--out",
        s(&out),
        "-q",
        "--k",
        "5",
        "--positions",
        "0,2,4",
        "--answer",
        "sentence",
    ]);
    assert!(table.contains("| position | accuracy |"), "{table}");
    let r = read_json(&out.join("results.json"));
    assert_eq!(r["k"], 5);
    assert_eq!(r["positions"], serde_json::json!([0, 2, 4]));
    let evaluated = r["evaluated"].as_u64().unwrap();
    assert_eq!(evaluated + r["skipped"].as_u64().unwrap(), 20);
    assert!(evaluated >= 15, "{r}");
    let acc: Vec<f64> = ["0", "2", "4"]
        .iter()
        .map(|p| fraction(&r["accuracy"][p]))
        .collect();
    // The extractive reader's best sentence is ranked regardless of order: flat accuracy.
    // (Its default span answer is not: the span ranker weighs each passage's retrieval rank
    // and score share, which moving the gold passage changes.)
    assert!(acc.iter().all(|a| (a - acc[0]).abs() < 1e-9), "{acc:?}");
    assert!(acc[0] > 0.0, "{acc:?}");
    assert_png(&out.join("accuracy_by_position.png"));
    assert_eq!(lines(&out.join("items.jsonl")).len(), 20);
}

/// Prompt words of the probes, so the word-level tokenizer knows them.
const WORDS: &str = "Extract the value corresponding to the specified key in JSON object below. data: Key: \
Corresponding value: There is an important info hidden inside a lot of irrelevant text. Find it and memorize \
them. I will quiz you about information there. The grass green. sky blue. sun yellow. Here we go. back again. \
pass key Remember it. What key? The";

/// A tiny random Llama checkpoint (Hugging Face layout) with a word-level tokenizer.json.
fn tiny_checkpoint(dir: &Path) {
    let mut vocab: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    for w in WORDS.split_whitespace() {
        if !vocab.iter().any(|v| v == w) {
            vocab.push(w.into());
        }
    }
    let v = 128;
    assert!(vocab.len() <= v);
    while vocab.len() < v {
        vocab.push(format!("<{}>", vocab.len()));
    }
    let words: serde_json::Map<String, Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, w)| (w.clone(), Value::from(i)))
        .collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"}
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let (h, inter, layers) = (64, 128, 2);
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "vocab_size": v, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": true,
        "hidden_act": "silu", "torch_dtype": "float32"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let dev = Device::Cpu;
    let randn = |shape: &[usize]| Tensor::randn(0f32, 0.5, shape, &dev).unwrap();
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert("model.embed_tokens.weight".into(), randn(&[v, h]));
    t.insert(
        "model.norm.weight".into(),
        Tensor::ones(h, DType::F32, &dev).unwrap(),
    );
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        for (name, shape) in [
            ("self_attn.q_proj", [64, h]),
            ("self_attn.k_proj", [32, h]),
            ("self_attn.v_proj", [32, h]),
            ("self_attn.o_proj", [h, 64]),
            ("mlp.gate_proj", [inter, h]),
            ("mlp.up_proj", [inter, h]),
            ("mlp.down_proj", [h, inter]),
        ] {
            t.insert(format!("{p}.{name}.weight"), randn(&shape));
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            t.insert(
                format!("{p}.{norm}.weight"),
                Tensor::ones(h, DType::F32, &dev).unwrap(),
            );
        }
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
}

#[test]
fn kv_retrieval_and_passkey_probes_on_a_tiny_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-llama");
    tiny_checkpoint(&model);

    // Key-value retrieval: 2 pair counts x 3 positions x 2 samples.
    let out = tmp.path().join("kv");
    let kv = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "kv-retrieval",
            "--model",
            s(&model),
            "--out",
            s(&out),
            "--pairs",
            "4,8",
            "--positions",
            "3",
            "--samples",
            "2",
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
            "-q",
        ];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let table = kv(&["--concurrency", "2"]);
    assert!(table.contains("| pairs |"), "{table}");
    let r = read_json(&out.join("results.json"));
    assert_eq!(r["samples"], 2);
    for (n, positions) in [("4", ["0", "2", "3"]), ("8", ["0", "4", "7"])] {
        let by = r["accuracy"][n]
            .as_object()
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(by.len(), 3, "{r}");
        for p in positions {
            fraction(&by[p]);
        }
    }
    assert!(
        r["prompt_tokens"]["8"].as_f64() > r["prompt_tokens"]["4"].as_f64(),
        "{r}"
    );
    assert_png(&out.join("kv_retrieval.png"));
    let items = out.join("items.jsonl");
    assert_eq!(lines(&items).len(), 12);
    interrupt(&items, 5);
    kv(&[]);
    assert_eq!(lines(&items).len(), 12);
    assert_eq!(
        read_json(&out.join("results.json"))["accuracy"],
        r["accuracy"]
    );

    // Passkey: 2 lengths x 3 depths x 2 samples, lengths in the model's tokens.
    let out = tmp.path().join("passkey");
    let pk_args = |extra: &[&'static str]| {
        let mut args = vec![
            "eval",
            "passkey",
            "--model",
            s(&model),
            "--out",
            s(&out),
            "--lengths",
            "120,300",
            "--depths",
            "0,0.5,1",
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
            "-q",
        ];
        args.extend_from_slice(extra);
        args
    };
    let pk = |extra: &[&'static str]| ok(&pk_args(extra));
    let table = pk(&["--samples", "2"]);
    assert!(table.contains("| depth |"), "{table}");
    let r = read_json(&out.join("results.json"));
    for (length, tokens) in [("120", 120.0), ("300", 300.0)] {
        for d in ["0", "0.5", "1"] {
            fraction(&r["accuracy"][length][d]);
        }
        let mean = r["prompt_tokens"][length].as_f64().unwrap();
        assert!(
            mean <= tokens && mean > tokens - 20.0,
            "{length}: {mean} tokens"
        );
    }
    assert_png(&out.join("passkey.png"));
    let items = out.join("items.jsonl");
    assert_eq!(lines(&items).len(), 12);
    // Deterministic: a fresh run with the same seed writes the same items.
    let before = std::fs::read_to_string(&items).unwrap();
    pk(&["--samples", "2", "--restart"]);
    let mut a: Vec<&str> = before.lines().collect();
    let after = std::fs::read_to_string(&items).unwrap();
    let mut b: Vec<&str> = after.lines().collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    // More samples is another configuration.
    let err = String::from_utf8(common::run(&pk_args(&["--samples", "3"])).stderr).unwrap();
    assert!(
        err.contains("samples") && err.contains("--restart"),
        "{err}"
    );

    // kill -9 mid-run, then resume: every item once.
    let out = tmp.path().join("killed");
    let args = [
        "eval",
        "passkey",
        "--model",
        s(&model),
        "--out",
        s(&out),
        "--lengths",
        "600,900",
        "--depths",
        "0,0.5,1",
        "--samples",
        "4",
        "--max-new-tokens",
        "4",
        "--device",
        "cpu",
        "--concurrency",
        "1",
        "-q",
    ];
    let mut child = common::capstan()
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let items = out.join("items.jsonl");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&items).map_or(0, |t| t.lines().count()) < 3 {
        assert!(started.elapsed().as_secs() < 60, "no progress");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let partial = lines(&items).len();
    assert!(partial < 24, "the run finished before the kill");
    ok(&args);
    let mut keys: Vec<String> = lines(&items)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["key"].to_string())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(
        (keys.len(), lines(&items).len()),
        (24, 24),
        "{partial} lines before the kill"
    );
}

/// Mean loss of each bucket of a pattern in a perplexity results.json.
fn bucket_loss(r: &Value, pattern: usize) -> Vec<f64> {
    r["patterns"][pattern]["bucket_loss"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{what}: {a:?} vs {b:?}");
    }
}

#[test]
fn perplexity_by_position_on_a_tiny_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-llama");
    tiny_checkpoint(&model);
    let words: Vec<&str> = WORDS.split_whitespace().collect();
    let text = |n: usize, step: usize| -> String {
        (0..n)
            .map(|i| words[(i * step) % words.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let corpus = tmp.path().join("long.jsonl");
    let docs = [
        serde_json::json!({"_id": "short", "text": text(100, 1)}),
        serde_json::json!({"_id": "a", "text": text(400, 7)}),
        serde_json::json!({"_id": "b", "text": text(400, 3)}),
        serde_json::json!({"_id": "c", "text": text(400, 5)}),
    ];
    let lines: Vec<String> = docs.iter().map(Value::to_string).collect();
    std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
    let run = |out: &str, chunk: &str| {
        let out = tmp.path().join(out);
        let table = ok(&[
            "eval",
            "perplexity",
            s(&corpus),
            "--model",
            s(&model),
            "--out",
            s(&out),
            "--length",
            "256",
            "--bucket",
            "64",
            "--documents",
            "2",
            "--chunk",
            chunk,
            "--report-at",
            "128,256",
            "--attention",
            "full",
            "--attention",
            "selfextend:group=2,window=256",
            "--attention",
            "zebra:every=2,window=16",
            "--device",
            "cpu",
            "-q",
        ]);
        assert!(table.contains("| attention |"), "{table}");
        assert_png(&out.join("perplexity.png"));
        read_json(&out.join("results.json"))
    };
    let whole = run("whole", "256");
    assert_eq!(whole["documents"], serde_json::json!(["a", "b"]), "{whole}");
    let full = bucket_loss(&whole, 0);
    assert_eq!(full.len(), 4);
    assert!(full.iter().all(|l| l.is_finite() && *l > 0.0), "{full:?}");
    // The prefix mean over 128 tokens is the token-weighted mean of the first two buckets
    // (63 and 64 predicted tokens: the first token is never predicted).
    let at_128 = whole["patterns"][0]["prefix_loss"][0][1].as_f64().unwrap();
    let want = (full[0] * 63.0 + full[1] * 64.0) / 127.0;
    assert!((at_128 - want).abs() < 1e-9, "{at_128} vs {want}");
    // SelfExtend whose neighbour window covers every token is full attention.
    assert_close(
        &bucket_loss(&whole, 1),
        &full,
        1e-3,
        "selfextend, window >= length",
    );
    // Zebra's 16-token windows in odd layers see less than full attention past 16 tokens.
    let zebra = bucket_loss(&whole, 2);
    assert!(
        zebra
            .iter()
            .zip(&full)
            .skip(1)
            .all(|(z, f)| (z - f).abs() > 1e-4),
        "{zebra:?} vs {full:?}"
    );
    // Reading in chunks of 50 through the KV cache gives the loss of one pass.
    let chunked = run("chunked", "50");
    for p in 0..3 {
        assert_close(
            &bucket_loss(&chunked, p),
            &bucket_loss(&whole, p),
            1e-3,
            &format!("pattern {p}, chunks of 50"),
        );
    }
    // Too long for every document: named.
    let err = fails(&[
        "eval",
        "perplexity",
        s(&corpus),
        "--model",
        s(&model),
        "--out",
        s(&tmp.path().join("none")),
        "--length",
        "5000",
        "--device",
        "cpu",
        "-q",
    ]);
    assert!(err.contains("5000 tokens"), "{err}");
}
