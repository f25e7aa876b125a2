//! Question -> top-k passages, by BM25, dense search or both fused.

use std::path::Path;
use std::sync::Arc;

use capstan_indexer::{DenseStrategy, Encoder, Index, Passage, PassageOrd};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fusion::{fuse, Fusion};

/// Which retrieval runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Lexical: BM25.
    Bm25,
    /// Semantic: the dense encoder's nearest neighbours.
    Dense,
    /// Both, fused.
    Hybrid,
}

impl Mode {
    /// All modes, in the order reports list them.
    pub const ALL: [Mode; 3] = [Mode::Bm25, Mode::Dense, Mode::Hybrid];

    /// The mode's name as users spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Bm25 => "bm25",
            Mode::Dense => "dense",
            Mode::Hybrid => "hybrid",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "bm25" => Ok(Mode::Bm25),
            "dense" => Ok(Mode::Dense),
            "hybrid" => Ok(Mode::Hybrid),
            other => Err(Error::Invalid {
                name: "mode",
                message: format!("`{other}` (expected bm25, dense or hybrid)"),
            }),
        }
    }
}

/// Settings of one search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SearchOptions {
    /// Retrieval mode.
    pub mode: Mode,
    /// How many hits to return.
    pub k: usize,
    /// Hybrid fusion.
    pub fusion: Fusion,
    /// Exact scan or HNSW for the dense side.
    pub dense: DenseStrategy,
    /// HNSW search breadth.
    pub ef: usize,
    /// In hybrid mode, how deep each component ranking goes before fusion
    /// (at least `k`).
    pub depth: usize,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            mode: Mode::Hybrid,
            k: 10,
            fusion: Fusion::default(),
            dense: DenseStrategy::Auto,
            ef: 64,
            depth: 100,
        }
    }
}

/// Largest `k` a search accepts.
pub const MAX_K: usize = 1000;

/// One component's view of a hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ComponentScore {
    /// The component's own score (BM25 score, cosine similarity).
    pub score: f32,
    /// 1-based rank in the component's ranking.
    pub rank: usize,
}

/// A retrieved passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// `{doc_id}#{n}`.
    pub passage_id: String,
    /// The document.
    pub doc_id: String,
    /// The document title.
    pub title: String,
    /// The passage text.
    pub text: String,
    /// The final score (the component's score, or the fused score).
    pub score: f32,
    /// BM25's score and rank, when BM25 ranked it.
    pub bm25: Option<ComponentScore>,
    /// The dense score and rank, when dense search ranked it.
    pub dense: Option<ComponentScore>,
}

/// An index with the encoder for its questions. Cheap to share (`Arc`).
pub struct Retriever {
    index: Index,
    encoder: Arc<Encoder>,
}

impl Retriever {
    /// Opens the index in `dir` with `encoder`, or with the encoder folder
    /// recorded in its manifest when `None`.
    pub fn open(dir: &Path, encoder: Option<&Path>) -> Result<Self> {
        let index = Index::open(dir)?;
        let encoder = match encoder {
            Some(path) => Encoder::load(path)?,
            None => Encoder::load(Path::new(&index.manifest().encoder.path))?,
        };
        Self::new(index, Arc::new(encoder))
    }

    /// Pairs an opened index with an encoder, checking they belong together.
    pub fn new(index: Index, encoder: Arc<Encoder>) -> Result<Self> {
        index.check_encoder(encoder.info())?;
        Ok(Self { index, encoder })
    }

    /// The index.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The encoder.
    pub fn encoder(&self) -> &Arc<Encoder> {
        &self.encoder
    }

    /// Embeds a question as the index's vectors are embedded (unit length).
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        let mut v = self
            .encoder
            .embed(&[query])?
            .pop()
            .expect("one input, one vector");
        capstan_indexer::normalize(&mut v);
        Ok(v)
    }

    /// The top `opts.k` passages for `query`.
    pub fn search(&self, query: &str, opts: &SearchOptions) -> Result<Vec<Hit>> {
        let vector = match opts.mode {
            Mode::Bm25 => None,
            Mode::Dense | Mode::Hybrid => Some(self.embed_query(query)?),
        };
        self.search_with_vector(query, vector.as_deref(), opts)
    }

    /// As [`Retriever::search`], with the question's vector already computed
    /// (batch evaluation embeds all questions at once).
    pub fn search_with_vector(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        opts: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        if opts.k == 0 || opts.k > MAX_K {
            return Err(Error::Invalid {
                name: "k",
                message: format!("{} (must be within 1..={MAX_K})", opts.k),
            });
        }
        if query.trim().is_empty() {
            return Err(Error::Invalid {
                name: "query",
                message: "empty".into(),
            });
        }
        if let Fusion::Weighted { bm25_weight } = opts.fusion {
            if !(0.0..=1.0).contains(&bm25_weight) {
                return Err(Error::Invalid {
                    name: "bm25 weight",
                    message: format!("{bm25_weight} (must be within [0, 1])"),
                });
            }
        }
        let depth = match opts.mode {
            Mode::Hybrid => opts.depth.max(opts.k),
            _ => opts.k,
        };
        let bm25 = match opts.mode {
            Mode::Bm25 | Mode::Hybrid => self.index.bm25().search(query, depth)?,
            Mode::Dense => Vec::new(),
        };
        let dense = match (opts.mode, vector) {
            (Mode::Dense | Mode::Hybrid, Some(v)) => {
                self.index
                    .dense()
                    .search(v, depth, opts.ef, opts.dense, self.index.deleted())
            }
            (Mode::Dense | Mode::Hybrid, None) => {
                let v = self.embed_query(query)?;
                self.index
                    .dense()
                    .search(&v, depth, opts.ef, opts.dense, self.index.deleted())
            }
            _ => Vec::new(),
        };
        let ranked: Vec<(PassageOrd, f32)> = match opts.mode {
            Mode::Bm25 => bm25.clone(),
            Mode::Dense => dense.clone(),
            Mode::Hybrid => fuse(&bm25, &dense, opts.fusion),
        };
        let component = |list: &[(PassageOrd, f32)], ord: PassageOrd| {
            list.iter()
                .position(|(o, _)| *o == ord)
                .map(|i| ComponentScore {
                    score: list[i].1,
                    rank: i + 1,
                })
        };
        let mut hits = Vec::with_capacity(opts.k);
        for (ord, score) in ranked {
            if hits.len() == opts.k {
                break;
            }
            let Some(Passage {
                id,
                doc_id,
                title,
                text,
                ..
            }) = self.index.passage(ord)?
            else {
                continue;
            };
            hits.push(Hit {
                passage_id: id,
                doc_id,
                title,
                text,
                score,
                bm25: component(&bm25, ord),
                dense: component(&dense, ord),
            });
        }
        Ok(hits)
    }
}
