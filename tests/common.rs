//! Helpers shared by the end-to-end tests: run the built `capstan` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn capstan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
}

/// Runs capstan with `args`; returns the output whatever the exit status.
pub fn run(args: &[&str]) -> Output {
    capstan().args(args).output().expect("capstan runs")
}

/// Runs capstan and asserts success; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "capstan {args:?} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs capstan and asserts failure; returns stderr.
pub fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "capstan {args:?} should fail");
    String::from_utf8(out.stderr).expect("utf-8 stderr")
}

/// The encoder folder scripts/setup.sh installs (or `CAPSTAN_ENCODER`).
pub fn encoder_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_ENCODER") {
        return dir.into();
    }
    let home = std::env::var_os("CAPSTAN_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/capstan")
        });
    home.join("models/all-MiniLM-L6-v2")
}

/// The real PDF, DOCX and EPUB files of scripts/fetch-documents.sh (or
/// `CAPSTAN_DOCUMENTS`); missing, the test fails (it never passes by skipping).
pub fn documents() -> PathBuf {
    let dir = std::env::var_os("CAPSTAN_DOCUMENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| encoder_dir().join("../../documents"));
    assert!(
        dir.join(".complete").exists(),
        "{} is missing: run scripts/fetch-documents.sh",
        dir.display()
    );
    dir
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Every file below `dir` with its bytes, to prove a folder did not change.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A generated encyclopedia in `dir/enc` (BEIR files + questions.jsonl) and
/// its index in `dir/index`, built with the default encoder.
pub fn generated_index(
    dir: &Path,
    documents: usize,
    questions: usize,
    seed: u64,
) -> (PathBuf, PathBuf) {
    let data = generated_corpus(dir, documents, questions, seed);
    let index = dir.join("index");
    ok(&[
        "index",
        s(&data.join("corpus.jsonl")),
        "--out",
        s(&index),
        "--encoder",
        s(&encoder_dir()),
        "-q",
    ]);
    (data, index)
}

/// The text of each query of a BEIR folder's `queries.jsonl`.
pub fn questions(data: &Path) -> Vec<String> {
    std::fs::read_to_string(data.join("queries.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// A generated encyclopedia in `dir/enc` (BEIR files + questions.jsonl).
pub fn generated_corpus(dir: &Path, documents: usize, questions: usize, seed: u64) -> PathBuf {
    let data = dir.join("enc");
    ok(&[
        "corpus",
        "generate",
        "--out",
        s(&data),
        "--documents",
        &documents.to_string(),
        "--questions",
        &questions.to_string(),
        "--seed",
        &seed.to_string(),
    ]);
    data
}

/// The SmolLM2 GGUF that scripts/setup.sh installs.
pub fn smollm2() -> PathBuf {
    let path = capstan_reader::default_model_path().expect("HOME is set");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    path
}
