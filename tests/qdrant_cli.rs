//! End-to-end through a real 3-node Qdrant cluster on loopback: `capstan
//! index --out qdrant://…` from two `--part` writers at once, `search`,
//! `ask` and `index delete` on the collection, and `capstan serve` over it:
//! answering, 503 while the whole cluster is down, answering again when it
//! is back. And the refusals: an unreachable cluster at start, folder-only
//! commands and Qdrant-only flags.

mod common;
#[path = "../qdrant/tests/harness/mod.rs"]
mod harness;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{capstan, encoder_dir, fails, generated_corpus, ok, questions, s};
use harness::{http_get, TestCluster};
use serde_json::{json, Value};

/// `POST path` with a JSON body: (status, Retry-After, body).
fn post(port: u16, path: &str, body: &Value) -> (u16, Option<String>, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the server listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let retry_after = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("retry-after:")
            .map(|v| v.trim().to_string())
    });
    (
        status,
        retry_after,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// A child process killed when dropped (also when the test fails).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn search_json(index: &str, query: &str) -> Vec<Value> {
    let out = ok(&[
        "search",
        index,
        query,
        "--mode",
        "bm25",
        "-k",
        "5",
        "--json",
        "--encoder",
        s(&encoder_dir()),
    ]);
    serde_json::from_str::<Vec<Value>>(&out).unwrap()
}

#[test]
fn index_search_ask_and_serve_through_a_qdrant_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let data = generated_corpus(tmp.path(), 60, 8, 3);
    let corpus = data.join("corpus.jsonl");
    let mut cluster = TestCluster::start(3);
    let location = cluster.location("cli", &[0, 1, 2], "?retry=1");

    // Two writers at once, each its half: one creates the collection, the other joins it.
    let writers: Vec<_> = ["1/2", "2/2"]
        .iter()
        .map(|part| {
            capstan()
                .args(["index", s(&corpus), "--out", &location, "--part", part])
                .args(["--shards", "1", "--replication-factor", "2", "-q"])
                .args(["--encoder", s(&encoder_dir())])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut created = 0;
    let mut documents = 0;
    for w in writers {
        let out = w.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        created += text.starts_with("created") as usize;
        let n: usize = text
            .split("documents): wrote ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        documents += n;
    }
    assert_eq!((created, documents), (1, 60));
    // Running a part again writes nothing.
    let again = ok(&[
        "index",
        s(&corpus),
        "--out",
        &location,
        "--part",
        "1/2",
        "-q",
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(again.contains("wrote 0 document(s)"), "{again}");
    // One collection holds int8 or float vectors (the writers above wrote int8, the CPU's
    // default): a float writer is refused, naming both.
    let err = fails(&[
        "index",
        s(&corpus),
        "--out",
        &location,
        "--part",
        "1/2",
        "--encoder-dtype",
        "f32",
        "-q",
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(
        err.contains("encoder precision") && err.contains("int8") && err.contains("f32"),
        "{err}"
    );

    // The same BM25 ranking as an index folder of the same corpus.
    let folder = tmp.path().join("index");
    ok(&[
        "index",
        s(&corpus),
        "--out",
        s(&folder),
        "--no-sentence-vectors",
        "-q",
        "--encoder",
        s(&encoder_dir()),
    ]);
    for q in questions(&data).iter().take(4) {
        let (a, b) = (search_json(s(&folder), q), search_json(&location, q));
        assert_eq!(a[0]["passage_id"], b[0]["passage_id"], "{q}");
        for (x, y) in a.iter().zip(&b) {
            let (x, y) = (x["score"].as_f64().unwrap(), y["score"].as_f64().unwrap());
            assert!((x - y).abs() < 1e-3 * x.abs(), "{q}: {x} vs {y}");
        }
    }
    let q = &questions(&data)[0];
    let answer = ok(&[
        "ask",
        &location,
        q,
        "--encoder",
        s(&encoder_dir()),
        "--no-default-model",
    ]);
    assert!(!answer.trim().is_empty());

    // A server of the collection holds nothing local but the encoder.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = tmp.path().join("serve.log");
    let mut server = Killed(
        capstan()
            .args([
                "serve",
                "--index",
                &location,
                "--addr",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--no-default-model", "--encoder", s(&encoder_dir())])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let health = loop {
        if let Some((200, body)) = http_get(port, "/health") {
            break serde_json::from_str::<Value>(&body).unwrap();
        }
        assert!(
            server.0.try_wait().unwrap().is_none(),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        assert!(Instant::now() < deadline, "serve never became healthy");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(health["index"]["documents"], 60);
    let (status, _, body) = post(port, "/v1/search", &json!({"query": q, "k": 3}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["hits"].as_array().unwrap().len(), 3);
    let (status, _, body) = post(port, "/v1/qa", &json!({"question": q, "k": 3}));
    assert_eq!(status, 200, "{body}");
    assert!(!body["answer"].as_str().unwrap().is_empty());

    // The whole cluster down: 503 saying so, never a hang or a 500.
    for i in 0..3 {
        cluster.kill(i);
    }
    let start = Instant::now();
    let (status, retry_after, body) = post(port, "/v1/search", &json!({"query": q, "k": 3}));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "index_unavailable", "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(http_get(port, "/health").map(|r| r.0), Some(503));
    // Back: answers again by itself.
    for i in 0..3 {
        cluster.restart(i);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _, body) = post(port, "/v1/search", &json!({"query": q, "k": 3}));
        if status == 200 {
            assert_eq!(body["hits"].as_array().unwrap().len(), 3);
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            Instant::now() < deadline,
            "no answer 60 s after the cluster came back"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(server);

    let deleted = ok(&["index", "delete", &location, "--ids", "doc-00001,doc-00002"]);
    assert!(deleted.starts_with("deleted 2 document(s)"), "{deleted}");
}

#[test]
fn unreachable_clusters_folder_commands_and_qdrant_flags_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c.jsonl");
    std::fs::write(&corpus, "{\"_id\":\"a\",\"text\":\"alpha beta\"}\n").unwrap();
    let nowhere = "qdrant://127.0.0.1:1/gone?retry=0.3";
    let start = Instant::now();
    let err = fails(&[
        "serve",
        "--index",
        nowhere,
        "--no-default-model",
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(
        err.contains("qdrant://127.0.0.1:1/gone") && err.contains("unavailable"),
        "{err}"
    );
    let err = fails(&[
        "index",
        s(&corpus),
        "--out",
        nowhere,
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(
        err.contains("qdrant://127.0.0.1:1/gone") && err.contains("unavailable"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(30));
    let err = fails(&["index", "verify", "qdrant://127.0.0.1:1/gone"]);
    assert!(err.contains("is for index folders"), "{err}");
    let err = fails(&["search", "qdrant://127.0.0.1:1/", "query"]);
    assert!(err.contains("collection name"), "{err}");
    let err = fails(&[
        "index",
        s(&corpus),
        "--out",
        s(&tmp.path().join("idx")),
        "--shards",
        "2",
        "--encoder",
        s(&encoder_dir()),
    ]);
    assert!(
        err.contains("--shards only apply to a Qdrant collection"),
        "{err}"
    );
}
