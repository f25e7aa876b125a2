//! End-to-end: `capstan serve` over a small generated index, driven by a
//! minimal HTTP/1.1 client on `std::net`: a catalogue of bad requests (each a
//! 4xx with a JSON error, never a 5xx, and the server keeps serving), every
//! route's good path, the API key, overload (503 + Retry-After) and graceful
//! shutdown on SIGTERM with a request in flight.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{capstan, documents, encoder_dir, ok, questions, s, smollm2};
use serde_json::{json, Value};

// ---------------------------------------------------------------- fixture

struct Fixture {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    index: PathBuf,
}

/// One small index shared by every test in this file (indexing is the slow part).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let (data, index) = common::generated_index(tmp.path(), 40, 10, 11);
        Fixture {
            _tmp: tmp,
            data,
            index,
        }
    })
}

// ---------------------------------------------------------------- server

/// A running `capstan serve`, killed when dropped (even when a test fails).
struct Server {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl Server {
    /// Starts `capstan serve` on a free port with `extra` arguments and waits for /health.
    /// Each server gets its own copy of the index: the passage store is locked
    /// by the process that opens it.
    fn start(index: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(index, extra, &[])
    }

    /// As [`Server::start`], with environment variables.
    fn start_with_env(index: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut last = String::new();
        for _attempt in 0..5 {
            let port = free_port();
            let logdir = tempfile::tempdir().unwrap();
            let log = logdir.path().join("serve.log");
            let copy = logdir.path().join("index");
            copy_dir(index, &copy);
            let index = copy.as_path();
            let addr = format!("127.0.0.1:{port}");
            // These tests are about the server, not the default LLM: load it only when asked.
            let default_model: &[&str] = if extra.contains(&"--llama-model") {
                &[]
            } else {
                &["--no-default-model"]
            };
            let child = capstan()
                .args(["serve", "--index", s(index), "--addr", &addr])
                .args(default_model)
                .args(extra)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("capstan serve starts");
            let mut server = Server {
                child: Some(child),
                port,
                log,
                _logdir: logdir,
            };
            if server.wait_healthy(Duration::from_secs(120)) {
                return server;
            }
            last = server.log_text();
            // Most likely the port was taken between choosing and binding: retry.
        }
        panic!("capstan serve did not become healthy:\n{last}");
    }

    fn wait_healthy(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if let Ok(r) = try_request(self.port, "GET", "/health", &[], None) {
                if r.status == 200 {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn get(&self, path: &str) -> Resp {
        self.call("GET", path, &[], None)
    }

    fn post(&self, path: &str, body: &Value) -> Resp {
        self.post_raw(path, body.to_string().as_bytes())
    }

    fn post_raw(&self, path: &str, body: &[u8]) -> Resp {
        self.call(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body),
        )
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        try_request(self.port, method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\nserver log:\n{}", self.log_text()))
    }

    /// Waits for the process to exit; its status.
    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn pdf_passages_are_cited_by_page_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("docs");
    let index = tmp.path().join("index");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(
        documents().join("pdf/neatoguide.pdf"),
        folder.join("neatoguide.pdf"),
    )
    .unwrap();
    ok(&[
        "index",
        s(&folder),
        "--out",
        s(&index),
        "--encoder",
        s(&encoder_dir()),
        "-q",
    ]);
    let srv = Server::start(&index, &[]);
    let question = "What is the default number of iterations in neato?";
    let search = srv
        .post("/v1/search", &json!({"query": question, "k": 3}))
        .ok_json();
    for hit in search["hits"].as_array().unwrap() {
        assert_eq!(hit["doc_id"], "neatoguide.pdf");
        let (a, b) = (
            hit["page_start"].as_u64().unwrap(),
            hit["page_end"].as_u64().unwrap(),
        );
        assert!((1..=b).contains(&a) && b <= 11, "{hit}");
    }
    let qa = srv.post("/v1/qa", &json!({"question": question})).ok_json();
    assert!(qa["passages"][0]["page_start"].is_u64(), "{qa}");
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": question}]}),
        )
        .ok_json();
    let sources = chat["sources"].as_array().unwrap();
    assert!(!sources.is_empty(), "{chat}");
    for source in sources {
        assert_eq!(source["doc_id"], "neatoguide.pdf");
        assert!(
            source["page_start"].is_u64() && source["page_end"].is_u64(),
            "{source}"
        );
        assert!(chat["citations"]
            .as_array()
            .unwrap()
            .contains(&source["passage_id"]));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

// ---------------------------------------------------------------- client

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// Asserts a 200 and returns the JSON body.
    fn ok_json(&self) -> Value {
        assert_eq!(self.status, 200, "{}", self.text());
        self.json()
    }

    /// Server-sent events as (event name, data) pairs.
    fn events(&self) -> Vec<(String, String)> {
        let text = self.text().replace("\r\n", "\n");
        let mut out = Vec::new();
        for block in text.split("\n\n") {
            let mut event = "message".to_string();
            let mut data: Vec<&str> = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if !data.is_empty() {
                out.push((event, data.join("\n")));
            }
        }
        out
    }
}

/// Writes a whole HTTP/1.1 request (Connection: close) and reads the response.
fn try_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Resp, String> {
    let mut stream = connect(port)?;
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    // The server may answer (413, say) and close before reading all of a
    // large body; the answer is still there to read.
    let _ = stream.write_all(&bytes);
    read_response(&mut stream)
}

fn connect(port: u16) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    Ok(stream)
}

fn read_response(stream: &mut TcpStream) -> Result<Resp, String> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A reset after the answer arrived (the server closed with our body unread).
            Err(e) if !raw.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(format!("read: {e} (after {} bytes)", raw.len())),
        }
    }
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Result<Resp, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no header end in {:?}", String::from_utf8_lossy(raw)))?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|e| e.to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunked body ends without a last chunk")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Asserts a 4xx with `{"error": {"type", "message"}}`; returns (status, type).
fn assert_client_error(what: &str, r: &Resp) -> (u16, String) {
    assert!(
        (400..500).contains(&r.status),
        "{what}: expected a 4xx, got {}: {}",
        r.status,
        r.text()
    );
    let ctype = r.header("content-type").unwrap_or_default();
    assert!(
        ctype.starts_with("application/json"),
        "{what}: content-type {ctype:?}"
    );
    let body: Value = serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{what}: error body is not JSON ({e}): {}", r.text()));
    let kind = body["error"]["type"].as_str();
    let message = body["error"]["message"].as_str();
    assert!(
        kind.is_some_and(|k| !k.is_empty()) && message.is_some_and(|m| !m.is_empty()),
        "{what}: error body lacks error.type / error.message: {body}"
    );
    (r.status, kind.unwrap().to_string())
}

// ---------------------------------------------------------------- tests

