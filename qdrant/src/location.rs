//! `qdrant://HOST:PORT[,HOST:PORT...]/COLLECTION[?OPTIONS]`: where a
//! collection lives and how to talk to it.

use std::time::Duration;

use crate::error::{Error, Result};

/// The URL scheme of a Qdrant index location.
pub const SCHEME: &str = "qdrant://";

/// A Qdrant collection and the nodes to reach it through.
///
/// Several nodes may be named: the client talks to the first that answers
/// and moves to another when it stops answering (the official client holds
/// one address and never fails over by itself). Ports are gRPC ports (6334
/// by default). Options, after `?`, separated by `&`:
///
/// - `timeout=S`: seconds one call may take (default 10);
/// - `connect_timeout=S`: seconds to open a connection (default 2);
/// - `retry=S`: seconds a search keeps retrying unreachable nodes before it
///   fails as unavailable (default 3);
/// - `write_retry=S`: the same for writes (default 60);
/// - `tls=true`: HTTPS (gRPC over TLS).
///
/// The API key is never part of the location (it would land in logs and
/// `ps`): it comes from `CAPSTAN_QDRANT_API_KEY`.
#[derive(Debug, Clone, PartialEq)]
pub struct QdrantLocation {
    /// `host:port` of each node, in the order tried.
    pub nodes: Vec<String>,
    /// The collection.
    pub collection: String,
    /// Per-call deadline.
    pub timeout: Duration,
    /// Connection deadline.
    pub connect_timeout: Duration,
    /// How long searches retry unreachable nodes.
    pub read_retry: Duration,
    /// How long writes retry unreachable nodes.
    pub write_retry: Duration,
    /// gRPC over TLS.
    pub tls: bool,
}

impl QdrantLocation {
    /// Whether `text` names a Qdrant location (rather than a folder).
    pub fn is_qdrant(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// Parses a location; errors quote the text and say what is wrong.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |message: &str| Error::Location {
            location: text.to_string(),
            message: message.to_string(),
        };
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("it must start with qdrant://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (hosts, collection) = rest
            .split_once('/')
            .ok_or_else(|| bad("it must name a collection: qdrant://HOST:PORT/COLLECTION"))?;
        if collection.is_empty()
            || !collection
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(bad(
                "the collection name must be letters, digits, '_', '-' or '.'",
            ));
        }
        let mut nodes = Vec::new();
        for node in hosts.split(',') {
            let (host, port) = node.rsplit_once(':').unwrap_or((node, "6334"));
            if host.is_empty() || host.contains(['@', '/', ' ']) {
                return Err(bad(&format!("`{node}` is not HOST or HOST:PORT")));
            }
            let port: u16 = port
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad(&format!("`{node}`: the port must be 1..=65535")))?;
            nodes.push(format!("{host}:{port}"));
        }
        let mut location = Self {
            nodes,
            collection: collection.to_string(),
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            read_retry: Duration::from_secs(3),
            write_retry: Duration::from_secs(60),
            tls: false,
        };
        for option in query.into_iter().flat_map(|q| q.split('&')) {
            let (key, value) = option
                .split_once('=')
                .ok_or_else(|| bad(&format!("option `{option}` must be KEY=VALUE")))?;
            let seconds = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| bad(&format!("`{key}` must be seconds in (0, 86400]")))
            };
            match key {
                "timeout" => location.timeout = seconds()?,
                "connect_timeout" => location.connect_timeout = seconds()?,
                "retry" => location.read_retry = seconds()?,
                "write_retry" => location.write_retry = seconds()?,
                "tls" => {
                    location.tls = value
                        .parse()
                        .map_err(|_| bad("`tls` must be true or false"))?
                }
                _ => {
                    return Err(bad(&format!(
                        "unknown option `{key}` (timeout, connect_timeout, retry, write_retry, tls)"
                    )))
                }
            }
        }
        Ok(location)
    }

    /// The gRPC URL of node `i`.
    pub(crate) fn node_url(&self, i: usize) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.nodes[i])
    }
}

impl std::fmt::Display for QdrantLocation {
    /// The location without its options, as messages name it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.nodes.join(","), self.collection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nodes_collection_and_options() {
        let l =
            QdrantLocation::parse("qdrant://a:1,b/coll_1?timeout=2.5&retry=1&tls=true").unwrap();
        assert_eq!(l.nodes, ["a:1", "b:6334"]);
        assert_eq!(l.collection, "coll_1");
        assert_eq!(l.timeout, Duration::from_millis(2500));
        assert_eq!(l.read_retry, Duration::from_secs(1));
        assert!(l.tls);
        assert_eq!(l.node_url(1), "https://b:6334");
        assert_eq!(l.to_string(), "qdrant://a:1,b:6334/coll_1");
    }

    #[test]
    fn bad_locations_say_what_is_wrong() {
        for (text, needle) in [
            ("qdrant://host:6334", "must name a collection"),
            ("qdrant://host:6334/", "collection name"),
            ("qdrant://host:70000/c", "port must be"),
            ("qdrant://:6334/c", "is not HOST"),
            ("qdrant://h/c?timeout=0", "`timeout` must be seconds"),
            ("qdrant://h/c?colour=red", "unknown option `colour`"),
            ("qdrant://h/c?tls", "KEY=VALUE"),
            ("http://h/c", "must start with qdrant://"),
        ] {
            let err = QdrantLocation::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(err.contains(text), "{text}: {err}");
        }
    }
}
