//! `manifest.json`: what an index was built with, and its counts.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bm25::Bm25Params;
use crate::chunk::ChunkParams;
use crate::dense::HnswParams;
use crate::error::{Error, Result};
use crate::integrity::FileTable;
use capstan_encoder::EncoderInfo;

/// The on-disk format this build of Capstan writes and reads (2: the
/// manifest lists every file's size and checksum).
pub const FORMAT_VERSION: u32 = 2;

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
    /// Every file of the generation (but this one) with its size and
    /// checksum, filled in at publish.
    #[serde(default)]
    pub files: FileTable,
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
    /// Reads and checks `dir/manifest.json`; with `checksum` (from `CURRENT`)
    /// its bytes must hash to it.
    pub fn read(dir: &Path) -> Result<Self> {
        Self::read_checked(dir, None)
    }

    pub(crate) fn read_checked(dir: &Path, checksum: Option<&str>) -> Result<Self> {
        let path = dir.join("manifest.json");
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        if let Some(want) = checksum {
            let got = crate::integrity::checksum_bytes(&bytes);
            if got != want {
                return Err(Error::Damaged {
                    path,
                    message: format!("has checksum {got}, CURRENT says {want} (its bytes changed)"),
                });
            }
        }
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
        let manifest: Self =
            serde_json::from_value(value).map_err(|e| Error::index(&path, format!("field {e}")))?;
        manifest
            .validate()
            .map_err(|message| Error::index(&path, message))?;
        Ok(manifest)
    }

    /// Values no index can have (a hand edit, a damaged file): each names
    /// its field.
    fn validate(&self) -> std::result::Result<(), String> {
        let field = |name: &str, e: Error| match e {
            Error::Setting {
                name: flag,
                message,
            } => {
                format!("field {name} (the setting {flag}): {message}")
            }
            other => format!("field {name}: {other}"),
        };
        let dim = self.encoder.dimension;
        if !(1..=65_536).contains(&dim) {
            return Err(format!(
                "field encoder.dimension: {dim} must be within 1..=65536"
            ));
        }
        if self.encoder.max_tokens < 3 {
            return Err(format!(
                "field encoder.max_tokens: {} must be at least 3",
                self.encoder.max_tokens
            ));
        }
        self.chunking.validate().map_err(|e| field("chunking", e))?;
        if !(self.bm25.k1.is_finite() && self.bm25.k1 >= 0.0) {
            return Err(format!(
                "field bm25.k1: {} must be a finite number >= 0",
                self.bm25.k1
            ));
        }
        if !(0.0..=1.0).contains(&self.bm25.b) {
            return Err(format!(
                "field bm25.b: {} must be within [0, 1]",
                self.bm25.b
            ));
        }
        self.hnsw.validate().map_err(|e| field("hnsw", e))?;
        let c = &self.counts;
        if c.passages + c.deleted_passages != c.stored_passages {
            return Err(format!(
                "field counts: passages ({}) + deleted_passages ({}) != stored_passages ({})",
                c.passages, c.deleted_passages, c.stored_passages
            ));
        }
        if c.documents > c.passages {
            return Err(format!(
                "field counts: {} documents but only {} passages",
                c.documents, c.passages
            ));
        }
        if self.files.is_empty() {
            return Err("field files: empty (every index lists its files)".into());
        }
        Ok(())
    }

    /// Writes `dir/manifest.json` durably; returns the checksum of its bytes
    /// (recorded in `CURRENT`).
    pub(crate) fn write(&self, dir: &Path) -> Result<String> {
        let path = dir.join("manifest.json");
        let json = serde_json::to_vec_pretty(self).expect("manifest serialises");
        crate::fsutil::write_durably(&path, &json)?;
        Ok(crate::integrity::checksum_bytes(&json))
    }
}