#[test]
fn bad_requests_get_4xx_json_errors_and_the_server_keeps_serving() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--max-body-bytes", "16384", "--workers", "2"]);
    let question = questions(&f.data)[0].clone();
    let huge = "why ".repeat(600); // 2400 characters, over the 2000 limit, under the body limit
    let too_big = format!("{{\"question\":\"{}\"}}", "x".repeat(20_000));

    let post = |p: &str, b: &str| srv.post_raw(p, b.as_bytes());
    let cases: Vec<(&str, Resp, Option<u16>)> = vec![
        ("qa: malformed JSON", post("/v1/qa", "{\"question\": "), Some(400)),
        ("qa: not JSON at all", post("/v1/qa", "question=why"), Some(400)),
        ("qa: empty body", post("/v1/qa", ""), Some(400)),
        ("qa: JSON array", post("/v1/qa", "[1,2]"), Some(400)),
        ("qa: invalid UTF-8", srv.post_raw("/v1/qa", b"{\"question\":\"\xff\xfe\"}"), Some(400)),
        ("qa: question is a number", post("/v1/qa", r#"{"question": 5}"#), Some(400)),
        ("qa: question is null", post("/v1/qa", r#"{"question": null}"#), Some(400)),
        ("qa: k is a string", post("/v1/qa", r#"{"question": "why", "k": "ten"}"#), Some(400)),
        ("qa: k is negative", post("/v1/qa", r#"{"question": "why", "k": -1}"#), Some(400)),
        ("qa: k is a float", post("/v1/qa", r#"{"question": "why", "k": 2.5}"#), Some(400)),
        ("qa: k overflows", post("/v1/qa", r#"{"question": "why", "k": 1e30}"#), Some(400)),
        ("qa: stream is a string", post("/v1/qa", r#"{"question": "why", "stream": "yes"}"#), Some(400)),
        ("qa: missing question", post("/v1/qa", "{}"), Some(400)),
        ("qa: empty question", post("/v1/qa", r#"{"question": ""}"#), Some(400)),
        ("qa: blank question", post("/v1/qa", r#"{"question": " \n\t "}"#), Some(400)),
        ("qa: huge question", srv.post("/v1/qa", &json!({ "question": huge })), Some(400)),
        ("qa: k = 0", srv.post("/v1/qa", &json!({"question": question, "k": 0})), Some(400)),
        ("qa: k = 10^9", srv.post("/v1/qa", &json!({"question": question, "k": 1_000_000_000u64})), Some(400)),
        ("qa: unknown mode", srv.post("/v1/qa", &json!({"question": question, "mode": "psychic"})), Some(400)),
        ("qa: unknown reader", srv.post("/v1/qa", &json!({"question": question, "reader": "gpt"})), Some(400)),
        ("qa: reader not loaded", srv.post("/v1/qa", &json!({"question": question, "reader": "llama"})), Some(400)),
        ("qa: unknown field", srv.post("/v1/qa", &json!({"question": question, "colour": "blue"})), Some(400)),
        ("qa: max_tokens = 0", srv.post("/v1/qa", &json!({"question": question, "max_tokens": 0})), Some(400)),
        ("qa: temperature = 9", srv.post("/v1/qa", &json!({"question": question, "temperature": 9})), Some(400)),
        ("qa: top_p = 0", srv.post("/v1/qa", &json!({"question": question, "top_p": 0})), Some(400)),
        ("qa: top_k = 0", srv.post("/v1/qa", &json!({"question": question, "top_k": 0})), Some(400)),
        ("qa: oversized body", post("/v1/qa", &too_big), Some(413)),
        (
            "qa: oversized chunked body",
            chunked_post(srv.port, "/v1/qa", too_big.as_bytes()),
            Some(413),
        ),
        ("search: missing query", srv.post("/v1/search", &json!({"k": 3})), Some(400)),
        ("search: empty query", srv.post("/v1/search", &json!({"query": ""})), Some(400)),
        ("search: k = 0", srv.post("/v1/search", &json!({"query": question, "k": 0})), Some(400)),
        ("search: k = 10^9", srv.post("/v1/search", &json!({"query": question, "k": 1_000_000_000u64})), Some(400)),
        ("search: unknown field", srv.post("/v1/search", &json!({"query": question, "top": 3})), Some(400)),
        (
            "search: bad fusion",
            srv.post("/v1/search", &json!({"query": question, "mode": "hybrid", "fusion": {"method": "magic"}})),
            Some(400),
        ),
        (
            "search: fusion weight out of range",
            srv.post(
                "/v1/search",
                &json!({"query": question, "mode": "hybrid", "fusion": {"method": "weighted", "bm25_weight": 7.0}}),
            ),
            Some(400),
        ),
        (
            "search: negative rrf k",
            srv.post(
                "/v1/search",
                &json!({"query": question, "mode": "hybrid", "fusion": {"method": "rrf", "k": -1.0}}),
            ),
            Some(400),
        ),
        ("embeddings: missing input", srv.post("/v1/embeddings", &json!({})), Some(400)),
        ("embeddings: input is a number", srv.post("/v1/embeddings", &json!({"input": 5})), Some(400)),
        ("embeddings: token arrays", srv.post("/v1/embeddings", &json!({"input": [[1, 2, 3]]})), Some(400)),
        ("embeddings: empty list", srv.post("/v1/embeddings", &json!({"input": []})), Some(400)),
        ("embeddings: empty string", srv.post("/v1/embeddings", &json!({"input": ""})), Some(400)),
        (
            "embeddings: bad encoding_format",
            srv.post("/v1/embeddings", &json!({"input": "hello", "encoding_format": "int8"})),
            Some(400),
        ),
        (
            "embeddings: unknown model",
            srv.post("/v1/embeddings", &json!({"input": "hello", "model": "text-embedding-3-large"})),
            Some(404),
        ),
        (
            "embeddings: wrong dimensions",
            srv.post("/v1/embeddings", &json!({"input": "hello", "dimensions": 1536})),
            Some(400),
        ),
        ("chat: missing messages", srv.post("/v1/chat/completions", &json!({"model": "capstan"})), Some(400)),
        ("chat: empty messages", srv.post("/v1/chat/completions", &json!({"messages": []})), Some(400)),
        ("chat: messages not a list", srv.post("/v1/chat/completions", &json!({"messages": "hi"})), Some(400)),
        (
            "chat: no user message",
            srv.post("/v1/chat/completions", &json!({"messages": [{"role": "system", "content": "be brief"}]})),
            Some(400),
        ),
        (
            "chat: empty user message",
            srv.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": ""}]})),
            Some(400),
        ),
        (
            "chat: unknown model",
            srv.post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}),
            ),
            Some(404),
        ),
        (
            "chat: model not loaded",
            srv.post(
                "/v1/chat/completions",
                &json!({"model": "capstan-llama", "messages": [{"role": "user", "content": question}]}),
            ),
            Some(404),
        ),
        (
            "chat: n = 2",
            srv.post("/v1/chat/completions", &json!({"n": 2, "messages": [{"role": "user", "content": question}]})),
            Some(400),
        ),
        (
            "chat: temperature = -1",
            srv.post(
                "/v1/chat/completions",
                &json!({"temperature": -1, "messages": [{"role": "user", "content": question}]}),
            ),
            Some(400),
        ),
        (
            "chat: streamed, unknown model",
            srv.post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": question}]}),
            ),
            Some(404),
        ),
        ("unknown route", srv.get("/v1/nothing-here"), Some(404)),
        ("unknown route, POST", srv.post("/v2/qa", &json!({"question": question})), Some(404)),
        ("wrong method: GET /v1/qa", srv.get("/v1/qa"), Some(405)),
        ("wrong method: DELETE /v1/search", srv.call("DELETE", "/v1/search", &[], None), Some(405)),
        ("wrong method: POST /health", srv.post("/health", &json!({})), Some(405)),
        ("wrong method: PUT /v1/models", srv.call("PUT", "/v1/models", &[], Some(b"{}")), Some(405)),
    ];
    let mut failures = Vec::new();
    for (what, r, expected) in &cases {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (status, _) = assert_client_error(what, r);
            if let Some(e) = expected {
                assert_eq!(status, *e, "{what}: {}", r.text());
            }
            if status == 405 {
                assert!(
                    r.header("allow").is_some(),
                    "{what}: 405 without an Allow header"
                );
            }
        }));
        if let Err(e) = result {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(msg);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad requests were answered wrongly:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // The server still serves, and counted what it refused.
    let answer = srv.post("/v1/qa", &json!({"question": question})).ok_json();
    assert!(!answer["answer"].as_str().unwrap().is_empty());
    let metrics = srv.get("/metrics").text();
    assert!(
        metrics.contains(r#"capstan_http_requests_total{route="/v1/qa",status="400"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"capstan_http_requests_total{route="/v1/qa",status="413"}"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"status="5"#),
        "a 5xx was counted:\n{metrics}"
    );
}

/// A POST whose body is sent chunked (no Content-Length), so the limit bites while reading.
fn chunked_post(port: u16, path: &str, body: &[u8]) -> Resp {
    let mut stream = connect(port).unwrap();
    let mut bytes = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for piece in body.chunks(4096) {
        bytes.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        bytes.extend_from_slice(piece);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"0\r\n\r\n");
    let _ = stream.write_all(&bytes);
    read_response(&mut stream).unwrap()
}

#[test]
fn odd_but_valid_questions_are_answered() {
    let f = fixture();
    let srv = Server::start(&f.index, &[]);
    // Query-syntax characters, non-ASCII, emoji, one long word, one character:
    // all legitimate questions; none may fail the server.
    let long_word = "a".repeat(1999);
    let odd = [
        "AND OR NOT (",
        "title:\"unclosed",
        "*",
        "+-&&||!(){}[]^\"~*?:\\/",
        "Wer gründete die Stadt? 誰が町を作った？",
        "🦀🦀🦀 where is the crab?",
        long_word.as_str(),
        "?",
        "null\u{0}byte",
    ];
    for q in odd {
        for mode in ["bm25", "dense", "hybrid"] {
            let r = srv.post("/v1/qa", &json!({"question": q, "mode": mode, "k": 5}));
            assert_eq!(r.status, 200, "qa {mode} {q:?}: {}", r.text());
            let a = r.json();
            if let Some(h) = a["highlight"].as_object() {
                let p = a["passages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["passage_id"] == h["passage_id"])
                    .expect("the highlighted passage is among the passages");
                let chars: Vec<char> = p["text"].as_str().unwrap().chars().collect();
                let (start, end) = (
                    h["start"].as_u64().unwrap() as usize,
                    h["end"].as_u64().unwrap() as usize,
                );
                let marked: String = chars[start..end].iter().collect();
                assert_eq!(
                    marked,
                    a["answer"].as_str().unwrap(),
                    "highlight offsets are the answer's"
                );
            }
            let r = srv.post("/v1/search", &json!({"query": q, "mode": mode, "k": 3}));
            assert_eq!(r.status, 200, "search {mode} {q:?}: {}", r.text());
        }
    }
}

#[test]
fn every_route_answers() {
    let f = fixture();
    let srv = Server::start(&f.index, &[]);
    let qs = questions(&f.data);
    let question = &qs[0];

    // /health
    let health = srv.get("/health").ok_json();
    assert_eq!(health["status"], "ok");
    assert!(
        health["index"]["passages"].as_u64().unwrap() >= 40,
        "{health}"
    );
    assert_eq!(health["readers"], json!(["extractive"]));
    // /health is public: it names the encoder, never a path.
    assert_eq!(health["index"]["encoder"], "all-MiniLM-L6-v2", "{health}");
    assert!(
        !health.to_string().contains('/'),
        "a path in /health: {health}"
    );

    // /v1/qa, JSON
    let a = srv
        .post("/v1/qa", &json!({"question": question, "k": 5}))
        .ok_json();
    let answer = a["answer"].as_str().unwrap().to_string();
    assert!(!answer.is_empty(), "{a}");
    let passages = a["passages"].as_array().unwrap();
    assert!(!passages.is_empty() && passages.len() <= 5, "{a}");
    let cited = a["citations"].as_array().unwrap();
    assert_eq!(cited.len(), 1, "{a}");
    let cited_passage = passages
        .iter()
        .find(|p| p["passage_id"] == cited[0])
        .expect("cited passage returned");
    assert!(
        cited_passage["text"].as_str().unwrap().contains(&answer),
        "the answer is a sentence of its passage"
    );
    assert_eq!(a["highlight"]["passage_id"], cited[0]);
    assert_eq!(a["reader"], "extractive");
    for t in ["retrieve_ms", "assemble_ms", "read_ms", "total_ms"] {
        assert!(a["timings"][t].as_f64().unwrap() >= 0.0, "{t}: {a}");
    }
    assert!(a["usage"].is_object());
    for mode in ["bm25", "dense", "hybrid"] {
        let m = srv
            .post(
                "/v1/qa",
                &json!({"question": question, "mode": mode, "k": 3}),
            )
            .ok_json();
        assert!(!m["answer"].as_str().unwrap().is_empty(), "{mode}: {m}");
    }

    // /v1/qa, streamed: token events, then one answer event equal to the JSON answer.
    let r = srv.post(
        "/v1/qa",
        &json!({"question": question, "k": 5, "stream": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert!(
        names.len() >= 2 && names[..names.len() - 1].iter().all(|e| *e == "token"),
        "{names:?}"
    );
    assert_eq!(*names.last().unwrap(), "answer", "{names:?}");
    let streamed: String = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(streamed, answer);
    assert_eq!(last["answer"].as_str().unwrap(), answer);
    assert_eq!(last["citations"], a["citations"]);

    // /v1/search
    let hits = srv
        .post("/v1/search", &json!({"query": question, "k": 4}))
        .ok_json();
    let list = hits["hits"].as_array().unwrap();
    assert!(!list.is_empty() && list.len() <= 4, "{hits}");
    for field in ["passage_id", "doc_id", "title", "text", "score"] {
        assert!(!list[0][field].is_null(), "hit lacks {field}: {hits}");
    }
    let weighted = srv
        .post(
            "/v1/search",
            &json!({"query": question, "mode": "hybrid", "fusion": {"method": "weighted", "bm25_weight": 0.3}}),
        )
        .ok_json();
    assert!(!weighted["hits"].as_array().unwrap().is_empty());

    // /v1/embeddings: float and base64 give the same vectors.
    let input = json!(["the harbour town", question]);
    let fl = srv
        .post("/v1/embeddings", &json!({"input": input}))
        .ok_json();
    let b64 = srv
        .post(
            "/v1/embeddings",
            &json!({"input": input, "encoding_format": "base64"}),
        )
        .ok_json();
    assert_eq!(fl["object"], "list");
    assert_eq!(fl["data"].as_array().unwrap().len(), 2);
    for i in 0..2 {
        assert_eq!(fl["data"][i]["index"], i);
        assert_eq!(fl["data"][i]["object"], "embedding");
        let floats: Vec<f32> = fl["data"][i]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(floats.len(), 384);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64["data"][i]["embedding"].as_str().unwrap())
            .unwrap();
        let decoded: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(decoded, floats, "input {i}: base64 and float differ");
        let norm: f32 = floats.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "normalised: {norm}");
    }
    assert!(fl["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let model = fl["model"].as_str().unwrap().to_string();
    let one = srv
        .post(
            "/v1/embeddings",
            &json!({"input": "the harbour town", "model": model}),
        )
        .ok_json();
    assert_eq!(
        one["data"][0]["embedding"], fl["data"][0]["embedding"],
        "one string = first of the list"
    );

    // /v1/chat/completions
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"model": "capstan", "messages": [
                {"role": "system", "content": "Answer from the index."},
                {"role": "user", "content": question}]}),
        )
        .ok_json();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        chat["choices"][0]["message"]["content"].as_str().unwrap(),
        answer
    );
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    assert!(chat["usage"]["total_tokens"].is_u64());
    let parts = srv
        .post(
            "/v1/chat/completions",
            &json!({"model": "capstan-extractive", "messages": [
                {"role": "user", "content": [{"type": "text", "text": question}]}]}),
        )
        .ok_json();
    assert_eq!(
        parts["choices"][0]["message"]["content"].as_str().unwrap(),
        answer
    );

    // Streamed chat: role chunk, content chunks, a finish chunk, then [DONE].
    let r = srv.post(
        "/v1/chat/completions",
        &json!({"model": "capstan", "stream": true, "messages": [{"role": "user", "content": question}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().unwrap().1, "[DONE]", "{events:?}");
    assert!(
        r.text().trim_end().ends_with("data: [DONE]"),
        "{}",
        r.text()
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(name, d)| {
            assert_eq!(name, "message", "OpenAI streams have no event names");
            serde_json::from_str(d).unwrap()
        })
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert!(
        chunks.iter().all(|c| c["id"] == chunks[0]["id"]),
        "one id per stream"
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, answer);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    // /v1/models
    let models = srv.get("/v1/models").ok_json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"capstan-extractive") && ids.contains(&model.as_str()),
        "{ids:?}"
    );
    let one = srv.get("/v1/models/capstan-extractive").ok_json();
    assert_eq!(one["id"], "capstan-extractive");
    assert_eq!(one["object"], "model");
    let (status, kind) = assert_client_error("unknown model", &srv.get("/v1/models/gpt-4o"));
    assert_eq!((status, kind.as_str()), (404, "model_not_found"));

    // / (the web page)
    let page = srv.get("/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page.text().contains("<form id=\"ask\""));

    // /openapi.json parses and lists every path the server routes.
    let spec = srv.get("/openapi.json").ok_json();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    assert!(
        spec.get("security").is_none(),
        "no key configured, none documented"
    );
    assert_eq!(
        spec["paths"]["/v1/qa"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            ["properties"]["k"]["anyOf"][0]["maximum"],
        100
    );
    let paths = spec["paths"].as_object().unwrap();
    let routes = [
        ("/", "get"),
        ("/health", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/v1/qa", "post"),
        ("/v1/search", "post"),
        ("/v1/embeddings", "post"),
        ("/v1/chat/completions", "post"),
    ];
    for (path, method) in routes {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "openapi.json lacks {method} {path}"
        );
    }
    assert_eq!(
        paths.len(),
        routes.len(),
        "openapi.json lists a path the server lacks: {:?}",
        paths.keys()
    );

    // /metrics counts every route it served.
    let metrics = srv.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    let text = metrics.text();
    for (path, _) in routes.iter().filter(|(p, _)| *p != "/metrics") {
        assert!(
            text.contains(&format!(
                "capstan_http_requests_total{{route=\"{path}\",status=\"200\"}}"
            )),
            "no counter for {path}:\n{text}"
        );
    }
    for needle in [
        "capstan_http_request_duration_seconds_bucket{route=\"/v1/qa\",le=\"+Inf\"}",
        "capstan_stage_duration_seconds_count{stage=\"retrieve\"}",
        "capstan_queue_depth{queue=\"fast\"}",
        "capstan_rejected_requests_total 0",
    ] {
        assert!(text.contains(needle), "no {needle}:\n{text}");
    }
}

#[test]
fn an_empty_or_blank_api_key_is_refused_at_start() {
    let f = fixture();
    for (args, env) in [
        (vec!["--api-key", ""], vec![]),
        (vec!["--api-key", "  "], vec![]),
        (vec![], vec![("CAPSTAN_API_KEY", "")]),
    ] {
        let out = capstan()
            .args(["serve", "--index", s(&f.index), "--addr", "127.0.0.1:0"])
            .args(["--no-default-model"])
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?}: served");
        assert!(err.contains("API key is empty or blank"), "{err}");
    }
}

#[test]
fn a_search_does_not_wait_behind_a_burst_of_embeddings() {
    let f = fixture();
    // The queue deadline is not what this test is about.
    let srv = Server::start(&f.index, &["--queue-timeout", "600"]);
    let qs = questions(&f.data);
    let text = qs.join(" ");
    let port = srv.port;
    let started = Instant::now();
    let burst: Vec<_> = (0..6)
        .map(|i| {
            let body = json!({"input": vec![format!("{i} {text}"); 48]});
            std::thread::spawn(move || {
                let r = try_request(
                    port,
                    "POST",
                    "/v1/embeddings",
                    &[("Content-Type", "application/json")],
                    Some(body.to_string().as_bytes()),
                )
                .unwrap();
                (r.status, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let hits = srv
        .post("/v1/search", &json!({"query": qs[0], "k": 5}))
        .ok_json();
    let search = t.elapsed();
    assert!(!hits["hits"].as_array().unwrap().is_empty(), "{hits}");
    let done: Vec<_> = burst.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(done.iter().all(|(status, _)| *status == 200), "{done:?}");
    let burst_time = done.iter().map(|(_, d)| *d).max().unwrap();
    eprintln!("search {search:?} during an embedding burst of {burst_time:?}");
    // Behind the burst, the search would have waited for most of it.
    assert!(
        search * 3 < burst_time,
        "search took {search:?} during an embedding burst of {burst_time:?}"
    );
}

#[test]
fn api_key_guards_every_route_but_health() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--api-key", "s3cret-key"]);
    let question = questions(&f.data)[0].clone();
    let body = json!({"question": question}).to_string();
    let post = |headers: &[(&str, &str)]| {
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        srv.call("POST", "/v1/qa", &h, Some(body.as_bytes()))
    };
    let cases = [
        ("missing key", post(&[])),
        ("wrong key", post(&[("Authorization", "Bearer nope")])),
        (
            "key as a prefix",
            post(&[("Authorization", "Bearer s3cret")]),
        ),
        (
            "key not Bearer",
            post(&[("Authorization", "Basic s3cret-key")]),
        ),
        ("empty Bearer", post(&[("Authorization", "Bearer ")])),
        ("models without key", srv.get("/v1/models")),
        ("metrics without key", srv.get("/metrics")),
        ("openapi without key", srv.get("/openapi.json")),
        ("unknown route without key", srv.get("/v1/nothing")),
    ];
    for (what, r) in &cases {
        let (status, kind) = assert_client_error(what, r);
        assert_eq!(status, 401, "{what}: {}", r.text());
        assert_eq!(kind, "authentication_error", "{what}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{what}");
    }
    // /health needs no key; the web page takes it as a header or as ?key=.
    assert_eq!(srv.get("/health").status, 200);
    for (what, r) in [
        ("page without key", srv.get("/")),
        ("page with a wrong key", srv.get("/?key=nope")),
        (
            "page with the key in another parameter",
            srv.get("/?k=s3cret-key"),
        ),
        (
            "key in the query of an API route",
            srv.get("/v1/models?key=s3cret-key"),
        ),
    ] {
        let (status, kind) = assert_client_error(what, &r);
        assert_eq!(
            (status, kind.as_str()),
            (401, "authentication_error"),
            "{what}"
        );
    }
    let page = srv.get("/?key=s3cret-key");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<html"), "the page itself");
    let page = srv.call("GET", "/", &[("Authorization", "Bearer s3cret-key")], None);
    assert_eq!(page.status, 200);
    let good = post(&[("Authorization", "Bearer s3cret-key")]).ok_json();
    assert!(!good["answer"].as_str().unwrap().is_empty());
    let lower = post(&[("Authorization", "bearer s3cret-key")]);
    assert_eq!(
        lower.status,
        200,
        "the auth scheme is case-insensitive: {}",
        lower.text()
    );
    let spec = srv
        .call(
            "GET",
            "/openapi.json",
            &[("Authorization", "Bearer s3cret-key")],
            None,
        )
        .ok_json();
    assert_eq!(
        spec["security"],
        json!([{"bearer": []}]),
        "the spec says a key is needed"
    );
    assert_eq!(spec["paths"]["/health"]["get"]["security"], json!([]));
    let models = srv.call(
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer s3cret-key")],
        None,
    );
    assert_eq!(models.status, 200);
}

/// Sends every `(path, body)` POST at once (connected first, released together by a barrier);
/// the responses in order.
fn burst(port: u16, requests: Vec<(&'static str, Value)>) -> Vec<(&'static str, Resp)> {
    let barrier = Arc::new(Barrier::new(requests.len()));
    let handles: Vec<_> = requests
        .into_iter()
        .map(|(path, body)| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let body = body.to_string();
                let mut stream = connect(port).unwrap();
                let req = format!(
                    "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                barrier.wait();
                stream.write_all(req.as_bytes()).unwrap();
                (path, read_response(&mut stream).unwrap())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn overload_gets_503_with_retry_after() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--workers", "1", "--queue", "1"]);
    let qs = questions(&f.data);
    let requests = (0..48)
        .map(|i| {
            let q = qs[i % qs.len()].clone();
            match i % 4 {
                0 => ("/v1/search", json!({"query": q, "k": 20})),
                // A slow one (~0.1 s of encoding) keeps the worker busy.
                1 => ("/v1/embeddings", json!({"input": vec![q; 64]})),
                2 => ("/v1/qa", json!({"question": q, "k": 20, "stream": true})),
                _ => ("/v1/qa", json!({"question": q, "k": 20})),
            }
        })
        .collect();
    let results = burst(srv.port, requests);
    let mut ok = 0;
    let mut rejected = 0;
    for (path, r) in &results {
        match r.status {
            200 => ok += 1,
            503 => {
                rejected += 1;
                let (_, kind) = assert_client_error_body(path, r);
                assert_eq!(kind, "overloaded");
                let retry = r.header("retry-after").expect("503 carries Retry-After");
                assert!(
                    retry.parse::<u64>().is_ok_and(|s| s >= 1),
                    "Retry-After {retry:?}"
                );
            }
            other => panic!("{path}: unexpected {other}: {}", r.text()),
        }
    }
    eprintln!("overload: {ok} served, {rejected} refused");
    assert!(ok >= 1, "nothing was served");
    assert!(
        rejected >= 1,
        "no request was refused with --workers 1 --queue 1 ({ok} served)"
    );
    // Once the burst is over the server serves again, and counted the refusals.
    let a = srv.post("/v1/qa", &json!({"question": qs[0]})).ok_json();
    assert!(!a["answer"].as_str().unwrap().is_empty());
    let metrics = srv.get("/metrics").text();
    assert!(
        metrics.contains(&format!("capstan_rejected_requests_total {rejected}")),
        "{rejected} rejected:\n{metrics}"
    );
    assert!(
        metrics.contains("capstan_queue_depth{queue=\"fast\"} 0"),
        "{metrics}"
    );
}

/// The value of an unlabelled-but-for-`reader` series in Prometheus text.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// A burst of generative questions against SmolLM2 with room for 2 requests in flight and a
/// queue of 8: every request gets exactly one answer (200) or a 503 with Retry-After, none is
/// lost, the scheduler never runs more sequences than were let in, and its metrics account for
/// each. (Waiting for KV budget is tested deterministically on the scheduler itself, in
/// engine/tests/scheduler.rs.)
#[test]
fn a_generative_burst_is_batched_queued_or_refused_and_never_lost() {
    let f = fixture();
    let model = smollm2();
    let srv = Server::start(
        &f.index,
        &[
            "--llama-model",
            s(&model),
            "--max-generations",
            "2",
            "--max-new-tokens",
            "4",
            // Queued generations wait as long as they need here (the deadline has its own test).
            "--queue-timeout",
            "600",
        ],
    );
    let qs = questions(&f.data);
    let n = 14;
    let requests = (0..n)
        .map(|i| {
            let question = &qs[i % qs.len()];
            (
                "/v1/qa",
                json!({"question": question, "k": 1, "reader": "llama"}),
            )
        })
        .collect();
    let results: Vec<Resp> = burst(srv.port, requests)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for r in &results {
        match r.status {
            200 => {
                let a = r.json();
                assert_eq!(a["reader"], "llama", "{a}");
                assert!(a["usage"]["generated_tokens"].as_u64().unwrap() >= 1, "{a}");
                ok += 1;
            }
            503 => {
                assert!(r.header("retry-after").is_some());
                refused += 1;
            }
            other => panic!("unexpected {other}: {}\n{}", r.text(), srv.log_text()),
        }
    }
    eprintln!("generative burst: {ok} answered, {refused} refused");
    // Up to 2 in flight + 8 queued (4 x --max-generations) are accepted (one fewer when a
    // worker has not yet taken its job when the queue fills); the rest are refused.
    assert_eq!(ok + refused, n);
    assert!((8..=10).contains(&ok), "{ok} answered");
    assert!(refused >= 1, "nothing refused");
    let m = srv.get("/metrics").text();
    let label = "{reader=\"llama\"}";
    assert_eq!(
        metric(
            &m,
            &format!("capstan_scheduler_queue_wait_seconds_count{label}")
        ),
        ok as f64,
        "each answered request was admitted once"
    );
    assert_eq!(
        metric(&m, &format!("capstan_scheduler_running_sequences{label}")),
        0.0
    );
    assert_eq!(
        metric(&m, &format!("capstan_scheduler_kv_tokens_used{label}")),
        0.0,
        "every reservation was given back"
    );
    let steps = metric(&m, &format!("capstan_scheduler_batch_size_count{label}"));
    let within_two = metric(
        &m,
        "capstan_scheduler_batch_size_bucket{reader=\"llama\",le=\"2\"}",
    );
    assert_eq!(
        within_two, steps,
        "a step ran more sequences than were let in"
    );
    assert!(
        metric(
            &m,
            &format!("capstan_scheduler_time_to_first_token_seconds_count{label}")
        ) >= ok as f64
    );
}

/// As [`assert_client_error`] for a 503 (the only 5xx a client may see).
fn assert_client_error_body(what: &str, r: &Resp) -> (u16, String) {
    assert_eq!(r.status, 503);
    let body = r.json();
    let kind = body["error"]["type"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: {body}"));
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: {body}"
    );
    (r.status, kind.to_string())
}

#[test]
fn the_cli_reads_an_index_a_server_holds_open() {
    let f = fixture();
    let srv = Server::start(&f.index, &[]);
    // The server's own copy of the index: its passage store is locked by the server.
    let index = srv._logdir.path().join("index");
    let question = &questions(&f.data)[0];
    let out = capstan()
        .args([
            "search",
            s(&index),
            question,
            "--mode",
            "hybrid",
            "-k",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "search beside a server failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    let http = srv
        .post(
            "/v1/search",
            &json!({"query": question, "mode": "hybrid", "k": 3}),
        )
        .ok_json();
    let ids = |hits: &Value| -> Vec<String> {
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| h["passage_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&cli), ids(&http["hits"]), "same index, same hits");
    // The server keeps serving.
    assert_eq!(srv.get("/health").status, 200);
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_exits_0() {
    let f = fixture();
    let mut srv = Server::start(&f.index, &[]);
    let question = questions(&f.data)[0].clone();
    let body = json!({"question": question, "k": 5}).to_string();
    let (first, second) = body.as_bytes().split_at(body.len() / 2);

    // A request in flight: the head and half the body are sent.
    let mut stream = connect(srv.port).unwrap();
    let head = format!(
        "POST /v1/qa HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(first).unwrap();
    stream.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let status = std::process::Command::new("kill")
        .args(["-TERM", &srv.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // The listener closes (new connections are refused) ...
    let deadline = Instant::now() + Duration::from_secs(20);
    while try_request(srv.port, "GET", "/health", &[], None).is_ok() {
        assert!(
            Instant::now() < deadline,
            "still accepting new requests after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // ... but the process waits for the request in flight.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        srv.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );

    stream.write_all(second).unwrap();
    let r = read_response(&mut stream).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.json()["answer"].as_str().unwrap().is_empty());
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "the connection closes after the last answer"
    );

    let exit = srv
        .wait_exit(Duration::from_secs(30))
        .expect("the server exits after SIGTERM");
    assert!(exit.success(), "exit status {exit:?}\n{}", srv.log_text());
    assert!(
        srv.log_text().contains("capstan: stopped"),
        "{}",
        srv.log_text()
    );
}

#[test]
fn sigterm_gives_up_on_a_stalled_request_after_the_grace_period() {
    let f = fixture();
    let mut srv = Server::start_with_env(&f.index, &[], &[("CAPSTAN_SHUTDOWN_GRACE", "1")]);
    // A client that sends half its request and then nothing.
    let mut stream = connect(srv.port).unwrap();
    stream
        .write_all(b"POST /v1/qa HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"question\":")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &srv.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = srv
        .wait_exit(Duration::from_secs(20))
        .expect("the server exits although a request never finished");
    assert!(exit.success(), "exit status {exit:?}\n{}", srv.log_text());
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "it gave the request its grace period"
    );
    assert!(
        srv.log_text().contains("still in flight"),
        "{}",
        srv.log_text()
    );
}

/// Reads from `stream` until the server closes it (or `limit` passes); the
/// bytes read and when the close came.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return (got, Some(start.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (got, Some(start.elapsed())),
        }
    }
    (got, None)
}

#[test]
fn slow_and_silent_clients_are_cut_off_by_the_timeouts() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--header-timeout", "2", "--body-timeout", "2"]);
    let limit = Duration::from_secs(10);
    // A body announced as 100 bytes of which one arrives: 408 in the API's error
    // shape, then the connection closes.
    let mut half_body = connect(srv.port).unwrap();
    half_body
        .write_all(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    // Half a request head, and a connection that never sends a byte.
    let mut half_head = connect(srv.port).unwrap();
    half_head
        .write_all(b"POST /v1/search HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut silent = connect(srv.port).unwrap();
    // Many idle connections at once are all closed as well.
    let mut idle: Vec<TcpStream> = (0..50).map(|_| connect(srv.port).unwrap()).collect();

    let (bytes, closed) = read_until_closed(&mut half_body, limit);
    let closed = closed.expect("a half-sent body keeps its connection open");
    let resp = parse_response(&bytes).unwrap();
    assert_eq!(resp.status, 408, "{}", resp.text());
    assert_eq!(
        resp.json()["error"]["type"],
        "request_timeout",
        "{}",
        resp.text()
    );
    assert!(closed < Duration::from_secs(6), "closed after {closed:?}");
    for (what, stream) in [("half a head", &mut half_head), ("silent", &mut silent)] {
        let (_, closed) = read_until_closed(stream, limit);
        let closed = closed.unwrap_or_else(|| panic!("{what}: still open after {limit:?}"));
        assert!(
            closed < Duration::from_secs(6),
            "{what}: closed after {closed:?}"
        );
    }
    let start = Instant::now();
    for stream in &mut idle {
        let left = limit
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(10));
        assert!(
            read_until_closed(stream, left).1.is_some(),
            "an idle connection is still open after {:?}",
            start.elapsed()
        );
    }
    // A keep-alive connection is answered, then closed once idle.
    let mut kept = connect(srv.port).unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (bytes, closed) = read_until_closed(&mut kept, limit);
    assert_eq!(parse_response(&bytes).unwrap().status, 200);
    let closed = closed.expect("an idle keep-alive connection stays open");
    assert!(closed >= Duration::from_secs(1), "closed after {closed:?}");
    // The server serves on.
    assert_eq!(srv.get("/health").status, 200);
}

#[test]
fn work_queued_past_its_deadline_is_answered_503_without_running() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--workers", "1", "--queue-timeout", "0.2"]);
    let text = questions(&f.data).join(" ");
    // One embedding worker: each of these takes far longer than the deadline, so
    // the ones queued behind the first wait past it.
    let requests = (0..4)
        .map(|i| {
            (
                "/v1/embeddings",
                json!({"input": vec![format!("{i} {text}"); 64]}),
            )
        })
        .collect();
    let done = burst(srv.port, requests);
    let statuses: Vec<u16> = done.iter().map(|(_, r)| r.status).collect();
    assert!(statuses.contains(&200), "{statuses:?}");
    let expired: Vec<&Resp> = done
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.status == 503)
        .collect();
    assert!(!expired.is_empty(), "none expired: {statuses:?}");
    for r in expired {
        assert!(r.header("retry-after").is_some());
        assert!(r.text().contains("past its deadline"), "{}", r.text());
    }
}

/// Checks a span answer: non-empty, and each of its spans is exactly the answer, in a cited
/// passage at the characters it names. Returns the answer.
fn check_span_answer(a: &Value) -> String {
    assert_eq!(a["kind"], "span", "{a}");
    let answer = a["answer"].as_str().unwrap().to_string();
    if a["no_answer"] == json!(true) {
        assert!(answer.is_empty(), "{a}");
        return answer;
    }
    assert!(!answer.is_empty(), "an empty answer must be no_answer: {a}");
    let spans = a["spans"].as_array().unwrap();
    assert!(!spans.is_empty(), "{a}");
    let cited: Vec<&str> = a["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for span in spans {
        let id = span["passage_id"].as_str().unwrap();
        assert!(cited.contains(&id), "span in an uncited passage: {a}");
        let passage = a["passages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["passage_id"] == id)
            .unwrap();
        let field = if span["in_title"] == json!(true) {
            "title"
        } else {
            "text"
        };
        let text: Vec<char> = passage[field].as_str().unwrap().chars().collect();
        let (start, end) = (
            span["start"].as_u64().unwrap() as usize,
            span["end"].as_u64().unwrap() as usize,
        );
        let copied: String = text[start..end].iter().collect();
        assert_eq!(copied, answer, "the span's characters are the answer: {a}");
    }
    answer
}

#[test]
fn span_answers_stand_in_their_cited_passages_alone_concurrent_and_streamed() {
    let f = fixture();
    let srv = Server::start(
        &f.index,
        &["--llama-model", s(&smollm2()), "--max-new-tokens", "16"],
    );
    let qs = questions(&f.data);
    let body = |q: &str| json!({"question": q, "k": 3, "reader": "llama", "answer": "span"});
    // Alone, one after the other.
    let alone: Vec<String> = qs
        .iter()
        .map(|q| check_span_answer(&srv.post("/v1/qa", &body(q)).ok_json()))
        .collect();
    assert!(
        alone.iter().filter(|a| !a.is_empty()).count() >= qs.len() - 1,
        "{alone:?}"
    );
    // All at once: batched by the scheduler, the same greedy answers.
    let together = burst(srv.port, qs.iter().map(|q| ("/v1/qa", body(q))).collect());
    for ((_, r), want) in together.iter().zip(&alone) {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(&check_span_answer(&r.json()), want);
    }
    // Streamed: the final answer event is the same answer.
    let mut streamed = body(&qs[0]);
    streamed["stream"] = json!(true);
    let r = srv.post("/v1/qa", &streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "answer", "{events:?}");
    assert_eq!(
        check_span_answer(&serde_json::from_str(data).unwrap()),
        alone[0]
    );
    // Free answers are one line, with their finish reason.
    let mut free = body(&qs[0]);
    free["answer"] = json!("free");
    let a = srv.post("/v1/qa", &free).ok_json();
    assert_eq!(a["kind"], "free", "{a}");
    assert!(!a["answer"].as_str().unwrap().contains('\n'), "{a}");
    assert!(["stop", "length"].contains(&a["finish_reason"].as_str().unwrap()));
    // Bad input: span answers need a generative reader and passages; chat is free text.
    let bad = [
        (
            "copied by decoding with the extractive reader",
            "/v1/qa",
            json!({"question": qs[0], "reader": "extractive", "answer": "copy"}),
        ),
        (
            "span with nothing retrieved",
            "/v1/qa",
            json!({"question": qs[0], "reader": "llama", "answer": "span",
                   "filter": {"no-such-field": "x"}}),
        ),
        (
            "unknown answer mode",
            "/v1/qa",
            json!({"question": qs[0], "reader": "llama", "answer": "poem"}),
        ),
        (
            "span in chat",
            "/v1/chat/completions",
            json!({"model": "capstan-llama", "answer": "span",
                   "messages": [{"role": "user", "content": qs[0]}]}),
        ),
    ];
    for (what, path, b) in bad {
        let (status, message) = assert_client_error(what, &srv.post(path, &b));
        assert_eq!(status, 400, "{what}: {message}");
    }
}

/// A question of the fixture that names its document's title, with the
/// document id and title.
fn question_naming_its_document(data: &Path) -> (String, String, String) {
    let titles: std::collections::HashMap<String, String> =
        std::fs::read_to_string(data.join("corpus.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let d: Value = serde_json::from_str(l).unwrap();
                (
                    d["_id"].as_str().unwrap().to_string(),
                    d["title"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    let qrels = std::fs::read_to_string(data.join("qrels/test.tsv")).unwrap();
    let queries = std::fs::read_to_string(data.join("queries.jsonl")).unwrap();
    queries
        .lines()
        .find_map(|l| {
            let q: Value = serde_json::from_str(l).unwrap();
            let id = q["_id"].as_str().unwrap();
            let doc = qrels
                .lines()
                .find(|r| r.starts_with(&format!("{id}\t")))?
                .split('\t')
                .nth(1)?
                .to_string();
            let title = titles.get(&doc)?.clone();
            let text = q["text"].as_str().unwrap();
            text.contains(&title)
                .then(|| (text.to_string(), doc, title))
        })
        .expect("a question names its document")
}

#[test]
fn a_follow_up_retrieves_whom_the_conversation_is_about() {
    let f = fixture();
    let (question, doc, title) = question_naming_its_document(&f.data);
    let follow_up = question.replace(&title, "this one");
    let srv = Server::start(&f.index, &[]);
    let first = format!("Tell me about {title}.");
    // /v1/qa with its history.
    let qa = srv
        .post(
            "/v1/qa",
            &json!({"question": follow_up, "k": 3, "history": [
                {"role": "user", "content": first},
                {"role": "assistant", "content": "Here is what the encyclopedia says."}]}),
        )
        .ok_json();
    assert_eq!(qa["passages"][0]["doc_id"], doc.as_str(), "{qa}");
    // The chat endpoint reads the whole conversation, and says why it stopped.
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": first},
                {"role": "assistant", "content": "Here is what the encyclopedia says."},
                {"role": "user", "content": follow_up}]}),
        )
        .ok_json();
    assert_eq!(chat["sources"][0]["doc_id"], doc.as_str(), "{chat}");
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    // Bad turns are named.
    let bad = srv.post(
        "/v1/qa",
        &json!({"question": follow_up, "history": [{"role": "robot", "content": "x"}]}),
    );
    assert_eq!(assert_client_error("bad role", &bad).0, 400);
    let message = bad.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("turn 0") && message.contains("robot"),
        "{message}"
    );
    let bad = srv.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": first}], "stop": ["a", "b", "c", "d", "e"]}),
    );
    assert_eq!(assert_client_error("five stops", &bad).0, 400);
}

#[test]
fn a_follow_up_is_rewritten_by_the_llama_model_when_asked() {
    let f = fixture();
    let (question, _, title) = question_naming_its_document(&f.data);
    let follow_up = question.replace(&title, "this one");
    let srv = Server::start(&f.index, &["--llama-model", s(&smollm2())]);
    let ask = |rewrite: &str| {
        srv.post(
            "/v1/qa",
            &json!({"question": follow_up, "k": 3, "reader": "extractive", "rewrite": rewrite,
                "history": [{"role": "user", "content": format!("Tell me about {title}.")}]}),
        )
        .ok_json()
    };
    // By rules: "this one" replaced by the name, no model tokens spent.
    let rules = ask("rules");
    let by_rules = rules["retrieval_question"].as_str().unwrap();
    assert!(!by_rules.contains("this one"), "{rules}");
    assert!(rules["usage"].get("rewrite_tokens").is_none(), "{rules}");
    // By the model: it generated, and retrieval read a question (its own, or the rules'
    // where its reply was not one).
    let model = ask("model");
    assert!(
        model["usage"]["rewrite_tokens"].as_u64().unwrap() > 0,
        "{model}"
    );
    let rewritten = model["retrieval_question"].as_str().unwrap();
    assert!(rewritten.ends_with('?'), "{model}");
    let bad = srv.post(
        "/v1/qa",
        &json!({"question": follow_up, "rewrite": "magic"}),
    );
    assert_client_error("unknown rewrite", &bad);
}

#[test]
fn chat_says_length_when_max_tokens_cut_the_answer_and_honours_stop_and_seed() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--llama-model", s(&smollm2())]);
    let question = questions(&f.data)[0].clone();
    let chat = |extra: Value| {
        let mut body = json!({"model": "capstan-llama",
            "messages": [{"role": "user", "content": question}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        srv.post("/v1/chat/completions", &body).ok_json()
    };
    let cut = chat(json!({"max_tokens": 2}));
    assert_eq!(cut["choices"][0]["finish_reason"], "length", "{cut}");
    assert_eq!(cut["usage"]["completion_tokens"], 2, "{cut}");
    let whole = chat(json!({"max_tokens": 64}));
    assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");
    let text = whole["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // A stop string inside the greedy answer ends it there.
    if let Some(word) = text.split_whitespace().nth(1) {
        let stopped = chat(json!({"max_tokens": 64, "stop": word}));
        let got = stopped["choices"][0]["message"]["content"]
            .as_str()
            .unwrap();
        assert!(
            !got.contains(word) && text.starts_with(got.trim_end()),
            "{got:?} of {text:?}"
        );
        assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    }
    // Sampling with a seed repeats itself; seeds are honoured (several seeds do not all give
    // one text) and, without one, each request draws its own seed and says which.
    let sampled = |seed: Option<u64>| {
        let mut body = json!({"max_tokens": 24, "temperature": 1.0});
        if let Some(seed) = seed {
            body["seed"] = json!(seed);
        }
        let r = chat(body);
        (
            r["choices"][0]["message"]["content"].clone(),
            r["seed"].clone(),
        )
    };
    assert_eq!(sampled(Some(7)), sampled(Some(7)));
    assert_eq!(sampled(Some(7)).1, json!(7));
    let texts: std::collections::HashSet<String> = (1..=4)
        .map(|seed| sampled(Some(seed)).0.to_string())
        .collect();
    assert!(texts.len() > 1, "four seeds, one text: {texts:?}");
    let (a, b) = (sampled(None), sampled(None));
    let (sa, sb) = (a.1.as_u64().unwrap(), b.1.as_u64().unwrap());
    assert_ne!(sa, sb, "unseeded requests draw fresh seeds");
    assert_eq!(
        sampled(Some(sa)).0,
        a.0,
        "the reported seed repeats the answer"
    );
    // Greedy answers report no seed.
    assert!(chat(json!({"max_tokens": 8}))["seed"].is_null());
}
