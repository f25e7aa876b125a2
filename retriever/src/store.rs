//! Where an index lives: the [`Store`] trait, and its embedded implementation
//! over an index folder.
//!
//! A store ranks: it gives each component's candidates (BM25's, the dense
//! encoder's) and the passages behind them. Everything above that — fusion,
//! documents, the cut-off, the hits users see — is the [`crate::Retriever`]'s,
//! written once, so an index folder and a Qdrant collection (crate
//! `capstan-qdrant`) answer the same query the same way.

use std::collections::BTreeMap;
use std::path::Path;

use capstan_indexer::{DenseStrategy, EncoderInfo, Index, Passage};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A passage's key within one store: the embedded store's ordinal, or a
/// Qdrant point id (a UUID as a number). Keys of two stores never meet.
pub type PassageKey = u128;

/// One entry of a component ranking.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The passage's key.
    pub key: PassageKey,
    /// The component's score (BM25 score, cosine similarity).
    pub score: f32,
    /// The passage itself, when the store sends it with the ranking (a remote
    /// store does, to save a round trip); otherwise read with
    /// [`Store::passages`] when needed.
    pub passage: Option<Passage>,
}

/// Metadata conditions a passage's document must meet: every `key` equals
/// its value (`{"lang": "en", "year": 2024}`). Keys are the top-level fields
/// of a document's `metadata` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Filter {
    /// Field -> required value (a string, number or boolean).
    pub equals: BTreeMap<String, serde_json::Value>,
}

impl Filter {
    /// Whether no condition is set.
    pub fn is_empty(&self) -> bool {
        self.equals.is_empty()
    }

