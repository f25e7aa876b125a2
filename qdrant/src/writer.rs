//! Writing a corpus into a collection, from one machine or from N at once.
//!
//! `--part I/N` keeps the documents whose id hashes to part I, so N writers
//! (each with its own GPU) given the same corpus fill one collection
//! together, without coordination and without overlap. A run writes its
//! documents a group at a time: it asks which passages the collection
//! already holds with the same content (those documents are skipped, which
//! is how a run interrupted at any point is finished by running it again),
//! embeds the others, upserts them (waiting for the cluster to apply them),
//! then removes passages a shorter new version of a document left behind.
//! The next group is embedded while the previous one is being written (one
//! group in flight: memory stays bounded and a slow cluster slows the
//! writer). A document counts as written only when the cluster acknowledged
//! it; a group the cluster refuses is retried document by document, so the
//! error names the document at fault.

use std::collections::HashMap;
use std::sync::Arc;

use capstan_indexer::{
    Bm25Analyzer, Bm25Params, ChunkParams, Chunker, Corpus, Document, Encoder, Passage, Progress,
};
use qdrant_client::qdrant::{
    Condition, CountPointsBuilder, DeletePointsBuilder, Filter, GetPointsBuilder,
    PayloadIncludeSelector, PointStruct, Range, UpdateStatus, UpsertPointsBuilder, WriteOrdering,
    WriteOrderingType,
};
use xxhash_rust::xxh3::xxh3_64;

use crate::cluster::{Call, Cluster};
use crate::error::{Error, Result};
use crate::points::{document_hash, key_of, passage_point, point_id};
use crate::schema::{self, field, CollectionOptions, Description};
use crate::sparse::{Bm25Encoder, Bm25Values};

/// One part of N of a corpus (`--part I/N`, I from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Which part, 1..=count.
    pub index: u32,
    /// How many parts.
    pub count: u32,
}

impl Default for Part {
    fn default() -> Self {
        Self { index: 1, count: 1 }
    }
}

