//! End-to-end: `capstan corpus generate`, `index`, `search`, `eval retrieval`,
//! append / delete / compact, bad input, and `kill -9` during indexing.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{encoder_dir, fails, ok, s, snapshot};

struct Fixture {
    _tmp: tempfile::TempDir,
    data: std::path::PathBuf,
    index: std::path::PathBuf,
}

/// A small generated encyclopedia and its index.
fn fixture(docs: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let (data, index) = common::generated_index(tmp.path(), docs, 40, 7);
    Fixture {
        _tmp: tmp,
        data,
        index,
    }
}

fn search_json(index: &Path, query: &str, mode: &str, k: usize) -> Vec<serde_json::Value> {
    let out = ok(&[
        "search",
        s(index),
        query,
        "--mode",
        mode,
        "-k",
        &k.to_string(),
        "--json",
    ]);
    serde_json::from_str(&out).unwrap()
}

fn first_question(data: &Path) -> (String, String) {
    let q = std::fs::read_to_string(data.join("queries.jsonl")).unwrap();
    let q: serde_json::Value = serde_json::from_str(q.lines().next().unwrap()).unwrap();
    let qrels = std::fs::read_to_string(data.join("qrels/test.tsv")).unwrap();
    let id = q["_id"].as_str().unwrap();
    let doc = qrels
        .lines()
        .find(|l| l.starts_with(&format!("{id}\t")))
        .unwrap()
        .split('\t')
        .nth(1)
        .unwrap()
        .to_string();
    (q["text"].as_str().unwrap().to_string(), doc)
}

/// The generation `CURRENT` names (its first word; the second is the
/// manifest's checksum).
fn live_generation(current: &str) -> &str {
    current.split_whitespace().next().unwrap()
}

#[test]
fn index_search_and_evaluate_a_generated_corpus() {
    let f = fixture(150);
    let (question, doc) = first_question(&f.data);
    for mode in ["bm25", "dense", "hybrid"] {
        let hits = search_json(&f.index, &question, mode, 10);
        assert!(!hits.is_empty() && hits.len() <= 10, "{mode}");
        assert!(
            hits.iter().any(|h| h["doc_id"] == doc.as_str()),
            "{mode}: relevant {doc} not in top 10 for {question:?}"
        );
        let h = &hits[0];
        for field in ["passage_id", "doc_id", "title", "text", "score"] {
            assert!(!h[field].is_null(), "{mode}: hit lacks {field}");
        }
        match mode {
            "bm25" => assert!(h["dense"].is_null() && h["bm25"]["rank"] == 1),
            "dense" => assert!(h["bm25"].is_null() && h["dense"]["rank"] == 1),
            _ => assert!(!h["bm25"].is_null() || !h["dense"].is_null()),
        }
        let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "{mode}: scores not sorted"
        );
    }
    // Ranking documents: one hit per document, each its best passage, ranked by fusing
    // the components' document rankings.
    for mode in ["bm25", "dense", "hybrid"] {
        let out = ok(&[
            "search",
            s(&f.index),
            &question,
            "--mode",
            mode,
            "-k",
            "10",
            "--unit",
            "documents",
            "--json",
        ]);
        let docs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        let ids: Vec<&str> = docs.iter().map(|h| h["doc_id"].as_str().unwrap()).collect();
        let distinct: std::collections::HashSet<&&str> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{mode}: {ids:?}");
        assert!(ids.contains(&doc.as_str()), "{mode}: {ids:?}");
        // Each document appears in the passage ranking at the rank of its best passage.
        let passages = search_json(&f.index, &question, mode, 100);
        let mut first_seen: Vec<&str> = Vec::new();
        for h in &passages {
            let d = h["doc_id"].as_str().unwrap();
            if !first_seen.contains(&d) {
                first_seen.push(d);
            }
        }
        if mode != "hybrid" {
            assert_eq!(ids[..], first_seen[..ids.len()], "{mode}");
        }
    }
    // Human-readable output names the passage and its scores.
    let text = ok(&["search", s(&f.index), &question, "-k", "3"]);
    assert!(text.contains(" 1. ") && text.contains("bm25"), "{text}");

    let out = f.data.parent().unwrap().join("eval");
    let table = ok(&[
        "eval",
        "retrieval",
        s(&f.index),
        "--dataset",
        s(&f.data),
        "--out",
        s(&out),
        "-q",
    ]);
    assert!(table.contains("| hybrid |"), "{table}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["queries"], 40);
    for mode in ["bm25", "dense", "hybrid"] {
        let m = &results["modes"][mode];
        for metric in ["recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10"] {
            let v = m[metric].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{mode} {metric} = {v}");
        }
        assert!(m["recall@1"].as_f64() <= m["recall@10"].as_f64());
        assert!(m["recall@10"].as_f64() <= m["recall@100"].as_f64());
        // Every question names its entity: retrieval must mostly succeed.
        assert!(m["recall@10"].as_f64().unwrap() > 0.6, "{mode}: {m}");
    }
    assert!(out.join("results.md").is_file());
}

