//! What a Capstan collection holds and how it describes itself.
//!
//! Each passage is one point: the named dense vector `dense` (the encoder's,
//! cosine), the named sparse vector `bm25` (see [`crate::sparse`]; IDF by
//! Qdrant's `idf` modifier) and a payload with the passage and its document.
//! The collection's metadata key `capstan` holds a [`Description`]: the
//! encoder, chunking and analysis it was built with, so that a server needs
//! nothing local but the encoder's weights, and a run with another encoder
//! or analysis is refused.

use std::collections::HashMap;

use capstan_indexer::{Bm25Analyzer, ChunkParams, EncoderInfo, EncoderPrecision};
use qdrant_client::qdrant::{
    CreateCollectionBuilder, CreateFieldIndexCollectionBuilder, Distance, FieldType,
    HnswConfigDiffBuilder, Modifier, SparseIndexConfigBuilder, SparseVectorParamsBuilder,
    SparseVectorsConfigBuilder, VectorParamsBuilder, VectorsConfigBuilder,
};
use serde::{Deserialize, Serialize};

use crate::cluster::{Call, Cluster};
use crate::error::{Error, Result};
use crate::sparse::{Bm25Values, TERM_IDS};

/// The dense vector's name.
pub const DENSE: &str = "dense";
/// The sparse BM25 vector's name.
pub const BM25: &str = "bm25";
/// The collection metadata key of the [`Description`].
const METADATA_KEY: &str = "capstan";
/// The layout this code writes and reads.
pub const FORMAT: u32 = 1;
/// How long a collection that exists for one node may be missing on another.
const CONSENSUS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
const CONSENSUS_STEP: std::time::Duration = std::time::Duration::from_millis(200);

/// Payload fields that calls name (the payload is `points::PassagePayload`).
pub(crate) mod field {
    pub const DOC_ID: &str = "doc_id";
    pub const PASSAGE_NO: &str = "passage_no";
    pub const DOC_HASH: &str = "doc_hash";
    pub const METADATA: &str = "metadata";
}

/// How a collection was built, stored in its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Description {
    /// [`FORMAT`].
    pub format: u32,
    /// The Capstan version that created it.
    pub capstan_version: String,
    /// The dense encoder.
    pub encoder: EncoderInfo,
    /// Passage chunking.
    pub chunking: ChunkParams,
    /// [`Bm25Analyzer::NAME`].
    pub analyzer: String,
    /// How terms become sparse indices ([`TERM_IDS`]).
    pub term_ids: String,
    /// BM25's document-side constants.
    pub bm25: Bm25Values,
}

impl Description {
    /// The description of a collection this build writes.
    pub fn new(encoder: &EncoderInfo, chunking: ChunkParams, bm25: Bm25Values) -> Self {
        Self {
            format: FORMAT,
            capstan_version: env!("CARGO_PKG_VERSION").to_string(),
            encoder: encoder.clone(),
            chunking,
            analyzer: Bm25Analyzer::NAME.to_string(),
            term_ids: TERM_IDS.to_string(),
            bm25,
        }
    }

    /// Refuses to read or extend the collection with anything but its own
    /// format, analysis and encoder, naming what differs.
    pub fn check(&self, location: &str, encoder: &EncoderInfo) -> Result<()> {
        let mismatch = |key, built: String, given: String, advice| Error::Mismatch {
            location: location.to_string(),
            key,
            built,
            given,
            advice,
        };
        if self.format != FORMAT {
            return Err(mismatch(
                "format",
                self.format.to_string(),
                FORMAT.to_string(),
                "this Capstan reads only its own layout; re-index into a new collection",
            ));
        }
        if self.analyzer != Bm25Analyzer::NAME {
            return Err(mismatch(
                "analyzer",
                self.analyzer.clone(),
                Bm25Analyzer::NAME.to_string(),
                "queries would be analysed otherwise than the passages; re-index into a new collection",
            ));
        }
        if self.term_ids != TERM_IDS {
            return Err(mismatch(
                "term ids",
                self.term_ids.clone(),
                TERM_IDS.to_string(),
                "re-index into a new collection",
            ));
        }
        let built = &self.encoder;
        let describe = |e: &EncoderInfo| {
            format!(
                "encoder {} ({} dimensions, {:?} pooling, config.json sha256 {})",
                e.path, e.dimension, e.pooling, e.config_sha256
            )
        };
        if built.config_sha256 != encoder.config_sha256
            || built.dimension != encoder.dimension
            || built.pooling != encoder.pooling
        {
            return Err(mismatch(
                "encoder",
                describe(built),
                describe(encoder),
                "use the encoder the collection was built with (--encoder), or re-index",
            ));
        }
        Ok(())
    }
}

