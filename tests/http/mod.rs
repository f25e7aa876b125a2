//! What the server tests share: a small generated index, a running `capstan serve` (killed
//! when dropped), and a minimal HTTP/1.1 client on `std::net` with the assertions every
//! route's errors share.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{self, capstan, s};

pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub data: PathBuf,
    pub index: PathBuf,
}

/// One small index shared by every test in this file (indexing is the slow part).
pub fn fixture() -> &'static Fixture {
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

/// A running `capstan serve`, killed when dropped (even when a test fails).
pub struct Server {
    pub child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    pub _logdir: tempfile::TempDir,
}

impl Server {
    /// Starts `capstan serve` on a free port with `extra` arguments and waits for /health.
    /// Each server gets its own copy of the index: the passage store is locked
    /// by the process that opens it.
    pub fn start(index: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(index, extra, &[])
    }

    /// As [`Server::start`], with environment variables.
    pub fn start_with_env(index: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
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

    pub fn wait_healthy(&mut self, timeout: Duration) -> bool {
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

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn get(&self, path: &str) -> Resp {
        self.call("GET", path, &[], None)
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.post_raw(path, body.to_string().as_bytes())
    }

    pub fn post_raw(&self, path: &str, body: &[u8]) -> Resp {
        self.call(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body),
        )
    }

    pub fn call(
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
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
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

pub fn copy_dir(from: &Path, to: &Path) {
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

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// Asserts a 200 and returns the JSON body.
    pub fn ok_json(&self) -> Value {
        assert_eq!(self.status, 200, "{}", self.text());
        self.json()
    }

    /// Server-sent events as (event name, data) pairs.
    pub fn events(&self) -> Vec<(String, String)> {
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
pub fn try_request(
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

pub fn connect(port: u16) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    Ok(stream)
}

pub fn read_response(stream: &mut TcpStream) -> Result<Resp, String> {
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

pub fn parse_response(raw: &[u8]) -> Result<Resp, String> {
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

pub fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
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
pub fn assert_client_error(what: &str, r: &Resp) -> (u16, String) {
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

/// A POST whose body is sent chunked (no Content-Length), so the limit bites while reading.
pub fn chunked_post(port: u16, path: &str, body: &[u8]) -> Resp {
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

/// Sends every `(path, body)` POST at once (connected first, released together by a barrier);
/// the responses in order.
pub fn burst(port: u16, requests: Vec<(&'static str, Value)>) -> Vec<(&'static str, Resp)> {
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

/// The value of an unlabelled-but-for-`reader` series in Prometheus text.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// As [`assert_client_error`] for a 503 (the only 5xx a client may see).
pub fn assert_client_error_body(what: &str, r: &Resp) -> (u16, String) {
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

/// Reads from `stream` until the server closes it (or `limit` passes); the
/// bytes read and when the close came.
pub fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
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

/// Checks a span answer: non-empty, and each of its spans is exactly the answer, in a cited
/// passage at the characters it names. Returns the answer.
pub fn check_span_answer(a: &Value) -> String {
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

/// A question of the fixture that names its document's title, with the
/// document id and title.
pub fn question_naming_its_document(data: &Path) -> (String, String, String) {
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
