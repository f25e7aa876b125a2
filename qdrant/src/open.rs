//! An index location of either kind: a folder (the embedded store) or
//! `qdrant://…` (a collection), and the retriever over it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;
use capstan_indexer::{Encoder, EncoderOptions, EncoderPrecision};
use capstan_retriever::{EmbeddedStore, Retriever, Store};

use crate::error::Result;
use crate::location::QdrantLocation;
use crate::store::QdrantStore;

/// Where an index lives.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexLocation {
    /// An index folder.
    Folder(PathBuf),
    /// A collection in a Qdrant cluster.
    Qdrant(QdrantLocation),
}

impl IndexLocation {
    /// A folder, or a Qdrant location when the text starts with `qdrant://`.
    pub fn parse(text: &Path) -> Result<Self> {
        match text.to_str() {
            Some(s) if QdrantLocation::is_qdrant(s) => Ok(Self::Qdrant(QdrantLocation::parse(s)?)),
            _ => Ok(Self::Folder(text.to_path_buf())),
        }
    }
}

/// The retriever over an index location, its encoder loaded on `device`
/// at `precision` (by default [`EncoderPrecision::for_questions`] of the
/// index's). The encoder is `encoder` if given; otherwise the one
/// recorded in the index (a folder's manifest, a collection's description)
/// if that folder exists here, else `fallback` (a server of a collection
/// needs nothing local but the encoder's weights). Either way the store
/// refuses an encoder other than the one its passages were embedded with.
/// The encoder is loaded when a question is first embedded.
pub fn open_retriever(
    location: &Path,
    encoder: Option<&Path>,
    fallback: &Path,
    device: &Device,
    precision: Option<EncoderPrecision>,
) -> capstan_retriever::Result<Retriever> {
    let store: Arc<dyn Store> = match IndexLocation::parse(location)? {
        IndexLocation::Folder(dir) => Arc::new(EmbeddedStore::open(&dir)?),
        IndexLocation::Qdrant(location) => Arc::new(QdrantStore::open(location)?),
    };
    let recorded = PathBuf::from(&store.encoder().path);
    let path = match encoder {
        Some(p) => p.to_path_buf(),
        None if recorded.join("config.json").is_file() => recorded,
        None => fallback.to_path_buf(),
    };
    let options = EncoderOptions {
        precision: precision.unwrap_or(store.encoder().precision.for_questions(device)),
        padded: false,
    };
    let device = device.clone();
    Ok(Retriever::with_encoder_loader(
        store,
        Box::new(move || Ok(Encoder::load_with(&path, &device, options)?)),
    ))
}
