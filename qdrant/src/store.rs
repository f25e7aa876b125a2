//! A collection as a retriever [`Store`]: BM25 and dense rankings from
//! Qdrant, fused by the retriever exactly as for an index folder.
//!
//! Both rankings of a query go in one `query_batch` call (one round trip),
//! ids and scores only; the retriever then reads the passages it keeps (the
//! top k) with one `get_points`. Sending the 2 x 200 candidates' payloads
//! instead cost 3 ms more a query on one node (docs/BENCHMARKS.md). Fusion stays client-side: Qdrant's server-side RRF uses k = 2 by
//! default and breaks ties differently on each replica, so the same query
//! could come back in another order; here ties are broken by point id.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_indexer::{DenseStrategy, EncoderInfo, Passage};
use capstan_retriever::{Candidate, ComponentQuery, PassageKey, Rankings, Store, StoreCounts};
use qdrant_client::qdrant::{
    Condition, CountPointsBuilder, Filter, GetPointsBuilder, QueryBatchPointsBuilder,
    QueryPointsBuilder, ScoredPoint, SearchParamsBuilder, VectorInput,
};

use crate::cluster::{Call, Cluster};
use crate::error::{Error, Result};
use crate::location::QdrantLocation;
use crate::points::{id_of, key_of, passage_of, qdrant_filter};
use crate::schema::{self, field, Description, BM25, DENSE};
use crate::sparse::Bm25Encoder;

/// How long counts (shown by `/health`) are reused before asking again.
const COUNTS_TTL: Duration = Duration::from_secs(5);

/// A Capstan collection in a Qdrant cluster, opened for search.
pub struct QdrantStore {
    cluster: Arc<Cluster>,
    description: Description,
    sparse: Bm25Encoder,
    counts: Mutex<Option<(Instant, StoreCounts)>>,
}

impl QdrantStore {
    /// Connects to the cluster and reads the collection's description; an
    /// unreachable cluster or a missing or foreign collection is an error
    /// naming the location.
    pub fn open(location: QdrantLocation) -> Result<Self> {
        let cluster = Arc::new(Cluster::new(location)?);
        cluster.check_reachable()?;
        let description = cluster
            .block_on(schema::read_description(&cluster))?
            .ok_or_else(|| Error::NoCollection {
                location: cluster.location().to_string(),
            })?;
        // Its own encoder passes; this refuses another format or analysis.
        description.check(&cluster.location().to_string(), &description.encoder)?;
        Ok(Self {
            sparse: Bm25Encoder::new(description.bm25),
            description,
            cluster,
            counts: Mutex::new(None),
        })
    }

    /// How the collection was built.
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// The connection.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Exact counts of passages and documents (each document has a passage 0).
    pub fn exact_counts(&self) -> Result<StoreCounts> {
        let collection = self.cluster.location().collection.clone();
        self.cluster.block_on(async {
            let count = |filter: Option<Filter>| {
                let collection = collection.clone();
                self.cluster.call(Call::Read, "count", move |c| {
                    let mut request = CountPointsBuilder::new(collection.clone()).exact(true);
                    if let Some(f) = &filter {
                        request = request.filter(f.clone());
                    }
                    async move { c.count(request).await }
                })
            };
            let n = |r: qdrant_client::qdrant::CountResponse| r.result.map_or(0, |c| c.count);
            let passages = n(count(None).await?);
            let documents = n(count(Some(Filter::must([Condition::matches(
                field::PASSAGE_NO,
                0i64,
            )])))
            .await?);
            Ok(StoreCounts {
                documents,
                passages,
            })
        })
    }

    fn candidates(&self, points: Vec<ScoredPoint>) -> Result<Vec<Candidate>> {
        let mut out = Vec::with_capacity(points.len());
        for p in points {
            let Some(key) = key_of(p.id.as_ref()) else {
                return Err(Error::Foreign {
                    location: self.cluster.location().to_string(),
                    message: "a point has an id Capstan never writes".into(),
                });
            };
            out.push(Candidate {
                key,
                score: p.score,
                passage: None,
            });
        }
        // Equal scores in id order, whichever replica answered.
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
        Ok(out)
    }
}

