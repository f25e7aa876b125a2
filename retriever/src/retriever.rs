//! Question -> top-k passages, by BM25, dense search or both fused.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use capstan_indexer::{DenseStrategy, Encoder, Location, Passage};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fusion::{fuse, Fusion};
use crate::store::{Candidate, ComponentQuery, EmbeddedStore, Filter, PassageKey, Store};

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
    /// HNSW search breadth (at least twice the candidates asked of the dense side).
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
            depth: DEFAULT_DEPTH,
            unit: Unit::Passages,
        }
    }
}

/// Candidates each retriever gives hybrid fusion by default: the depth the
/// fusion default was chosen at (min-max normalisation depends on it), and
/// enough for 100 distinct documents in most rankings.
pub const DEFAULT_DEPTH: usize = 200;

/// Relative difference below which two component scores tie (a few f32 ulps).
const TIE: f32 = 1e-6;

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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Its pages and section in its document, where known (`page_start`,
    /// `page_end`, `section` in JSON).
    #[serde(flatten)]
    pub location: Location,
}

/// A store with the encoder for its questions. Cheap to share (`Arc`).
pub struct Retriever {
    store: Arc<dyn Store>,
    encoder: OnceLock<Arc<Encoder>>,
    /// Loads the encoder when first needed ([`Retriever::with_encoder_loader`]).
    load: Option<EncoderLoader>,
}

/// Loads a retriever's encoder on first use.
pub type EncoderLoader = Box<dyn Fn() -> Result<Encoder> + Send + Sync>;

impl Retriever {
    /// Opens the index folder `dir` with `encoder`, or with the encoder
    /// folder recorded in its manifest when `None`.
    pub fn open(dir: &Path, encoder: Option<&Path>) -> Result<Self> {
        let store = EmbeddedStore::open(dir)?;
        let encoder = match encoder {
            Some(path) => Encoder::load(path)?,
            None => Encoder::load(Path::new(&store.index().manifest().encoder.path))?,
        };
        Self::new(Arc::new(store), Arc::new(encoder))
    }

    /// Pairs a store with an encoder, checking they belong together.
    pub fn new(store: Arc<dyn Store>, encoder: Arc<Encoder>) -> Result<Self> {
        store.check_encoder(encoder.info())?;
        Ok(Self {
            store,
            encoder: OnceLock::from(encoder),
            load: None,
        })
    }