impl Description {
    /// Refuses a writer whose vectors are int8 where the collection's are float, or the
    /// reverse (as an index folder does): float precisions give the same vectors within their
    /// rounding, int8's differ by more, so one collection holds one or the other.
    pub fn check_writer_precision(&self, location: &str, encoder: &EncoderInfo) -> Result<()> {
        let (built, given) = (self.encoder.precision, encoder.precision);
        if (built == EncoderPrecision::Int8) != (given == EncoderPrecision::Int8) {
            return Err(Error::Mismatch {
                location: location.to_string(),
                key: "encoder precision",
                built: built.to_string(),
                given: given.to_string(),
                advice: "write with the collection's --encoder-dtype (left out, `capstan index \
                         --append` takes it from the collection)",
            });
        }
        Ok(())
    }
}

/// How a new collection is laid out in the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectionOptions {
    /// Shards (default: Qdrant's, one per node).
    pub shards: Option<u32>,
    /// Copies of each shard (default 1).
    pub replication_factor: Option<u32>,
    /// Copies a write must reach before it is acknowledged (default 1).
    pub write_consistency_factor: Option<u32>,
    /// Vectors, sparse index and payload on disk (memory-mapped) rather than in RAM.
    pub on_disk: bool,
    /// HNSW links per node (Qdrant's `m`).
    pub hnsw_m: Option<u64>,
    /// HNSW build breadth (Qdrant's `ef_construct`).
    pub hnsw_ef_construct: Option<u64>,
}

impl CollectionOptions {
    /// Rejects impossible layouts before the cluster sees them.
    pub fn validate(&self) -> Result<()> {
        let positive = |name, v: Option<u32>| match v {
            Some(0) => Err(Error::Setting {
                name,
                message: "must be at least 1".into(),
            }),
            _ => Ok(()),
        };
        positive("--shards", self.shards)?;
        positive("--replication-factor", self.replication_factor)?;
        positive("--write-consistency-factor", self.write_consistency_factor)?;
        if let (Some(w), r) = (self.write_consistency_factor, self.replication_factor) {
            if w > r.unwrap_or(1) {
                return Err(Error::Setting {
                    name: "--write-consistency-factor",
                    message: format!(
                        "{w} exceeds the replication factor {}: no write could succeed",
                        r.unwrap_or(1)
                    ),
                });
            }
        }
        if self.hnsw_m.is_some_and(|m| m == 0 || m > 256) {
            return Err(Error::Setting {
                name: "--hnsw-m",
                message: "must be within 1..=256".into(),
            });
        }
        if self.hnsw_ef_construct.is_some_and(|ef| ef < 4) {
            return Err(Error::Setting {
                name: "--hnsw-ef-construction",
                message: "must be at least 4".into(),
            });
        }
        Ok(())
    }
}

/// The collection's description, or `None` when the collection does not
/// exist. A collection without one was not made by Capstan.
/// The description of the collection at `cluster`'s location (`None`: no collection yet).
pub fn collection_description(cluster: &Cluster) -> Result<Option<Description>> {
    cluster.block_on(read_description(cluster))
}