    /// Checks that every value is a string, integer or boolean (what both
    /// stores can compare exactly).
    pub fn validate(&self) -> Result<()> {
        for (key, value) in &self.equals {
            let ok = match value {
                serde_json::Value::String(_) | serde_json::Value::Bool(_) => true,
                serde_json::Value::Number(n) => n.is_i64() || n.is_u64(),
                _ => false,
            };
            if key.is_empty() || !ok {
                return Err(Error::Invalid {
                    name: "filter",
                    message: format!(
                        "`{key}`: {value} (a filter compares a metadata field with a string, integer or boolean)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Whether a document's metadata meets every condition.
    pub fn matches(&self, metadata: Option<&serde_json::Map<String, serde_json::Value>>) -> bool {
        self.equals
            .iter()
            .all(|(k, v)| metadata.and_then(|m| m.get(k)) == Some(v))
    }
}

/// What one search asks a store for.
#[derive(Debug, Clone, Copy)]
pub struct ComponentQuery<'a> {
    /// The question, for BM25.
    pub text: &'a str,
    /// The question's unit vector, for dense search.
    pub vector: Option<&'a [f32]>,
    /// How many BM25 candidates (0: BM25 does not run).
    pub bm25: usize,
    /// How many dense candidates (0: dense search does not run).
    pub dense: usize,
    /// Exact scan or approximate search.
    pub strategy: DenseStrategy,
    /// HNSW search breadth.
    pub ef: usize,
    /// Metadata conditions.
    pub filter: Option<&'a Filter>,
}

/// The two component rankings of one query, best first.
#[derive(Debug, Clone, Default)]
pub struct Rankings {
    /// BM25's candidates.
    pub bm25: Vec<Candidate>,
    /// Dense search's candidates.
    pub dense: Vec<Candidate>,
}

/// Sizes of a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreCounts {
    /// Live documents.
    pub documents: u64,
    /// Live passages.
    pub passages: u64,
}

/// A sentence of a passage with its stored unit vector (byte offsets into the
/// passage text).
pub type SentenceVector = (u32, u32, Vec<f32>);

/// Where passages and their two indexes live. Implemented by
/// [`EmbeddedStore`] (an index folder) and by `capstan-qdrant`'s store (a
/// Qdrant collection); [`crate::Retriever`] fuses what either ranks.
///
/// Implementations are called from many threads at once, never from inside
/// an async runtime, and report an unreachable backend as
/// [`Error::Unavailable`].
pub trait Store: Send + Sync {
    /// Where it is, for messages: a folder or a `qdrant://` URL.
    fn location(&self) -> String;

    /// The encoder its passages were embedded with.
    fn encoder(&self) -> &EncoderInfo;

    /// Refuses an encoder other than the one the passages were embedded
    /// with, saying what differs.
    fn check_encoder(&self, encoder: &EncoderInfo) -> Result<()>;

    /// Live documents and passages.
    fn counts(&self) -> Result<StoreCounts>;

    /// Each component's candidates for one query.
    fn rank(&self, query: &ComponentQuery) -> Result<Rankings>;

    /// The passages of `keys`, in order (`None`: gone since it was ranked).
    fn passages(&self, keys: &[PassageKey]) -> Result<Vec<Option<Passage>>>;

    /// The sentences of a passage with vectors stored at index time, or
    /// nothing (the extractive reader then embeds them itself).
    fn sentence_vectors(&self, _passage_id: &str) -> Result<Vec<SentenceVector>> {
        Ok(Vec::new())
    }

    /// Reads now what searches would read on first use (a server's start: its first
    /// question then waits for nothing, and a damaged file stops the start).
    fn warm(&self) -> Result<()> {
        Ok(())
    }
}

/// A store over an index folder (tantivy, the dense vectors and graph, sled).
pub struct EmbeddedStore {
    index: Index,
}

impl EmbeddedStore {
    /// Opens the index in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        Ok(Self::new(Index::open(dir)?))
    }

    /// Wraps an opened index.
    pub fn new(index: Index) -> Self {
        Self { index }
    }

    /// The index.
    pub fn index(&self) -> &Index {
        &self.index
    }

    fn passage(&self, ord: u64) -> Result<Option<Passage>> {
        Ok(self.index.passage(ord)?)
    }

    /// Keeps the candidates whose document meets `filter`, reading each
    /// passage once (the read is kept with the candidate).
    fn filtered(&self, ranked: Vec<(u64, f32)>, filter: Option<&Filter>) -> Result<Vec<Candidate>> {
        let mut out = Vec::with_capacity(ranked.len());
        for (ord, score) in ranked {
            let passage = match filter {
                None => None,
                Some(f) => match self.passage(ord)? {
                    Some(p) if f.matches(self.index.metadata(&p.doc_id)?.as_ref()) => Some(p),
                    _ => continue,
                },
            };
            out.push(Candidate {
                key: ord as PassageKey,
                score,
                passage,
            });
        }
        Ok(out)
    }
}

impl Store for EmbeddedStore {
    fn location(&self) -> String {
        self.index.dir().display().to_string()
    }

    fn encoder(&self) -> &EncoderInfo {
        &self.index.manifest().encoder
    }

    fn check_encoder(&self, encoder: &EncoderInfo) -> Result<()> {
        Ok(self.index.check_encoder(encoder)?)
    }

    fn counts(&self) -> Result<StoreCounts> {
        let c = self.index.manifest().counts;
        Ok(StoreCounts {
            documents: c.documents,
            passages: c.passages,
        })
    }

    fn rank(&self, query: &ComponentQuery) -> Result<Rankings> {
        let filter = query.filter.filter(|f| !f.is_empty());
        // A filter is applied to the rankings: each component ranks every
        // passage it can (BM25: those sharing a term; dense: all, exactly) so
        // that a selective filter still finds its `n` candidates.
        let (bm25_n, dense_n, strategy) = match filter {
            None => (query.bm25, query.dense, query.strategy),
            Some(_) => {
                let all = self.index.stored_passages();
                (all, all, DenseStrategy::Exact)
            }
        };
        let mut bm25 = match query.bm25 {
            0 => Vec::new(),
            _ => self.filtered(self.index.bm25().search(query.text, bm25_n)?, filter)?,
        };
        let mut dense = match (query.dense, query.vector) {
            (0, _) => Vec::new(),
            (_, None) => {
                return Err(Error::Invalid {
                    name: "query",
                    message: "dense search needs the question's vector".into(),
                })
            }
            (_, Some(v)) => {
                let ranked = self.index.dense()?.search(
                    v,
                    dense_n,
                    query.ef,
                    strategy,
                    self.index.deleted(),
                );
                self.filtered(ranked, filter)?
            }
        };
        bm25.truncate(query.bm25);
        dense.truncate(query.dense);
        Ok(Rankings { bm25, dense })
    }

    fn passages(&self, keys: &[PassageKey]) -> Result<Vec<Option<Passage>>> {
        keys.iter()
            .map(|&k| match u64::try_from(k) {
                Ok(ord) => self.passage(ord),
                Err(_) => Ok(None),
            })
            .collect()
    }

    fn sentence_vectors(&self, passage_id: &str) -> Result<Vec<SentenceVector>> {
        let Some(ord) = self.index.ord_of(passage_id)? else {
            return Ok(Vec::new());
        };
        Ok(self
            .index
            .sentences(ord)?
            .into_iter()
            .map(|(r, v)| (r.start, r.end, v.to_vec()))
            .collect())
    }

    fn warm(&self) -> Result<()> {
        self.index.dense()?;
        Ok(())
    }
}