    /// A store whose encoder `load` loads when a question is first embedded
    /// (and checked against the store then): a BM25 search never pays for
    /// loading the model.
    pub fn with_encoder_loader(store: Arc<dyn Store>, load: EncoderLoader) -> Self {
        Self {
            store,
            encoder: OnceLock::new(),
            load: Some(load),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The dimension of the index's vectors (known without loading the encoder).
    pub fn dimension(&self) -> usize {
        self.store.encoder().dimension
    }

    /// The encoder, loaded now if it was not yet.
    pub fn encoder(&self) -> Result<&Arc<Encoder>> {
        if let Some(encoder) = self.encoder.get() {
            return Ok(encoder);
        }
        let load = self
            .load
            .as_ref()
            .expect("a retriever is made with an encoder or a loader");
        let encoder = load()?;
        self.store.check_encoder(encoder.info())?;
        // Two first questions at once may both load; one copy is kept.
        Ok(self.encoder.get_or_init(|| Arc::new(encoder)))
    }

    /// Embeds a question as the index's vectors are embedded (unit length).
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        Ok(self
            .embed_texts(&[query])?
            .pop()
            .expect("one input, one vector"))
    }

    /// Embeds texts as [`Retriever::embed_query`] does (unit length), in one batch.
    pub fn embed_texts<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>> {
        let mut vectors = self.encoder()?.embed(texts)?;
        vectors
            .iter_mut()
            .for_each(|v| capstan_indexer::normalize(v));
        Ok(vectors)
    }

    /// The top `opts.k` passages for `query`.
    pub fn search(&self, query: &str, opts: &SearchOptions) -> Result<Vec<Hit>> {
        self.search_with(query, None, opts, None)
    }

    /// As [`Retriever::search`], with the question's vector already computed
    /// (batch evaluation embeds all questions at once).
    pub fn search_with_vector(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        opts: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        self.search_with(query, vector, opts, None)
    }

    /// The top `opts.k` passages for `query` whose documents meet `filter`;
    /// `vector` is the question's, when already computed.
    pub fn search_with(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        opts: &SearchOptions,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>> {
        check_options(query, opts)?;
        if let Some(f) = filter {
            f.validate()?;
        }
        let depth = match opts.mode {
            Mode::Hybrid => opts.depth.max(opts.k),
            _ => opts.k,
        };
        let passages = match opts.unit {
            Unit::Passages => depth,
            Unit::Documents => depth.saturating_mul(PASSAGES_PER_DOCUMENT),
        };
        let owned;
        let vector = match (opts.mode, vector) {
            (Mode::Bm25, _) => None,
            (_, Some(v)) => Some(v),
            (_, None) => {
                owned = self.embed_query(query)?;
                Some(owned.as_slice())
            }
        };
        let rankings = self.store.rank(&ComponentQuery {
            text: query,
            vector,
            bm25: if opts.mode == Mode::Dense {
                0
            } else {
                passages
            },
            dense: if opts.mode == Mode::Bm25 { 0 } else { passages },
            strategy: opts.dense,
            // An HNSW breadth of twice the candidates keeps recall@depth at
            // 0.95-0.99 up to 80K vectors (capstan-bench crossover).
            ef: opts.ef.max(2 * passages),
            filter,
        })?;
        let mut read = Passages::new(self.store.as_ref());
        let mut bm25 = read.keep(rankings.bm25);
        let mut dense = read.keep(rankings.dense);
        read.order_ties(&mut bm25)?;
        read.order_ties(&mut dense)?;
        match opts.unit {
            Unit::Passages => passage_hits(&mut read, &bm25, &dense, opts),
            Unit::Documents => document_hits(&mut read, &bm25, &dense, depth, opts),
        }
    }
}

fn check_options(query: &str, opts: &SearchOptions) -> Result<()> {
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
    Ok(())
}

/// The fused passage ranking, cut at `k`, skipping passages deleted since
/// they were ranked.
fn passage_hits(
    read: &mut Passages,
    bm25: &[(PassageKey, f32)],
    dense: &[(PassageKey, f32)],
    opts: &SearchOptions,
) -> Result<Vec<Hit>> {
    let ranked: Vec<(PassageKey, f32)> = match opts.mode {
        Mode::Bm25 => bm25.to_vec(),
        Mode::Dense => dense.to_vec(),
        Mode::Hybrid => fuse(bm25, dense, opts.fusion),
    };
    let component = |list: &[(PassageKey, f32)], key: PassageKey| {
        list.iter()
            .position(|(o, _)| *o == key)
            .map(|i| ComponentScore {
                score: list[i].1,
                rank: i + 1,
            })
    };
    let mut hits = Vec::with_capacity(opts.k);
    // Read the passages a window at a time: usually the first window is all.
    for window in ranked.chunks(opts.k) {
        let keys: Vec<PassageKey> = window.iter().map(|(key, _)| *key).collect();
        read.load(&keys)?;
        for &(key, score) in window {
            if hits.len() == opts.k {
                return Ok(hits);
            }
            if let Some(passage) = read.take(key) {
                hits.push(Hit::new(
                    passage,
                    score,
                    component(bm25, key),
                    component(dense, key),
                ));
            }
        }
    }
    Ok(hits)
}

/// Collapses each component ranking to its first `depth` documents, fuses
/// those, and returns each document's best passage.
fn document_hits(
    read: &mut Passages,
    bm25: &[(PassageKey, f32)],
    dense: &[(PassageKey, f32)],
    depth: usize,
    opts: &SearchOptions,
) -> Result<Vec<Hit>> {
    let all: Vec<PassageKey> = bm25.iter().chain(dense).map(|(key, _)| *key).collect();
    read.load(&all)?;
    let mut numbers = HashMap::new();
    let bm25 = read.documents(bm25, depth, &mut numbers);
    let dense = read.documents(dense, depth, &mut numbers);
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
        let Some(passage) = read.take(best) else {
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
            location,
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
            location,
        }
    }
}

/// A document in one component's ranking: its number, its best passage and
/// that passage's score.
#[derive(Debug, Clone, Copy)]
struct DocumentRank {
    doc: u32,
    passage: PassageKey,
    score: f32,
}

/// The passages of one query's candidates: those the store sent with its
/// rankings, and those read since (each is read once, in batches).
struct Passages<'a> {
    store: &'a dyn Store,
    /// `None`: deleted since it was ranked.
    read: HashMap<PassageKey, Option<Passage>>,
}

