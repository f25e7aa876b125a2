//! Capstan's retriever: the top-k passages for a question, by BM25, dense
//! search, or hybrid fusion (a weighted combination of normalised scores by
//! default, reciprocal rank fusion as an option), with each
//! component's score and rank; and the BEIR ranking metrics used to evaluate it.
//!
//! ```no_run
//! use capstan_retriever::{Mode, Retriever, SearchOptions};
//! # fn main() -> capstan_retriever::Result<()> {
//! let retriever = Retriever::open("my-index".as_ref(), None)?;
//! let opts = SearchOptions { mode: Mode::Hybrid, k: 5, ..Default::default() };
//! for hit in retriever.search("who founded the city?", &opts)? {
//!     println!("{} {:.3} {}", hit.passage_id, hit.score, hit.title);
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod beir;
mod error;
mod fusion;
mod metrics;
mod retriever;
mod store;

pub use beir::{load_beir, load_beir_split, BeirQueries, Query};
pub use error::{Error, Result};
pub use fusion::{fuse, Fusion};
pub use metrics::{mrr_at, ndcg_at, recall_at, Judgements};
pub use retriever::{
    ComponentScore, EncoderLoader, Hit, Mode, Retriever, SearchOptions, Unit, DEFAULT_DEPTH, MAX_K,
};
pub use store::{
    Candidate, ComponentQuery, EmbeddedStore, Filter, PassageKey, Rankings, SentenceVector, Store,
    StoreCounts,
};