impl Part {
    /// Parses `I/N`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::Setting {
            name: "--part",
            message: format!("`{text}` must be I/N with 1 <= I <= N (e.g. 2/4)"),
        };
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }

    /// Whether a document belongs to this part.
    pub fn contains(&self, doc_id: &str) -> bool {
        xxh3_64(doc_id.as_bytes()) % u64::from(self.count) == u64::from(self.index - 1)
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// How a run writes.
#[derive(Debug, Clone, Copy)]
pub struct WriteSettings {
    /// Chunking (a new collection's; an existing one must match unless appending).
    pub chunk: ChunkParams,
    /// BM25 constants (likewise).
    pub bm25: Bm25Params,
    /// Layout of a new collection.
    pub collection: CollectionOptions,
    /// Which documents of the corpus this run writes.
    pub part: Part,
    /// Add to an existing collection (with its settings) instead of creating
    /// or finishing one.
    pub append: bool,
    /// Passages per upsert.
    pub batch_passages: usize,
}

impl Default for WriteSettings {
    fn default() -> Self {
        Self {
            chunk: ChunkParams::default(),
            bm25: Bm25Params::default(),
            collection: CollectionOptions::default(),
            part: Part::default(),
            append: false,
            batch_passages: 256,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct WriteSummary {
    /// Whether this run created the collection.
    pub created: bool,
    /// Documents of the corpus in this part.
    pub documents: usize,
    /// Documents written (new or changed), each acknowledged by the cluster.
    pub written_documents: usize,
    /// Documents already present with the same content.
    pub skipped_documents: usize,
    /// Passages written.
    pub written_passages: u64,
    /// The collection's description.
    pub description: Description,
}

/// A document and its passages.
struct Chunked<'a> {
    doc: &'a Document,
    passages: Vec<Passage>,
    hash: String,
}

/// Writes this part of `corpus` into the collection, creating it if needed.
pub fn write_corpus(
    cluster: &Arc<Cluster>,
    corpus: &Corpus,
    encoder: &Encoder,
    settings: &WriteSettings,
    progress: &dyn Progress,
) -> Result<WriteSummary> {
    settings.collection.validate()?;
    settings.bm25.validate()?;
    cluster.check_reachable()?;
    let location = cluster.location().to_string();
    let existing = cluster.block_on(schema::read_description(cluster))?;
    let chunk = match (&existing, settings.append) {
        (None, true) => return Err(Error::NoCollection { location }),
        (Some(d), true) => d.chunking,
        (Some(d), false) => {
            check_same(&location, d, settings)?;
            d.chunking
        }
        (None, false) => settings.chunk,
    };
    if let Some(d) = &existing {
        d.check(&location, encoder.info())?;
        d.check_writer_precision(&location, encoder.info())?;
    }
    let chunker = Chunker::for_encoder(encoder, chunk)?;
    let docs: Vec<&Document> = corpus
        .documents
        .iter()
        .filter(|d| settings.part.contains(&d.id))
        .collect();
    progress.stage("chunk", docs.len() as u64);
    let chunked: Vec<Chunked> = docs
        .iter()
        .map(|doc| {
            progress.advance(1);
            Chunked {
                doc,
                passages: chunker.chunk(doc),
                hash: document_hash(&doc.title, &doc.text, doc.metadata.as_ref()),
            }
        })
        .collect();
    progress.finish();
    let (description, created) = match existing {
        Some(d) => (d, false),
        None => {
            let values = average_length_sample(corpus, &chunker, settings.bm25);
            let description = Description::new(encoder.info(), chunk, values);
            let created = cluster.block_on(schema::create_collection(
                cluster,
                &description,
                settings.collection,
            ))?;
            if created {
                (description, true)
            } else {
                // Another writer created it first: its description rules.
                let theirs = cluster
                    .block_on(schema::read_description(cluster))?
                    .ok_or_else(|| Error::NoCollection {
                        location: location.clone(),
                    })?;
                theirs.check(&location, encoder.info())?;
                theirs.check_writer_precision(&location, encoder.info())?;
                check_same(&location, &theirs, settings)?;
                (theirs, false)
            }
        }
    };
    let sparse = Bm25Encoder::new(description.bm25);
    let total: u64 = chunked.iter().map(|c| c.passages.len() as u64).sum();
    let mut summary = WriteSummary {
        created,
        documents: chunked.len(),
        written_documents: 0,
        skipped_documents: 0,
        written_passages: 0,
        description,
    };
    progress.stage("write", total);
    let mut in_flight: Option<tokio::task::JoinHandle<Result<Written>>> = None;
    let batch = settings.batch_passages.max(1);
    let mut run = || -> Result<()> {
        for group in groups(&chunked, batch) {
            let present = cluster.block_on(present_documents(cluster, group))?;
            let (skip, write): (Vec<&Chunked>, Vec<&Chunked>) = group
                .iter()
                .partition(|c| present.get(c.doc.id.as_str()) == Some(&true));
            summary.skipped_documents += skip.len();
            progress.advance(skip.iter().map(|c| c.passages.len() as u64).sum());
            if write.is_empty() {
                continue;
            }
            let points = build_points(&write, encoder, &sparse)?;
            if let Some(previous) = in_flight.take() {
                summary.add(cluster.block_on(join(previous))?, progress);
            }
            let docs: Vec<(String, u32)> = write
                .iter()
                .map(|c| (c.doc.id.clone(), c.passages.len() as u32))
                .collect();
            let task = upload(Arc::clone(cluster), points, docs, batch);
            in_flight = Some(cluster.spawn(task));
        }
        if let Some(previous) = in_flight.take() {
            summary.add(cluster.block_on(join(previous))?, progress);
        }
        Ok(())
    };
    let result = run();
    // A group still in flight after an error is waited for, not abandoned:
    // what it wrote is acknowledged or not before this returns.
    if let Some(previous) = in_flight.take() {
        let _ = cluster.block_on(join(previous));
    }
    result?;
    progress.finish();
    Ok(summary)
}

/// Documents whose passages give BM25's average length: the whole corpus up
/// to this many, else an even sample of about this many (by id hash). The
/// same for every part, so that writers starting at once agree.
const LENGTH_SAMPLE: usize = 50_000;

/// BM25's constants for a new collection, the average passage length taken
/// over the corpus (not only this part): with one shard the collection then
/// scores exactly as an index folder of the same corpus.
fn average_length_sample(corpus: &Corpus, chunker: &Chunker, params: Bm25Params) -> Bm25Values {
    let every = corpus.documents.len().div_ceil(LENGTH_SAMPLE).max(1) as u64;
    let analyzer = Bm25Analyzer::default();
    let lengths = corpus
        .documents
        .iter()
        .filter(|d| xxh3_64(d.id.as_bytes()).is_multiple_of(every))
        .flat_map(|d| chunker.chunk(d))
        .map(|p| Bm25Encoder::length(&analyzer, &p.title, &p.text));
    Bm25Values::new(params, lengths)
}

/// What one group's upload wrote.
struct Written {
    documents: usize,
    passages: u64,
}

impl WriteSummary {
    fn add(&mut self, written: Written, progress: &dyn Progress) {
        self.written_documents += written.documents;
        self.written_passages += written.passages;
        progress.advance(written.passages);
    }
}

async fn join(task: tokio::task::JoinHandle<Result<Written>>) -> Result<Written> {
    task.await.unwrap_or_else(|e| {
        Err(Error::Setting {
            name: "qdrant upload",
            message: format!("the upload task failed: {e}"),
        })
    })
}

/// Refuses a run whose chunking or BM25 constants differ from the
/// collection's (its passages would not be comparable with the others).
fn check_same(location: &str, d: &Description, settings: &WriteSettings) -> Result<()> {
    if settings.append {
        return Ok(());
    }
    if d.chunking != settings.chunk {
        return Err(Error::Mismatch {
            location: location.to_string(),
            key: "chunking",
            built: format!("{:?}", d.chunking),
            given: format!("{:?}", settings.chunk),
            advice: "pass its --chunk-tokens and --overlap (or --append, which takes them)",
        });
    }
    if (d.bm25.k1, d.bm25.b) != (settings.bm25.k1, settings.bm25.b) {
        return Err(Error::Mismatch {
            location: location.to_string(),
            key: "BM25 k1, b",
            built: format!("{}, {}", d.bm25.k1, d.bm25.b),
            given: format!("{}, {}", settings.bm25.k1, settings.bm25.b),
            advice: "pass its --bm25-k1 and --bm25-b (or --append, which takes them)",
        });
    }
    Ok(())
}

/// Consecutive documents holding about `batch` passages together (a larger
/// document is a group of its own).
fn groups<'a, 'b>(chunked: &'b [Chunked<'a>], batch: usize) -> Vec<&'b [Chunked<'a>]> {
    let mut out = Vec::new();
    let (mut start, mut passages) = (0, 0);
    for (i, c) in chunked.iter().enumerate() {
        if i > start && passages + c.passages.len() > batch {
            out.push(&chunked[start..i]);
            (start, passages) = (i, 0);
        }
        passages += c.passages.len();
    }
    if start < chunked.len() {
        out.push(&chunked[start..]);
    }
    out
}

/// For each document of the group: whether every one of its passages is
/// in the collection with this content.
async fn present_documents<'a>(
    cluster: &Cluster,
    group: &'a [Chunked<'_>],
) -> Result<HashMap<&'a str, bool>> {
    let ids: Vec<_> = group
        .iter()
        .flat_map(|c| (0..c.passages.len() as u32).map(|n| point_id(&c.doc.id, n)))
        .collect();
    let collection = cluster.location().collection.clone();
    let found = cluster
        .call(Call::Write, "get_points", |c| {
            let request = GetPointsBuilder::new(collection.clone(), ids.clone())
                .with_payload(PayloadIncludeSelector {
                    fields: vec![field::DOC_HASH.to_string()],
                })
                .with_vectors(false);
            async move { c.get_points(request).await }
        })
        .await?;
    let hashes: HashMap<u128, String> = found
        .result
        .into_iter()
        .filter_map(|p| {
            let hash = p.payload.get(field::DOC_HASH)?.as_str()?.clone();
            Some((key_of(p.id.as_ref())?, hash))
        })
        .collect();
    Ok(group
        .iter()
        .map(|c| {
            let complete = (0..c.passages.len() as u32).all(|n| {
                let key = crate::points::point_uuid(&c.doc.id, n).as_u128();
                hashes.get(&key) == Some(&c.hash)
            });
            (c.doc.id.as_str(), complete && !c.passages.is_empty())
        })
        .collect())
}