impl Store for QdrantStore {
    fn location(&self) -> String {
        self.cluster.location().to_string()
    }

    fn encoder(&self) -> &EncoderInfo {
        &self.description.encoder
    }

    fn check_encoder(&self, encoder: &EncoderInfo) -> capstan_retriever::Result<()> {
        Ok(self
            .description
            .check(&self.cluster.location().to_string(), encoder)?)
    }

    /// Counts a few seconds old at most; but whether the cluster answers is
    /// asked every time (a cheap health check), since `/health` reports it.
    fn counts(&self) -> capstan_retriever::Result<StoreCounts> {
        let mut cached = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, counts)) = *cached {
            if at.elapsed() < COUNTS_TTL {
                self.cluster.check_reachable()?;
                return Ok(counts);
            }
        }
        let counts = self.exact_counts()?;
        *cached = Some((Instant::now(), counts));
        Ok(counts)
    }

    fn rank(&self, query: &ComponentQuery) -> capstan_retriever::Result<Rankings> {
        let collection = &self.cluster.location().collection;
        let filter = query.filter.and_then(qdrant_filter);
        let mut requests = Vec::new();
        let sparse = self.sparse.query(query.text);
        let run_bm25 = query.bm25 > 0 && !sparse.is_empty();
        if run_bm25 {
            let mut q = QueryPointsBuilder::new(collection.clone())
                .query(VectorInput::new_sparse(sparse.indices, sparse.values))
                .using(BM25)
                .limit(query.bm25 as u64)
                .with_payload(false);
            if let Some(f) = &filter {
                q = q.filter(f.clone());
            }
            requests.push(q.build());
        }
        let run_dense = query.dense > 0;
        if run_dense {
            let vector = query
                .vector
                .ok_or_else(|| capstan_retriever::Error::Invalid {
                    name: "query",
                    message: "dense search needs the question's vector".into(),
                })?;
            let params = match query.strategy {
                DenseStrategy::Exact => SearchParamsBuilder::default().exact(true),
                // Qdrant itself scans small segments exactly (its full_scan_threshold).
                DenseStrategy::Auto | DenseStrategy::Hnsw => {
                    SearchParamsBuilder::default().hnsw_ef(query.ef.max(query.dense) as u64)
                }
            };
            let mut q = QueryPointsBuilder::new(collection.clone())
                .query(VectorInput::new_dense(vector.to_vec()))
                .using(DENSE)
                .params(params)
                .limit(query.dense as u64)
                .with_payload(false);
            if let Some(f) = &filter {
                q = q.filter(f.clone());
            }
            requests.push(q.build());
        }
        if requests.is_empty() {
            return Ok(Rankings::default());
        }
        let response =
            self.cluster
                .block_on(self.cluster.call(Call::Read, "query_batch", |c| {
                    let request =
                        QueryBatchPointsBuilder::new(collection.clone(), requests.clone());
                    async move { c.query_batch(request).await }
                }))?;
        let mut results = response.result.into_iter().map(|r| r.result);
        let bm25 = match run_bm25 {
            true => self.candidates(results.next().unwrap_or_default())?,
            false => Vec::new(),
        };
        let dense = match run_dense {
            true => self.candidates(results.next().unwrap_or_default())?,
            false => Vec::new(),
        };
        Ok(Rankings { bm25, dense })
    }

    fn passages(&self, keys: &[PassageKey]) -> capstan_retriever::Result<Vec<Option<Passage>>> {
        let collection = self.cluster.location().collection.clone();
        let ids: Vec<_> = keys.iter().map(|&k| id_of(k)).collect();
        let found = self
            .cluster
            .block_on(self.cluster.call(Call::Read, "get_points", |c| {
                let request = GetPointsBuilder::new(collection.clone(), ids.clone())
                    .with_payload(true)
                    .with_vectors(false);
                async move { c.get_points(request).await }
            }))?;
        let mut by_key: std::collections::HashMap<PassageKey, Passage> = found
            .result
            .into_iter()
            .filter_map(|p| Some((key_of(p.id.as_ref())?, passage_of(p.payload)?)))
            .collect();
        Ok(keys.iter().map(|k| by_key.remove(k)).collect())
    }
}
