//! A real Qdrant cluster on loopback for tests: the server binary of
//! `../shared/bin/qdrant` (or `CAPSTAN_QDRANT_BIN`), N nodes on free ports,
//! storage in a temporary folder, telemetry and the web UI off. Nodes are
//! killed when the cluster is dropped (also when a test fails) and, through
//! `PR_SET_PDEATHSIG`, when the thread that started them ends, so no test
//! leaves a server behind even if the test process is killed.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary: `CAPSTAN_QDRANT_BIN`, or `shared/bin/qdrant` beside the
/// repository. Missing is a test failure, never a skip.
pub fn qdrant_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CAPSTAN_QDRANT_BIN") {
        return p.into();
    }
    let root =
        Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .ancestors()
            .find(|d| d.join("Cargo.lock").is_file())
            .expect("the workspace root")
            .to_path_buf();
    let bin = root.join("../shared/bin/qdrant");
    assert!(
        bin.is_file(),
        "no Qdrant server at {} (set CAPSTAN_QDRANT_BIN): the cluster tests need the real engine",
        bin.display()
    );
    bin
}

struct Node {
    child: Option<Child>,
    http: u16,
    grpc: u16,
    p2p: u16,
    dir: PathBuf,
}

/// A running cluster.
pub struct TestCluster {
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// `n` distinct free ports on loopback (all held open while choosing).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// `GET path` on loopback: (status, body), or `None` if nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

impl TestCluster {
    /// Starts `n` nodes and waits until every one is ready and all are peers.
    pub fn start(n: usize) -> Self {
        let bin = qdrant_bin();
        let dir = tempfile::tempdir().expect("a temporary folder");
        let ports = free_ports(3 * n);
        let nodes = (0..n)
            .map(|i| Node {
                child: None,
                http: ports[3 * i],
                grpc: ports[3 * i + 1],
                p2p: ports[3 * i + 2],
                dir: dir.path().join(format!("node{i}")),
            })
            .collect();
        let mut cluster = Self { nodes, _dir: dir };
        for i in 0..n {
            cluster.launch(&bin, i);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let peers = http_get(cluster.nodes[0].http, "/cluster")
                .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                .and_then(|v| v["result"]["peers"].as_object().map(|p| p.len()));
            if peers == Some(n) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster has {peers:?} of {n} peers after 60 s; logs in {}",
                cluster._dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    fn launch(&mut self, bin: &Path, i: usize) {
        let bootstrap = (i > 0).then(|| self.nodes[0].p2p);
        let node = &mut self.nodes[i];
        std::fs::create_dir_all(&node.dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("log"))
            .unwrap();
        let mut cmd = Command::new(bin);
        cmd.current_dir(&node.dir)
            .env("QDRANT__CLUSTER__ENABLED", "true")
            .env("QDRANT__CLUSTER__P2P__PORT", node.p2p.to_string())
            .env("QDRANT__SERVICE__HOST", "127.0.0.1")
            .env("QDRANT__SERVICE__HTTP_PORT", node.http.to_string())
            .env("QDRANT__SERVICE__GRPC_PORT", node.grpc.to_string())
            .env("QDRANT__SERVICE__ENABLE_STATIC_CONTENT", "false")
            .env("QDRANT__TELEMETRY_DISABLED", "true")
            .env("QDRANT__STORAGE__STORAGE_PATH", node.dir.join("storage"))
            .env(
                "QDRANT__STORAGE__SNAPSHOTS_PATH",
                node.dir.join("snapshots"),
            )
            .env("QDRANT__LOG_LEVEL", "WARN")
            .arg("--uri")
            .arg(format!("http://127.0.0.1:{}", node.p2p))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(p2p) = bootstrap {
            cmd.arg("--bootstrap")
                .arg(format!("http://127.0.0.1:{p2p}"));
        }
        // SAFETY: prctl is async-signal-safe; the closure touches nothing else.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        node.child = Some(cmd.spawn().expect("starting qdrant"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(node.http, "/readyz").map(|(s, _)| s) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "qdrant node {i} did not get ready; see {}",
                node.dir.join("log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `127.0.0.1:GRPC` of node `i`.
    pub fn grpc(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].grpc)
    }

    /// The REST port of node `i`.
    pub fn http_port(&self, i: usize) -> u16 {
        self.nodes[i].http
    }

    /// `qdrant://` location of `collection` through `nodes`, with `options`
    /// (`""` or `?...`).
    pub fn location(&self, collection: &str, nodes: &[usize], options: &str) -> String {
        let hosts: Vec<String> = nodes.iter().map(|&i| self.grpc(i)).collect();
        format!("qdrant://{}/{collection}{options}", hosts.join(","))
    }

    /// Kills node `i` (SIGKILL) and waits for it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again with its data.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {i} is running");
        self.launch(&qdrant_bin(), i);
    }

    /// Whether no node's process is alive any more (after drop, for tests of the harness).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.child.as_ref().map(Child::id))
            .collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