#[test]
fn a_closed_stdout_ends_search_quietly() {
    let f = fixture(30);
    let (question, _) = first_question(&f.data);
    let mut child = common::capstan()
        .args(["search", s(&f.index), &question, "-k", "50", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the command writes (as `| head -0` would).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
}

/// The encoder's device and dtype flags: an f16 or bf16 question vector (candle's
/// padded BERT, what a GPU runs) finds what the f32 one finds; `--device cuda` on a
/// build without CUDA is a clear error, not a fall back.
#[test]
fn encoder_device_and_dtype_flags() {
    let f = fixture(30);
    let (question, _) = first_question(&f.data);
    let top = |extra: &[&str]| -> String {
        let mut args = vec![
            "search",
            s(&f.index),
            &question,
            "--mode",
            "dense",
            "-k",
            "1",
        ];
        args.extend_from_slice(&["--json", "--device", "cpu"]);
        args.extend_from_slice(extra);
        let hits: Vec<serde_json::Value> = serde_json::from_str(&ok(&args)).unwrap();
        hits[0]["doc_id"].as_str().unwrap().to_string()
    };
    // The index is int8 (the CPU's default), and so are its questions by default; f32, f16
    // and bf16 questions find the same passage.
    let gen = std::fs::read_to_string(f.index.join("CURRENT")).unwrap();
    let gen = gen.split_whitespace().next().unwrap().to_string();
    let manifest = std::fs::read_to_string(f.index.join(gen).join("manifest.json")).unwrap();
    assert!(manifest.contains("\"precision\": \"int8\""), "{manifest}");
    let int8_top = top(&[]);
    assert_eq!(top(&["--encoder-dtype", "int8"]), int8_top);
    let f32_top = top(&["--encoder-dtype", "f32"]);
    assert_eq!(f32_top, int8_top);
    assert_eq!(top(&["--encoder-dtype", "f16"]), f32_top);
    assert_eq!(top(&["--encoder-dtype", "bf16"]), f32_top);
    let corpus = f.data.join("corpus.jsonl");
    // An int8 index takes no f32 vectors: an append names the precision to use.
    let err = fails(&[
        "index",
        s(&corpus),
        "--out",
        s(&f.index),
        "--append",
        "--encoder-dtype",
        "f32",
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(
        err.contains("holds int8 vectors") && err.contains("--encoder-dtype int8"),
        "{err}"
    );
    let out = f.index.parent().unwrap().join("cuda-index");
    let err = fails(&[
        "index",
        s(&corpus),
        "--out",
        s(&out),
        "--device",
        "cuda",
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(err.contains("--device cuda"), "{err}");
    assert!(!out.exists(), "nothing written");
    let err = fails(&["search", s(&f.index), &question, "--device", "tpu"]);
    assert!(err.contains("expected cpu, cuda or auto"), "{err}");
}

#[test]
fn rerun_is_idempotent_and_append_delete_compact_work() {
    let f = fixture(60);
    let corpus = f.data.join("corpus.jsonl");
    let current = std::fs::read_to_string(f.index.join("CURRENT")).unwrap();
    let out = ok(&[
        "index",
        s(&corpus),
        "--out",
        s(&f.index),
        "--encoder",
        s(&encoder_dir()),
        "-q",
    ]);
    assert!(out.contains("up to date"), "{out}");
    assert_eq!(
        std::fs::read_to_string(f.index.join("CURRENT")).unwrap(),
        current
    );

    let append = |corpus: &Path| {
        ok(&[
            "index",
            s(corpus),
            "--out",
            s(&f.index),
            "--append",
            "--encoder",
            s(&encoder_dir()),
            "-q",
        ])
    };
    let extra = f.data.join("extra.jsonl");
    std::fs::write(
        &extra,
        "{\"_id\":\"zz-1\",\"title\":\"Quorvath Lighthouse\",\"text\":\"The Quorvath lighthouse was lit for the first time in 1911 by the keeper Ilsabet Marrow.\"}\n",
    )
    .unwrap();
    append(&extra);
    let hits = search_json(&f.index, "Quorvath lighthouse keeper", "hybrid", 3);
    assert_eq!(hits[0]["doc_id"], "zz-1");
    let dense = search_json(&f.index, "Quorvath lighthouse keeper", "dense", 3);
    assert_eq!(dense[0]["doc_id"], "zz-1");

    // Appending the same id again replaces the document.
    std::fs::write(
        &extra,
        "{\"_id\":\"zz-1\",\"title\":\"Quorvath Lighthouse\",\"text\":\"The Quorvath lighthouse was demolished in 1977.\"}\n",
    )
    .unwrap();
    let out = append(&extra);
    assert!(out.contains("1 replaced"), "{out}");
    let hits = search_json(&f.index, "Quorvath lighthouse", "bm25", 5);
    assert_eq!(hits.iter().filter(|h| h["doc_id"] == "zz-1").count(), 1);
    assert!(hits[0]["text"].as_str().unwrap().contains("demolished"));

    let err = fails(&["index", "delete", s(&f.index), "--ids", "zz-1,no-such-doc"]);
    assert!(err.contains("no-such-doc"), "{err}");
    ok(&["index", "delete", s(&f.index), "--ids", "zz-1"]);
    for mode in ["bm25", "dense", "hybrid"] {
        let hits = search_json(&f.index, "Quorvath lighthouse keeper", mode, 10);
        assert!(
            hits.iter().all(|h| h["doc_id"] != "zz-1"),
            "{mode} still finds a deleted document"
        );
    }
    let manifest = |dir: &Path| -> serde_json::Value {
        let gen = std::fs::read_to_string(dir.join("CURRENT")).unwrap();
        serde_json::from_str(
            &std::fs::read_to_string(dir.join(live_generation(&gen)).join("manifest.json"))
                .unwrap(),
        )
        .unwrap()
    };
    assert!(
        manifest(&f.index)["counts"]["deleted_passages"]
            .as_u64()
            .unwrap()
            >= 2
    );
    let before = search_json(&f.index, "river", "hybrid", 5);
    ok(&["index", "compact", s(&f.index), "-q"]);
    let m = manifest(&f.index);
    assert_eq!(m["counts"]["deleted_passages"], 0);
    assert_eq!(m["counts"]["passages"], m["counts"]["stored_passages"]);
    let after = search_json(&f.index, "river", "hybrid", 5);
    let ids = |v: &[serde_json::Value]| {
        v.iter()
            .map(|h| h["passage_id"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&before), ids(&after));
    // Only the live generation remains.
    let gens = std::fs::read_dir(&f.index)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("gen-")
        })
        .count();
    assert_eq!(gens, 1);
}

#[test]
fn bad_input_is_reported_and_leaves_the_index_untouched() {
    let f = fixture(20);
    let enc = encoder_dir();
    let before = snapshot(&f.index);
    let dir = f.data.parent().unwrap();
    let cases: &[(&str, &[u8], &str)] = &[
        (
            "malformed.jsonl",
            b"{\"_id\":\"a\",\"text\":\"ok\"}\n{\"_id\": oops}\n",
            "malformed.jsonl:2: malformed JSON",
        ),
        (
            "noid.jsonl",
            b"{\"title\":\"t\",\"text\":\"x\"}\n",
            "noid.jsonl:1: missing field `_id`",
        ),
        (
            "notext.jsonl",
            b"{\"_id\":\"a\",\"title\":\"t\"}\n",
            "notext.jsonl:1: missing field `text`",
        ),
        (
            "utf8.jsonl",
            b"{\"_id\":\"a\",\"text\":\"\xc3\x28\"}\n",
            "utf8.jsonl:1: invalid UTF-8",
        ),
        (
            "empty.jsonl",
            b"{\"_id\":\"a\",\"text\":\"\"}\n",
            "empty.jsonl:1: document `a` is empty",
        ),
        (
            "dup.jsonl",
            b"{\"_id\":\"a\",\"text\":\"x\"}\n{\"_id\":\"a\",\"text\":\"y\"}\n",
            "dup.jsonl:2: duplicate document id `a`",
        ),
    ];
    for (name, content, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let err = fails(&[
            "index",
            s(&path),
            "--out",
            s(&f.index),
            "--encoder",
            s(&enc),
            "-q",
        ]);
        assert!(err.contains(expected), "{name}: {err}");
        assert_eq!(snapshot(&f.index), before, "{name} changed the index");
    }
    // --skip-bad indexes the good lines and lists the bad ones.
    let mixed = dir.join("mixed.jsonl");
    std::fs::write(
        &mixed,
        b"{\"_id\":\"a\",\"text\":\"alpha beta\"}\n{bad\n{\"_id\":\"b\",\"text\":\"gamma\"}\n",
    )
    .unwrap();
    let other = dir.join("other-index");
    let out = common::run(&[
        "index",
        s(&mixed),
        "--out",
        s(&other),
        "--encoder",
        s(&enc),
        "--skip-bad",
        "-q",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mixed.jsonl:2") && err.contains("skipped 1"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 document(s)"));

    // A missing encoder folder.
    let err = fails(&[
        "index",
        s(&f.data.join("corpus.jsonl")),
        "--out",
        s(&f.index),
        "--encoder",
        "/no/such/encoder",
    ]);
    assert!(err.contains("/no/such/encoder"), "{err}");
    assert_eq!(snapshot(&f.index), before);
    // Not a corpus; an output folder that is not an index.
    let err = fails(&[
        "index",
        "/no/such/corpus.jsonl",
        "--out",
        s(&other),
        "--encoder",
        s(&enc),
    ]);
    assert!(err.contains("/no/such/corpus.jsonl"), "{err}");
    let stranger = dir.join("stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(stranger.join("precious.txt"), "keep me").unwrap();
    let err = fails(&[
        "index",
        s(&mixed),
        "--out",
        s(&stranger),
        "--encoder",
        s(&enc),
        "--skip-bad",
    ]);
    assert!(err.contains("not a Capstan index"), "{err}");
    assert_eq!(
        std::fs::read_to_string(stranger.join("precious.txt")).unwrap(),
        "keep me"
    );

    // An index searched with another encoder.
    let fake = dir.join("fake-encoder");
    std::fs::create_dir_all(&fake).unwrap();
    for entry in std::fs::read_dir(&enc).unwrap() {
        let p = entry.unwrap().path();
        std::os::unix::fs::symlink(&p, fake.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::remove_file(fake.join("config.json")).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(enc.join("config.json")).unwrap()).unwrap();
    config["layer_norm_eps"] = serde_json::json!(1e-6);
    std::fs::write(fake.join("config.json"), config.to_string()).unwrap();
    let err = fails(&["search", s(&f.index), "river", "--encoder", s(&fake)]);
    assert!(err.contains("was built with encoder"), "{err}");

    // An index of another format version.
    let current = std::fs::read_to_string(f.index.join("CURRENT")).unwrap();
    let gen = live_generation(&current);
    let manifest_path = f.index.join(gen).join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    manifest["format_version"] = serde_json::json!(99);
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    // CURRENT records the manifest's checksum: the edit is damage...
    let err = fails(&["search", s(&f.index), "river"]);
    assert!(
        err.contains("manifest.json") && err.contains("checksum"),
        "{err}"
    );
    // ...and without it (as an older Capstan wrote it) the version is checked.
    std::fs::write(f.index.join("CURRENT"), format!("{gen}\n")).unwrap();
    let err = fails(&["search", s(&f.index), "river"]);
    assert!(err.contains("format version 99"), "{err}");
    let err = fails(&["search", s(dir), "river"]);
    assert!(err.contains("not a Capstan index"), "{err}");
}

#[test]
fn kill_9_during_indexing_leaves_the_previous_index_usable() {
    let f = fixture(30);
    let question = "river";
    let before = search_json(&f.index, question, "hybrid", 5);
    let current = std::fs::read_to_string(f.index.join("CURRENT")).unwrap();
    // A bigger corpus takes long enough to be killed mid-way.
    let big = f.data.parent().unwrap().join("big");
    ok(&[
        "corpus",
        "generate",
        "--out",
        s(&big),
        "--documents",
        "1500",
        "--questions",
        "10",
        "--seed",
        "9",
    ]);
    for delay_ms in [300u64, 1500, 4000] {
        let mut child = common::capstan()
            .args([
                "index",
                s(&big.join("corpus.jsonl")),
                "--out",
                s(&f.index),
                "--encoder",
                s(&encoder_dir()),
                "-q",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(delay_ms);
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                panic!("indexing finished before it could be killed; make the corpus bigger");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert_eq!(
            std::fs::read_to_string(f.index.join("CURRENT")).unwrap(),
            current
        );
        assert_eq!(
            search_json(&f.index, question, "hybrid", 5),
            before,
            "killed after {delay_ms} ms"
        );
    }
    // The stale lock and partial generation do not block the next run.
    ok(&[
        "index",
        s(&f.data.join("corpus.jsonl")),
        "--out",
        s(&f.index),
        "--encoder",
        s(&encoder_dir()),
        "-q",
    ]);
    assert_eq!(search_json(&f.index, question, "hybrid", 5), before);
}
