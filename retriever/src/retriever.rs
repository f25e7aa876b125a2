//! Question -> top-k passages, by BM25, dense search or both fused.

use std::collections::HashMap;
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

/// What a search ranks and returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Passages: what a reader reads (`ask`, `/v1/qa`, and `search` by default).
    #[default]
    Passages,
    /// Documents: each component ranking is collapsed to documents (a
    /// document scores its best passage) before fusion and before the
    /// cut-off, so two passages of one document never take two places and a
    /// document found by both retrievers through different passages still
    /// counts as agreement. Each hit is the document's best passage.
    Documents,
}

impl std::str::FromStr for Unit {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "passages" | "passage" => Ok(Unit::Passages),
            "documents" | "document" => Ok(Unit::Documents),
            other => Err(Error::Invalid {
                name: "unit",
                message: format!("`{other}` (expected passages or documents)"),
            }),
        }
    }
}

/// Passages a component retrieves per document wanted, when ranking
/// documents: enough that `depth` distinct documents remain in most cases.
const PASSAGES_PER_DOCUMENT: usize = 3;

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
    /// (at least `k`; in documents when ranking documents).
    pub depth: usize,
    /// Passages or documents.
    #[serde(default)]
    pub unit: Unit,
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
            unit: Unit::Passages,
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
        let (Fusion::Weighted { bm25_weight } | Fusion::Rrf { bm25_weight, .. }) = opts.fusion;
        if !(0.0..=1.0).contains(&bm25_weight) {
            return Err(Error::Invalid {
                name: "bm25 weight",
                message: format!("{bm25_weight} (must be within [0, 1])"),
            });
        }
        let depth = match opts.mode {
            Mode::Hybrid => opts.depth.max(opts.k),
            _ => opts.k,
        };
        let passages = match opts.unit {
            Unit::Passages => depth,
            Unit::Documents => depth.saturating_mul(PASSAGES_PER_DOCUMENT),
        };
        let bm25 = match opts.mode {
            Mode::Bm25 | Mode::Hybrid => self.index.bm25().search(query, passages)?,
            Mode::Dense => Vec::new(),
        };
        let dense = match opts.mode {
            Mode::Dense | Mode::Hybrid => {
                let owned;
                let v = match vector {
                    Some(v) => v,
                    None => {
                        owned = self.embed_query(query)?;
                        &owned
                    }
                };
                self.index
                    .dense()
                    .search(v, passages, opts.ef, opts.dense, self.index.deleted())
            }
            Mode::Bm25 => Vec::new(),
        };
        match opts.unit {
            Unit::Passages => self.passage_hits(&bm25, &dense, opts),
            Unit::Documents => self.document_hits(&bm25, &dense, depth, opts),
        }
    }

    fn passage_hits(
        &self,
        bm25: &[(PassageOrd, f32)],
        dense: &[(PassageOrd, f32)],
        opts: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        let ranked: Vec<(PassageOrd, f32)> = match opts.mode {
            Mode::Bm25 => bm25.to_vec(),
            Mode::Dense => dense.to_vec(),
            Mode::Hybrid => fuse(bm25, dense, opts.fusion),
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
            let Some(passage) = self.index.passage(ord)? else {
                continue;
            };
            hits.push(Hit::new(
                passage,
                score,
                component(bm25, ord),
                component(dense, ord),
            ));
        }
        Ok(hits)
    }

    /// Collapses each component ranking to its first `depth` documents, fuses
    /// those, and returns each document's best passage.
    fn document_hits(
        &self,
        bm25: &[(PassageOrd, f32)],
        dense: &[(PassageOrd, f32)],
        depth: usize,
        opts: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        let mut documents = Documents::default();
        let bm25 = documents.rank(self, bm25, depth)?;
        let dense = documents.rank(self, dense, depth)?;
        let keyed = |list: &[DocumentRank]| -> Vec<(u32, f32)> {
            list.iter().map(|d| (d.doc, d.score)).collect()
        };
        let ranked: Vec<(u32, f32)> = match opts.mode {
            Mode::Bm25 => keyed(&bm25),
            Mode::Dense => keyed(&dense),
            Mode::Hybrid => fuse(&keyed(&bm25), &keyed(&dense), opts.fusion),
        };
        let find = |list: &[DocumentRank], doc: u32| {
            list.iter()
                .position(|d| d.doc == doc)
                .map(|i| (i + 1, list[i]))
        };
        let mut hits = Vec::with_capacity(opts.k);
        for (doc, score) in ranked.into_iter().take(opts.k) {
            let (b, d) = (find(&bm25, doc), find(&dense, doc));
            // The passage of the component that ranked the document higher.
            let best = match (b, d) {
                (Some((rb, b)), Some((rd, d))) => {
                    if rd < rb {
                        d.passage
                    } else {
                        b.passage
                    }
                }
                (Some((_, b)), None) => b.passage,
                (None, Some((_, d))) => d.passage,
                (None, None) => continue,
            };
            let Some(passage) = documents.take(best) else {
                continue;
            };
            let component = |found: Option<(usize, DocumentRank)>| {
                found.map(|(rank, d)| ComponentScore {
                    score: d.score,
                    rank,
                })
            };
            hits.push(Hit::new(passage, score, component(b), component(d)));
        }
        Ok(hits)
    }
}

impl Hit {
    fn new(
        passage: Passage,
        score: f32,
        bm25: Option<ComponentScore>,
        dense: Option<ComponentScore>,
    ) -> Self {
        let Passage {
            id,
            doc_id,
            title,
            text,
            ..
        } = passage;
        Hit {
            passage_id: id,
            doc_id,
            title,
            text,
            score,
            bm25,
            dense,
        }
    }
}

/// A document in one component's ranking: its number in [`Documents`], its
/// best passage and that passage's score.
#[derive(Debug, Clone, Copy)]
struct DocumentRank {
    doc: u32,
    passage: PassageOrd,
    score: f32,
}

/// The documents met while ranking one query, numbered, and the passages
/// read on the way (each is read from the store once).
#[derive(Default)]
struct Documents {
    numbers: HashMap<String, u32>,
    passages: HashMap<PassageOrd, Passage>,
}

impl Documents {
    /// The first `depth` documents of a passage ranking, each at the rank of
    /// its best passage.
    fn rank(
        &mut self,
        retriever: &Retriever,
        ranking: &[(PassageOrd, f32)],
        depth: usize,
    ) -> Result<Vec<DocumentRank>> {
        let mut out: Vec<DocumentRank> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &(ord, score) in ranking {
            if out.len() == depth {
                break;
            }
            let doc_id = match self.passages.get(&ord) {
                Some(p) => p.doc_id.clone(),
                None => match retriever.index.passage(ord)? {
                    Some(p) => {
                        let id = p.doc_id.clone();
                        self.passages.insert(ord, p);
                        id
                    }
                    None => continue,
                },
            };
            let next = self.numbers.len() as u32;
            let doc = *self.numbers.entry(doc_id).or_insert(next);
            if seen.insert(doc) {
                out.push(DocumentRank {
                    doc,
                    passage: ord,
                    score,
                });
            }
        }
        Ok(out)
    }

    fn take(&mut self, ord: PassageOrd) -> Option<Passage> {
        self.passages.remove(&ord)
    }
}
