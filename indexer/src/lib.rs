//! Capstan's offline indexing: documents -> passages -> a BM25 index
//! (tantivy), a dense index (a BERT encoder in candle, HNSW via hnsw_rs, raw
//! vectors) and a passage store (sled), tied together by passage ordinals and
//! described by a `manifest.json`.
//!
//! ```no_run
//! use capstan_indexer::{read_corpus, Encoder, IndexSettings, NoProgress};
//! # fn main() -> capstan_indexer::Result<()> {
//! let encoder = Encoder::load("models/all-MiniLM-L6-v2".as_ref())?;
//! let corpus = read_corpus("corpus.jsonl".as_ref(), false)?;
//! capstan_indexer::build("my-index".as_ref(), &corpus, &encoder, IndexSettings::default(), &NoProgress)?;
//! let index = capstan_indexer::Index::open("my-index".as_ref())?;
//! let hits = index.bm25().search("who founded the city", 10)?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod bm25;
mod changes;
mod chunk;
mod dense;
mod distance;
mod document;
mod error;
pub mod extract;
mod frozen;
mod frozen_store;
mod fsutil;
mod generations;
mod index;
mod integrity;
mod manifest;
mod progress;
mod readonly_dir;
mod store;
mod topk;

pub use bm25::{Bm25Analyzer, Bm25Index, Bm25Params, Bm25Writer};
pub use chunk::{ChunkParams, Chunker, Location, Passage};
pub use dense::{
    build_graph, dot, exact_top_k, normalize, DenseIndex, DenseStrategy, Graph, HnswParams,
    UnitCosine,
};
pub use document::{
    read_corpus, read_corpus_reporting, read_corpus_with, Corpus, Document, ReadOptions,
};
// The encoder the index is built with (its own crate, which the reader shares).
pub use capstan_encoder::{
    capstan_home, file_identity, sentence_embedding_text, sentence_spans, Encoder, EncoderInfo,
    EncoderOptions, EncoderPrecision, Pooling,
};
pub use changes::{append, build, compact, delete, ChangeSummary, IndexSettings};
pub use error::{Error, LineProblem, Result};
pub use extract::{ChildExtractor, Layout, Section};
pub use frozen::FrozenGraph;
pub use index::{Index, Verification};
pub use integrity::{Damage, FileSum, FileTable};
pub use manifest::{Counts, Manifest, FORMAT_VERSION};
pub use progress::{NoProgress, Progress};
pub use store::{Metadata, PassageOrd, SentenceRef};

/// The message of a caught panic (a `&str` or `String` payload).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}