pub(crate) async fn read_description(cluster: &Cluster) -> Result<Option<Description>> {
    let location = cluster.location();
    let name = location.collection.clone();
    let exists = cluster
        .call(Call::Read, "collection_exists", |c| {
            let name = name.clone();
            async move { c.collection_exists(name).await }
        })
        .await?;
    if !exists {
        return Ok(None);
    }
    // A collection another writer has just created may exist for one node
    // and not yet for the next: give consensus a moment before concluding.
    let mut waited = std::time::Duration::ZERO;
    let info = loop {
        let info = cluster
            .call(Call::Read, "collection_info", |c| {
                let name = name.clone();
                async move { c.collection_info(name).await }
            })
            .await;
        match info {
            Err(Error::Refused { message, .. })
                if message.starts_with("NotFound") && waited < CONSENSUS_WAIT =>
            {
                tokio::time::sleep(CONSENSUS_STEP).await;
                waited += CONSENSUS_STEP;
            }
            Err(Error::Refused { message, .. }) if message.starts_with("NotFound") => {
                return Ok(None)
            }
            other => break other?,
        }
    };
    let foreign = |message: String| Error::Foreign {
        location: location.to_string(),
        message,
    };
    let value = info
        .result
        .and_then(|r| r.config)
        .and_then(|c| c.metadata.get(METADATA_KEY).cloned())
        .ok_or_else(|| {
            foreign(format!(
                "the collection has no `{METADATA_KEY}` metadata: it was not made by `capstan index`"
            ))
        })?;
    serde_json::from_value(value.into_json())
        .map(Some)
        .map_err(|e| {
            foreign(format!(
                "its `{METADATA_KEY}` metadata is not Capstan's: {e}"
            ))
        })
}

/// Creates the collection with `description`; `false` when another writer
/// created it first (then its description is the one to use).
pub(crate) async fn create_collection(
    cluster: &Cluster,
    description: &Description,
    options: CollectionOptions,
) -> Result<bool> {
    let location = cluster.location();
    let name = location.collection.clone();
    let mut dense = VectorsConfigBuilder::default();
    dense.add_named_vector_params(
        DENSE,
        VectorParamsBuilder::new(description.encoder.dimension as u64, Distance::Cosine)
            .on_disk(options.on_disk),
    );
    let mut sparse = SparseVectorsConfigBuilder::default();
    sparse.add_named_vector_params(
        BM25,
        SparseVectorParamsBuilder::default()
            .modifier(Modifier::Idf)
            .index(SparseIndexConfigBuilder::default().on_disk(options.on_disk)),
    );
    let mut hnsw = HnswConfigDiffBuilder::default();
    if let Some(m) = options.hnsw_m {
        hnsw = hnsw.m(m);
    }
    if let Some(ef) = options.hnsw_ef_construct {
        hnsw = hnsw.ef_construct(ef);
    }
    let metadata: HashMap<String, serde_json::Value> = HashMap::from([(
        METADATA_KEY.to_string(),
        serde_json::to_value(description).expect("a description serialises"),
    )]);
    let mut request = CreateCollectionBuilder::new(name.clone())
        .vectors_config(dense)
        .sparse_vectors_config(sparse)
        .on_disk_payload(options.on_disk)
        .hnsw_config(hnsw)
        .metadata(metadata)
        .timeout(60);
    if let Some(s) = options.shards {
        request = request.shard_number(s);
    }
    if let Some(r) = options.replication_factor {
        request = request.replication_factor(r);
    }
    if let Some(w) = options.write_consistency_factor {
        request = request.write_consistency_factor(w);
    }
    let created = cluster
        .call(Call::Write, "create_collection", |c| {
            let request = request.clone();
            async move { c.create_collection(request).await }
        })
        .await;
    match created {
        Ok(_) => {}
        Err(Error::Refused { message, .. }) if message.contains("already exists") => {
            return Ok(false)
        }
        Err(e) => return Err(e),
    }
    // Indexed payload fields: deletes and stale-passage clean-up filter on them.
    for (field, kind) in [
        (field::DOC_ID, FieldType::Keyword),
        (field::PASSAGE_NO, FieldType::Integer),
    ] {
        cluster
            .call(Call::Write, "create_field_index", |c| {
                let request =
                    CreateFieldIndexCollectionBuilder::new(name.clone(), field, kind).wait(true);
                async move { c.create_field_index(request).await }
            })
            .await?;
    }
    Ok(true)
}
