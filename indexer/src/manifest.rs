//! `manifest.json`: what an index was built with, and its counts.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bm25::Bm25Params;
use crate::chunk::ChunkParams;
use crate::dense::HnswParams;
use crate::encoder::EncoderInfo;
use crate::error::{Error, Result};

/// The on-disk format this build of Capstan writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Everything needed to reopen, check and rebuild an index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// On-disk format version ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// The dense encoder the vectors come from.
    pub encoder: EncoderInfo,
    /// How documents were cut into passages.
    pub chunking: ChunkParams,
    /// BM25 parameters used at search time.
    pub bm25: Bm25Params,
    /// HNSW construction parameters.
    pub hnsw: HnswParams,
    /// Whether passage sentences were embedded (for the extractive reader).
    #[serde(default)]
    pub sentence_vectors: bool,
    /// Sizes.
    pub counts: Counts,
    /// SHA-256 of the corpus of the last full build, followed by those of
    /// every `--append`: an identical re-run is recognised and skipped.
    pub corpus_sha256: Vec<String>,
}

/// Sizes of an index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Live documents.
    pub documents: u64,
    /// Live passages.
    pub passages: u64,
    /// Stored vectors, tombstoned ones included (the next ordinal).
    pub stored_passages: u64,
    /// Tombstoned passages awaiting `capstan index compact`.
    pub deleted_passages: u64,
    /// Stored sentence vectors (the next sentence row).
    #[serde(default)]
    pub stored_sentences: u64,
}

impl Manifest {
    /// Reads and checks `dir/manifest.json`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("manifest.json");
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::index(&path, format!("not valid JSON: {e}")))?;
        let version = value.get("format_version").and_then(|v| v.as_u64());
        if version != Some(FORMAT_VERSION as u64) {
            return Err(Error::index(
                &path,
                format!(
                    "format version {} is not the version this Capstan reads ({FORMAT_VERSION}); rebuild the index",
                    version.map_or("(missing)".to_string(), |v| v.to_string())
                ),
            ));
        }
        serde_json::from_value(value).map_err(|e| Error::index(&path, format!("field {e}")))
    }

    /// Writes `dir/manifest.json` durably.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join("manifest.json");
        let json = serde_json::to_vec_pretty(self).expect("manifest serialises");
        crate::fsutil::write_durably(&path, &json)
    }
}