/// Embeds the documents' passages and makes their points.
fn build_points(
    docs: &[&Chunked],
    encoder: &Encoder,
    sparse: &Bm25Encoder,
) -> Result<Vec<PointStruct>> {
    let passages: Vec<(&Chunked, &Passage)> = docs
        .iter()
        .flat_map(|c| c.passages.iter().map(move |p| (*c, p)))
        .collect();
    let texts: Vec<String> = passages.iter().map(|(_, p)| p.embedding_text()).collect();
    let vectors = encoder
        .embed(&texts)
        .map_err(capstan_indexer::Error::from)?;
    Ok(passages
        .into_iter()
        .zip(vectors)
        .map(|((c, p), mut v)| {
            capstan_indexer::normalize(&mut v);
            passage_point(
                p,
                c.passages.len() as u32,
                &c.hash,
                c.doc.metadata.as_ref(),
                v,
                sparse.passage(&p.title, &p.text),
            )
        })
        .collect())
}

/// Upserts a group's points `batch` at a time, then removes the passages
/// beyond each document's new count. A refused group is retried one
/// document at a time to name the document at fault.
async fn upload(
    cluster: Arc<Cluster>,
    points: Vec<PointStruct>,
    docs: Vec<(String, u32)>,
    batch: usize,
) -> Result<Written> {
    let result = async {
        for chunk in points.chunks(batch) {
            upsert(&cluster, chunk.to_vec()).await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    if let Err(Error::Refused { .. }) = result {
        // Find the document the cluster refuses.
        let mut start = 0;
        for (doc_id, n) in &docs {
            let end = start + *n as usize;
            if let Err(e) = upsert(&cluster, points[start..end].to_vec()).await {
                return Err(Error::Document {
                    location: cluster.location().to_string(),
                    doc_id: doc_id.clone(),
                    message: e.to_string(),
                });
            }
            start = end;
        }
    } else {
        result?;
    }
    remove_stale(&cluster, &docs).await?;
    Ok(Written {
        documents: docs.len(),
        passages: points.len() as u64,
    })
}

/// One acknowledged upsert: the cluster applied it (`wait`) through the
/// shard's leader (`Medium` ordering keeps replicas in one order).
async fn upsert(cluster: &Cluster, points: Vec<PointStruct>) -> Result<()> {
    let collection = cluster.location().collection.clone();
    let response = cluster
        .call(Call::Write, "upsert_points", |c| {
            let request = UpsertPointsBuilder::new(collection.clone(), points.clone())
                .wait(true)
                .ordering(WriteOrdering {
                    r#type: WriteOrderingType::Medium as i32,
                });
            async move { c.upsert_points(request).await }
        })
        .await?;
    let status = response.result.map(|r| r.status);
    if status != Some(UpdateStatus::Completed as i32) {
        return Err(Error::Unavailable {
            location: cluster.location().to_string(),
            message: format!(
                "an upsert of {} points was not applied (status {:?})",
                points.len(),
                status.and_then(|s| UpdateStatus::try_from(s).ok())
            ),
        });
    }
    Ok(())
}

/// Deletes, for each document, the passages numbered from its new count on
/// (left by a longer earlier version).
async fn remove_stale(cluster: &Cluster, docs: &[(String, u32)]) -> Result<()> {
    let conditions: Vec<Condition> = docs
        .iter()
        .map(|(doc_id, n)| {
            Filter::must([
                Condition::matches(field::DOC_ID, doc_id.clone()),
                Condition::range(
                    field::PASSAGE_NO,
                    Range {
                        gte: Some(f64::from(*n)),
                        ..Default::default()
                    },
                ),
            ])
            .into()
        })
        .collect();
    let collection = cluster.location().collection.clone();
    cluster
        .call(Call::Write, "delete_points", |c| {
            let request = DeletePointsBuilder::new(collection.clone())
                .points(Filter::should(conditions.clone()))
                .wait(true);
            async move { c.delete_points(request).await }
        })
        .await?;
    Ok(())
}

/// What `index delete` did.
#[derive(Debug, Clone, Copy)]
pub struct DeleteSummary {
    /// Documents of the list that were in the collection.
    pub deleted_documents: u64,
    /// Their passages.
    pub deleted_passages: u64,
}

/// Removes every passage of the documents `ids`.
pub fn delete_documents(cluster: &Cluster, ids: &[String]) -> Result<DeleteSummary> {
    cluster.check_reachable()?;
    if cluster
        .block_on(schema::read_description(cluster))?
        .is_none()
    {
        return Err(Error::NoCollection {
            location: cluster.location().to_string(),
        });
    }
    let collection = cluster.location().collection.clone();
    let of_docs = || Condition::matches(field::DOC_ID, ids.to_vec());
    cluster.block_on(async {
        let count = |filter: Filter| {
            let collection = collection.clone();
            cluster.call(Call::Write, "count", move |c| {
                let request = CountPointsBuilder::new(collection.clone())
                    .filter(filter.clone())
                    .exact(true);
                async move { c.count(request).await }
            })
        };
        let passages = count(Filter::must([of_docs()])).await?;
        let documents = count(Filter::must([
            of_docs(),
            Condition::matches(field::PASSAGE_NO, 0i64),
        ]))
        .await?;
        cluster
            .call(Call::Write, "delete_points", |c| {
                let request = DeletePointsBuilder::new(collection.clone())
                    .points(Filter::must([of_docs()]))
                    .wait(true);
                async move { c.delete_points(request).await }
            })
            .await?;
        let n = |r: qdrant_client::qdrant::CountResponse| r.result.map_or(0, |c| c.count);
        Ok(DeleteSummary {
            deleted_documents: n(documents),
            deleted_passages: n(passages),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_split_documents_without_overlap() {
        assert_eq!(Part::parse("2/4").unwrap(), Part { index: 2, count: 4 });
        for bad in ["0/4", "5/4", "1", "a/b", "1/0"] {
            assert!(Part::parse(bad).is_err(), "{bad}");
        }
        let parts: Vec<Part> = (1..=3).map(|i| Part { index: i, count: 3 }).collect();
        let mut sizes = [0; 3];
        for d in 0..3000 {
            let id = format!("doc-{d}");
            let owners: Vec<usize> = (0..3).filter(|&p| parts[p].contains(&id)).collect();
            assert_eq!(owners.len(), 1, "{id}");
            sizes[owners[0]] += 1;
        }
        assert!(sizes.iter().all(|&s| s > 900), "{sizes:?}");
        assert!(Part::default().contains("anything"));
    }
}
