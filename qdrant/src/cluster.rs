//! The connection to a cluster: one client per named node, failover between
//! them, bounded retries, a deadline on every call, and blocking calls for
//! Capstan's synchronous callers.
//!
//! The official client holds one address and never moves to another node;
//! its own retry re-sends a failed points call once, at once. Here a call
//! that fails in a way another node or a moment later may mend (connection
//! refused, deadline passed, a replica down) is tried on each node in turn,
//! round after round with growing pauses, until the retry window closes;
//! then it fails as [`Error::Unavailable`]. Every call that changes data is
//! idempotent (points have fixed ids), so repeating one is safe.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use qdrant_client::{Qdrant, QdrantError};
use tonic_code::is_transient;

use crate::error::{Error, Result};
use crate::location::QdrantLocation;

/// The environment variable holding the API key.
pub const API_KEY_VAR: &str = "CAPSTAN_QDRANT_API_KEY";

/// Reads or writes, which retry for different windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Read,
    Write,
}

/// Clients of every node of one location, and the runtime they run on.
pub struct Cluster {
    location: QdrantLocation,
    clients: Vec<Qdrant>,
    /// The node that answered last: tried first.
    preferred: AtomicUsize,
    /// Always `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Cluster {
    /// Without blocking: the last owner may be a task of this runtime, or a
    /// server's async code, where a blocking shutdown would panic.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Cluster {
    /// Clients for every node of `location` (nothing is contacted yet), with
    /// the API key of [`API_KEY_VAR`] if set.
    pub fn new(location: QdrantLocation) -> Result<Self> {
        let api_key = match std::env::var(API_KEY_VAR) {
            Ok(key) if key.trim().is_empty() => {
                return Err(Error::Setting {
                    name: API_KEY_VAR,
                    message: "is set but empty; unset it or give the cluster's key".into(),
                })
            }
            Ok(key) => Some(key),
            Err(_) => None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("capstan-qdrant")
            .enable_all()
            .build()
            .map_err(|e| Error::Setting {
                name: "qdrant client",
                message: format!("cannot start its runtime: {e}"),
            })?;
        let mut clients = Vec::with_capacity(location.nodes.len());
        for i in 0..location.nodes.len() {
            let mut config = Qdrant::from_url(&location.node_url(i))
                .timeout(location.timeout)
                .connect_timeout(location.connect_timeout)
                .skip_compatibility_check();
            if let Some(key) = &api_key {
                config = config.api_key(key.clone());
            }
            let client = config.build().map_err(|e| Error::Location {
                location: location.to_string(),
                message: redact(&e.to_string(), api_key.as_deref()),
            })?;
            clients.push(client);
        }
        Ok(Self {
            location,
            clients,
            preferred: AtomicUsize::new(0),
            runtime: Some(runtime),
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// The location.
    pub fn location(&self) -> &QdrantLocation {
        &self.location
    }

    /// Runs a future on the cluster's runtime, blocking the calling thread
    /// (which must not be inside an async runtime itself).
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime().block_on(future)
    }

    /// Runs a future on the cluster's runtime in the background.
    pub(crate) fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime().spawn(future)
    }

    /// Fails as unavailable, naming every node, unless a node answers a
    /// health check (a tonic client connects lazily, so this is what proves
    /// the cluster is there).
    pub fn check_reachable(&self) -> Result<()> {
        self.block_on(self.call(Call::Read, "health check", |c| async move {
            c.health_check().await
        }))
        .map(|_| ())
    }

    /// `op` on the preferred node, failing over and retrying as the module
    /// says; `what` names the call in errors.
    pub(crate) async fn call<T, F, Fut>(&self, kind: Call, what: &str, op: F) -> Result<T>
    where
        F: Fn(Qdrant) -> Fut,
        Fut: Future<Output = std::result::Result<T, QdrantError>>,
    {
        let window = match kind {
            Call::Read => self.location.read_retry,
            Call::Write => self.location.write_retry,
        };
        let start = Instant::now();
        let mut pause = Duration::from_millis(50);
        let n = self.clients.len();
        loop {
            let first = self.preferred.load(Ordering::Relaxed);
            let mut last = String::new();
            for i in (0..n).map(|j| (first + j) % n) {
                match op(self.clients[i].clone()).await {
                    Ok(value) => {
                        self.preferred.store(i, Ordering::Relaxed);
                        return Ok(value);
                    }
                    Err(e) if is_transient(&e) => {
                        last = format!("{}: {}", self.location.nodes[i], describe(&e));
                        tracing::debug!(node = %self.location.nodes[i], "{what}: {last}");
                    }
                    Err(e) => {
                        return Err(Error::Refused {
                            location: self.location.to_string(),
                            what: what.to_string(),
                            message: describe(&e),
                        })
                    }
                }
            }
            if start.elapsed() + pause > window {
                return Err(Error::Unavailable {
                    location: self.location.to_string(),
                    message: format!(
                        "{what} failed on every node for {:.1} s (last: {last})",
                        start.elapsed().as_secs_f64()
                    ),
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

/// A client error in one line: the gRPC code and the server's message.
pub(crate) fn describe(e: &QdrantError) -> String {
    match e {
        QdrantError::ResponseError { status }
        | QdrantError::ResourceExhaustedError { status, .. } => {
            format!("{:?}: {}", status.code(), status.message())
        }
        other => other.to_string(),
    }
}

/// The client quotes a malformed key in its error: never print it.
fn redact(message: &str, key: Option<&str>) -> String {
    match key {
        Some(k) if !k.is_empty() => message.replace(k, "<CAPSTAN_QDRANT_API_KEY>"),
        _ => message.to_string(),
    }
}

/// Which failures a retry (on this node or another) may mend.
mod tonic_code {
    use qdrant_client::QdrantError;

    /// Transport failures and deadlines, a node or replica down (Qdrant
    /// reports those as Internal), rate limits. Bad requests, missing
    /// collections and refused credentials are final.
    pub fn is_transient(e: &QdrantError) -> bool {
        use tonic::Code;
        match e {
            QdrantError::ResourceExhaustedError { .. } => true,
            QdrantError::ResponseError { status } => matches!(
                status.code(),
                Code::Unavailable
                    | Code::Cancelled
                    | Code::DeadlineExceeded
                    | Code::Unknown
                    | Code::Internal
                    | Code::Aborted
                    | Code::ResourceExhausted
            ),
            QdrantError::Io(_) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_cluster_is_unavailable_and_named() {
        // Port 1 on loopback: nothing listens there, connections are refused.
        let location =
            QdrantLocation::parse("qdrant://127.0.0.1:1,127.0.0.1:2/c?retry=0.3").unwrap();
        let cluster = Cluster::new(location).unwrap();
        let start = Instant::now();
        let err = cluster.check_reachable().unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("qdrant://127.0.0.1:1,127.0.0.1:2/c"),
            "{text}"
        );
        assert!(text.contains("health check"), "{text}");
        // The retry window bounds the wait.
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn an_api_key_is_never_printed() {
        assert_eq!(
            redact("invalid key 'sekrit'", Some("sekrit")),
            "invalid key '<CAPSTAN_QDRANT_API_KEY>'"
        );
    }
}
