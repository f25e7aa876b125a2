//! Capstan's index past one machine: a collection in a Qdrant cluster
//! (sharded and replicated by Qdrant), written by any number of `--part`
//! writers and searched by stateless servers through the same retriever as
//! an index folder.
//!
//! ```no_run
//! use std::sync::Arc;
//! use capstan_indexer::{read_corpus, Encoder, NoProgress};
//! use capstan_qdrant::{Cluster, QdrantLocation, QdrantStore, WriteSettings};
//! use capstan_retriever::{Retriever, SearchOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let location = QdrantLocation::parse("qdrant://127.0.0.1:6334/docs")?;
//! let encoder = Arc::new(Encoder::load("models/all-MiniLM-L6-v2".as_ref())?);
//! let corpus = read_corpus("corpus.jsonl".as_ref(), false)?;
//! let cluster = Arc::new(Cluster::new(location.clone())?);
//! capstan_qdrant::write_corpus(&cluster, &corpus, &encoder, &WriteSettings::default(), &NoProgress)?;
//! let retriever = Retriever::new(Arc::new(QdrantStore::open(location)?), encoder)?;
//! let hits = retriever.search("who founded the city?", &SearchOptions::default())?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod cluster;
mod error;
mod location;
mod open;
mod points;
mod schema;
mod sparse;
mod store;
mod writer;

pub use cluster::{Cluster, API_KEY_VAR};
pub use error::{Error, Result};
pub use location::{QdrantLocation, SCHEME};
pub use open::{open_retriever, IndexLocation};
pub use points::point_uuid;
pub use schema::{collection_description, CollectionOptions, Description, BM25, DENSE, FORMAT};
pub use sparse::{term_id, Bm25Encoder, Bm25Values, Sparse, TERM_IDS};
pub use store::QdrantStore;
pub use writer::{
    delete_documents, write_corpus, DeleteSummary, Part, WriteSettings, WriteSummary,
};