impl<'a> Passages<'a> {
    fn new(store: &'a dyn Store) -> Self {
        Self {
            store,
            read: HashMap::new(),
        }
    }

    /// Keeps the passages a ranking carries; returns the ranking's keys and scores.
    fn keep(&mut self, ranking: Vec<Candidate>) -> Vec<(PassageKey, f32)> {
        ranking
            .into_iter()
            .map(|c| {
                if let Some(p) = c.passage {
                    self.read.insert(c.key, Some(p));
                }
                (c.key, c.score)
            })
            .collect()
    }

    /// Reads the passages of `keys` not read yet, in one call.
    fn load(&mut self, keys: &[PassageKey]) -> Result<()> {
        let mut missing: Vec<PassageKey> = keys
            .iter()
            .copied()
            .filter(|k| !self.read.contains_key(k))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let found = self.store.passages(&missing)?;
        self.read.extend(missing.into_iter().zip(found));
        Ok(())
    }

    fn take(&mut self, key: PassageKey) -> Option<Passage> {
        self.read.remove(&key).flatten()
    }

    /// The first `depth` documents of a passage ranking (passages loaded),
    /// each at the rank of its best passage, numbered through `numbers`.
    fn documents(
        &self,
        ranking: &[(PassageKey, f32)],
        depth: usize,
        numbers: &mut HashMap<String, u32>,
    ) -> Vec<DocumentRank> {
        let mut out: Vec<DocumentRank> = Vec::new();
        let mut seen = HashSet::new();
        for &(key, score) in ranking {
            if out.len() == depth {
                break;
            }
            let Some(Some(p)) = self.read.get(&key) else {
                continue;
            };
            let next = numbers.len() as u32;
            let doc = *numbers.entry(p.doc_id.clone()).or_insert(next);
            if seen.insert(doc) {
                out.push(DocumentRank {
                    doc,
                    passage: key,
                    score,
                });
            }
        }
        out
    }

    /// Orders passages of equal score by document id and passage number
    /// (reading only those), so that a ranking does not depend on a store's
    /// keys: an index folder and a Qdrant collection of one corpus rank alike.
    /// Scores within [`TIE`] (relative) tie: two engines summing the same
    /// terms in another order differ in the last bits.
    fn order_ties(&mut self, ranking: &mut [(PassageKey, f32)]) -> Result<()> {
        let tie = |a: f32, b: f32| (a - b).abs() <= TIE * a.abs().max(b.abs());
        let tied: Vec<PassageKey> = ranking
            .windows(2)
            .filter(|w| tie(w[0].1, w[1].1))
            .flat_map(|w| [w[0].0, w[1].0])
            .collect();
        if tied.is_empty() {
            return Ok(());
        }
        self.load(&tied)?;
        let place = |key: &PassageKey| match self.read.get(key) {
            Some(Some(p)) => (false, p.doc_id.as_str(), p.index),
            _ => (true, "", 0),
        };
        for run in ranking.chunk_by_mut(|a, b| tie(a.1, b.1)) {
            if run.len() > 1 {
                run.sort_by(|a, b| place(&a.0).cmp(&place(&b.0)));
            }
        }
        Ok(())
    }
}
