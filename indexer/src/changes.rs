//! Changing an index: build, append, delete and compact. Each change writes a new
//! generation beside the live one ([`crate::generations`]) and publishes it with one atomic
//! rename of `CURRENT`.

use std::collections::HashSet;
use std::path::Path;

use crate::bm25::{Bm25Params, Bm25Writer};
use crate::chunk::{ChunkParams, Chunker, Passage};
use crate::dense::{self, HnswParams};
use crate::document::{Corpus, Document};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::generations::{IndexFolder, BM25_DIR, STORE_DIR};
use crate::manifest::{Counts, Manifest, FORMAT_VERSION};
use crate::progress::Progress;
use crate::store::{PassageOrd, PassageStore, SentenceRef};
use capstan_encoder::{
    sentence_embedding_text, sentence_spans, Encoder, EncoderInfo, EncoderPrecision,
};

/// Settings of a new index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexSettings {
    /// Chunking.
    pub chunk: ChunkParams,
    /// BM25 scoring.
    pub bm25: Bm25Params,
    /// HNSW construction.
    pub hnsw: HnswParams,
    /// Embed every passage sentence at index time, so the extractive reader
    /// answers with dot products instead of running the encoder.
    pub sentence_vectors: bool,
}

impl Default for IndexSettings {
    fn default() -> Self {
        Self {
            chunk: ChunkParams::default(),
            bm25: Bm25Params::default(),
            hnsw: HnswParams::default(),
            sentence_vectors: true,
        }
    }
}

/// What a change did.
#[derive(Debug, Clone)]
pub struct ChangeSummary {
    /// The manifest of the live generation afterwards.
    pub manifest: Manifest,
    /// `false` when the index was already up to date and nothing was written.
    pub written: bool,
    /// Documents added.
    pub added_documents: usize,
    /// Documents replaced (`--append` of an id already indexed).
    pub replaced_documents: usize,
    /// Documents removed.
    pub deleted_documents: usize,
    /// Documents of an `--append` left as they were: indexed from the same bytes.
    pub unchanged_documents: usize,
}

/// Passages embedded per progress step.
pub(crate) const EMBED_STEP: usize = 256;

/// Builds a new index of `corpus` in `dir` (replacing what is there, unless it
/// was built from the same corpus with the same encoder and settings).
pub fn build(
    dir: &Path,
    corpus: &Corpus,
    encoder: &Encoder,
    settings: IndexSettings,
    progress: &dyn Progress,
) -> Result<ChangeSummary> {
    settings.bm25.validate()?;
    settings.hnsw.validate()?;
    let chunker = Chunker::for_encoder(encoder, settings.chunk)?;
    let folder = IndexFolder::prepare(dir)?;
    let _lock = folder.lock()?;
    if let Some(live) = folder.current()? {
        if let Ok(m) = live.manifest() {
            let same = m.encoder.config_sha256 == encoder.info().config_sha256
                && m.encoder.precision == encoder.info().precision
                && m.chunking == settings.chunk
                && m.bm25 == settings.bm25
                && m.hnsw == settings.hnsw
                && m.sentence_vectors == settings.sentence_vectors
                && m.corpus_sha256 == [corpus.sha256.clone()];
            if same {
                return Ok(ChangeSummary {
                    manifest: m,
                    written: false,
                    added_documents: 0,
                    replaced_documents: 0,
                    deleted_documents: 0,
                    unchanged_documents: 0,
                });
            }
        }
    }
    let gen = folder.new_generation()?;
    let store = PassageStore::open(&gen.join(STORE_DIR))?;
    let mut bm25 = Bm25Writer::create(&gen.join(BM25_DIR))?;
    let added = add_documents(
        &gen,
        &corpus.documents.iter().collect::<Vec<_>>(),
        Rows::default(),
        settings.sentence_vectors,
        encoder,
        &chunker,
        &mut bm25,
        &store,
        progress,
    )?;
    let (vectors, passages) = (added.vectors, added.passages);
    bm25.finish()?;
    let graph = build_graph(&vectors, encoder.dimension(), settings.hnsw, progress)?;
    dense::save_graph(&graph, &gen)?;
    let mut manifest = Manifest {
        format_version: FORMAT_VERSION,
        encoder: encoder.info().clone(),
        chunking: settings.chunk,
        bm25: settings.bm25,
        hnsw: settings.hnsw,
        sentence_vectors: settings.sentence_vectors,
        counts: Counts {
            documents: corpus.documents.len() as u64,
            passages,
            stored_passages: passages,
            deleted_passages: 0,
            stored_sentences: added.sentences,
        },
        corpus_sha256: vec![corpus.sha256.clone()],
        files: Default::default(),
    };
    folder.publish(gen, store, &mut manifest)?;
    Ok(ChangeSummary {
        manifest,
        written: true,
        added_documents: corpus.documents.len(),
        replaced_documents: 0,
        deleted_documents: 0,
        unchanged_documents: 0,
    })
}

/// Adds the documents of `corpus` to the index in `dir`; a document whose id
/// is already indexed replaces the old one.
pub fn append(
    dir: &Path,
    corpus: &Corpus,
    encoder: &Encoder,
    progress: &dyn Progress,
) -> Result<ChangeSummary> {
    let folder = IndexFolder::open(dir)?;
    let _lock = folder.lock()?;
    let live = folder.require_current()?;
    let mut manifest = live.verified_manifest()?;
    let current = live.gen;
    check_encoder(dir, &manifest, encoder.info())?;
    // Float precisions give the same vectors within their rounding; int8's
    // differ by more, so one index holds one or the other.
    let (built, given) = (manifest.encoder.precision, encoder.info().precision);
    if (built == EncoderPrecision::Int8) != (given == EncoderPrecision::Int8) {
        return Err(Error::Setting {
            name: "--encoder-dtype",
            message: format!(
                "the index at {} holds {built} vectors; append with --encoder-dtype {built}",
                dir.display()
            ),
        });
    }
    let chunker = Chunker::for_encoder(encoder, manifest.chunking)?;
    let gen = folder.new_generation()?;
    fsutil::copy_tree(&current, &gen)?;
    let store = PassageStore::open(&gen.join(STORE_DIR))?;
    let mut bm25 = Bm25Writer::open(&gen.join(BM25_DIR))?;
    let mut replaced = 0;
    let mut changed: Vec<&Document> = Vec::new();
    for doc in &corpus.documents {
        // A document indexed from the same bytes stays as it is.
        if doc.source_sha256.is_some() && store.source_sha256(&doc.id)? == doc.source_sha256 {
            continue;
        }
        if let Some(n) = store.delete_document(&doc.id)? {
            bm25.delete_document(&doc.id);
            manifest.counts.deleted_passages += n as u64;
            manifest.counts.passages -= n as u64;
            replaced += 1;
        }
        changed.push(doc);
    }
    let unchanged = corpus.documents.len() - changed.len();
    if changed.is_empty() {
        // `gen` is removed on drop: nothing was published.
        return Ok(ChangeSummary {
            manifest,
            written: false,
            added_documents: 0,
            replaced_documents: 0,
            deleted_documents: 0,
            unchanged_documents: unchanged,
        });
    }
    let first = manifest.counts.stored_passages;
    let new = add_documents(
        &gen,
        &changed,
        Rows {
            passage: first,
            sentence: manifest.counts.stored_sentences,
        },
        manifest.sentence_vectors,
        encoder,
        &chunker,
        &mut bm25,
        &store,
        progress,
    )?;
    let (vectors, added) = (new.vectors, new.passages);
    manifest.counts.stored_sentences += new.sentences;
    bm25.finish()?;
    let graph = dense::load_graph(&gen)?;
    progress.stage("graph", added);
    dense::insert_rows(&graph, &vectors, encoder.dimension(), first as usize);
    progress.advance(added);
    progress.finish();
    let graph_dir = gen.join("hnsw");
    std::fs::remove_dir_all(&graph_dir).map_err(|e| Error::io(&graph_dir, e))?;
    dense::save_graph(&graph, &gen)?;
    manifest.counts.documents = manifest.counts.documents + changed.len() as u64 - replaced as u64;
    manifest.counts.passages += added;
    manifest.counts.stored_passages += added;
    manifest.corpus_sha256.push(corpus.sha256.clone());
    folder.publish(gen, store, &mut manifest)?;
    Ok(ChangeSummary {
        manifest,
        written: true,
        added_documents: changed.len() - replaced,
        replaced_documents: replaced,
        deleted_documents: 0,
        unchanged_documents: unchanged,
    })
}

/// Removes documents from the index in `dir`. Unknown ids are an error and
/// nothing changes. Their passages become tombstones until [`compact`].
pub fn delete(dir: &Path, doc_ids: &[String]) -> Result<ChangeSummary> {
    let folder = IndexFolder::open(dir)?;
    let _lock = folder.lock()?;
    let live = folder.require_current()?;
    let mut manifest = live.verified_manifest()?;
    let current = live.gen;
    // Work on a copy: the live store may be open in a server (sled locks it).
    let gen = folder.new_generation()?;
    fsutil::copy_tree(&current, &gen)?;
    let store = PassageStore::open(&gen.join(STORE_DIR))?;
    let unknown: Vec<&str> = doc_ids
        .iter()
        .filter(|id| !store.contains_document(id).unwrap_or(false))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(Error::index(
            dir,
            format!("no such document id: {}", unknown.join(", ")),
        ));
    }
    let mut bm25 = Bm25Writer::open(&gen.join(BM25_DIR))?;
    let unique: HashSet<&String> = doc_ids.iter().collect();
    for id in &unique {
        if let Some(n) = store.delete_document(id)? {
            bm25.delete_document(id);
            manifest.counts.deleted_passages += n as u64;
            manifest.counts.passages -= n as u64;
            manifest.counts.documents -= 1;
        }
    }
    bm25.finish()?;
    folder.publish(gen, store, &mut manifest)?;
    Ok(ChangeSummary {
        manifest,
        written: true,
        added_documents: 0,
        replaced_documents: 0,
        deleted_documents: unique.len(),
        unchanged_documents: 0,
    })
}

/// Rebuilds the index in `dir` without its tombstones: passages get
/// contiguous ordinals, the HNSW graph is rebuilt from the stored vectors (no
/// re-encoding).
pub fn compact(dir: &Path, progress: &dyn Progress) -> Result<ChangeSummary> {
    let folder = IndexFolder::open(dir)?;
    let _lock = folder.lock()?;
    let live = folder.require_current()?;
    let mut manifest = live.verified_manifest()?;
    let current = live.gen;
    let dim = manifest.encoder.dimension;
    let old_vectors = dense::read_vectors(&current, dense::PASSAGE_VECTORS, dim)?;
    let old_sentences = dense::read_vectors(&current, dense::SENTENCE_VECTORS, dim)?;
    let gen = folder.new_generation()?;
    // Read a copy of the live store: it may be open in a server (sled locks it).
    let old_copy = gen.join("old-store");
    fsutil::copy_tree(&current.join(STORE_DIR), &old_copy)?;
    let old_store = PassageStore::open(&old_copy)?;
    let store = PassageStore::open(&gen.join(STORE_DIR))?;
    let mut bm25 = Bm25Writer::create(&gen.join(BM25_DIR))?;
    let mut vectors = Vec::with_capacity(old_vectors.len());
    let mut sentence_rows: Vec<Vec<f32>> = Vec::new();
    let mut by_doc: Vec<Passage> = Vec::new();
    let mut ord: PassageOrd = 0;
    let mut flush_doc = |passages: &mut Vec<Passage>, ord: &mut PassageOrd| -> Result<()> {
        if let Some(first) = passages.first() {
            let doc_id = first.doc_id.clone();
            store.put_document(
                &doc_id,
                *ord,
                passages,
                old_store.metadata(&doc_id)?.as_ref(),
            )?;
            if let Some(sha) = old_store.source_sha256(&doc_id)? {
                store.put_source_sha256(&doc_id, &sha)?;
            }
            for p in passages.iter() {
                bm25.add(*ord, &p.doc_id, &p.title, &p.text)?;
                *ord += 1;
            }
            passages.clear();
        }
        Ok(())
    };
    let row_of = |all: &[f32], row: u64| -> Result<Vec<f32>> {
        let start = row as usize * dim;
        all.get(start..start + dim)
            .map(<[f32]>::to_vec)
            .ok_or_else(|| Error::index(&current, format!("vector row {row} is missing")))
    };
    for item in old_store.live_passages() {
        let (old_ord, passage) = item?;
        if by_doc.first().is_some_and(|p| p.doc_id != passage.doc_id) {
            flush_doc(&mut by_doc, &mut ord)?;
        }
        vectors.extend(row_of(&old_vectors, old_ord)?);
        let new_ord = ord + by_doc.len() as u64;
        let mut refs = old_store.sentences(old_ord)?;
        for r in &mut refs {
            sentence_rows.push(row_of(&old_sentences, r.row)?);
            r.row = sentence_rows.len() as u64 - 1;
        }
        store.put_sentences(new_ord, &refs)?;
        by_doc.push(passage);
    }
    flush_doc(&mut by_doc, &mut ord)?;
    bm25.finish()?;
    drop(old_store);
    std::fs::remove_dir_all(&old_copy).map_err(|e| Error::io(&old_copy, e))?;
    let rows: Vec<Vec<f32>> = vectors.chunks_exact(dim).map(|r| r.to_vec()).collect();
    dense::append_vectors(&gen, dense::PASSAGE_VECTORS, &rows)?;
    dense::append_vectors(&gen, dense::SENTENCE_VECTORS, &sentence_rows)?;
    manifest.counts.stored_sentences = sentence_rows.len() as u64;
    let graph = build_graph(&vectors, dim, manifest.hnsw, progress)?;
    dense::save_graph(&graph, &gen)?;
    manifest.counts.passages = ord;
    manifest.counts.stored_passages = ord;
    manifest.counts.deleted_passages = 0;
    folder.publish(gen, store, &mut manifest)?;
    Ok(ChangeSummary {
        manifest,
        written: true,
        added_documents: 0,
        replaced_documents: 0,
        deleted_documents: 0,
        unchanged_documents: 0,
    })
}

/// Where new rows start in the vector files.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rows {
    pub(crate) passage: PassageOrd,
    pub(crate) sentence: u64,
}

/// What [`add_documents`] added.
pub(crate) struct Added {
    /// The new unit passage vectors, flat.
    pub(crate) vectors: Vec<f32>,
    pub(crate) passages: u64,
    pub(crate) sentences: u64,
}

/// Chunks, stores, BM25-indexes and embeds `docs` (and, with
/// `sentence_vectors`, every passage sentence), with rows from `first`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_documents(
    gen: &Path,
    docs: &[&Document],
    first: Rows,
    sentence_vectors: bool,
    encoder: &Encoder,
    chunker: &Chunker,
    bm25: &mut Bm25Writer,
    store: &PassageStore,
    progress: &dyn Progress,
) -> Result<Added> {
    use rayon::prelude::*;
    progress.stage("chunk", docs.len() as u64);
    let per_doc: Vec<Vec<Passage>> = docs.par_iter().map(|d| chunker.chunk(d)).collect();
    progress.finish();
    let mut ord = first.passage;
    for (doc, passages) in docs.iter().zip(&per_doc) {
        store.put_document(&doc.id, ord, passages, doc.metadata.as_ref())?;
        if let Some(sha) = &doc.source_sha256 {
            store.put_source_sha256(&doc.id, sha)?;
        }
        for p in passages {
            bm25.add(ord, &p.doc_id, &p.title, &p.text)?;
            ord += 1;
        }
    }
    let passages: Vec<&Passage> = per_doc.iter().flatten().collect();
    let texts: Vec<String> = passages.iter().map(|p| p.embedding_text()).collect();
    let flat = embed_into(
        gen,
        dense::PASSAGE_VECTORS,
        "embed",
        &texts,
        encoder,
        progress,
    )?;
    let mut sentences = 0;
    if sentence_vectors {
        let mut texts = Vec::new();
        for (i, p) in passages.iter().enumerate() {
            let refs: Vec<SentenceRef> = sentence_spans(&p.text)
                .into_iter()
                .map(|(start, end)| {
                    texts.push(sentence_embedding_text(&p.title, &p.text[start..end]));
                    SentenceRef {
                        start: start as u32,
                        end: end as u32,
                        row: first.sentence + texts.len() as u64 - 1,
                    }
                })
                .collect();
            store.put_sentences(first.passage + i as u64, &refs)?;
        }
        embed_into(
            gen,
            dense::SENTENCE_VECTORS,
            "sentences",
            &texts,
            encoder,
            progress,
        )?;
        sentences = texts.len() as u64;
    }
    Ok(Added {
        vectors: flat,
        passages: passages.len() as u64,
        sentences,
    })
}

/// Embeds `texts` into unit vectors appended to `gen/file`; returns them flat.
pub(crate) fn embed_into(
    gen: &Path,
    file: &str,
    stage: &str,
    texts: &[String],
    encoder: &Encoder,
    progress: &dyn Progress,
) -> Result<Vec<f32>> {
    progress.stage(stage, texts.len() as u64);
    let mut flat = Vec::with_capacity(texts.len() * encoder.dimension());
    for batch in texts.chunks(EMBED_STEP) {
        let mut vectors = encoder.embed(batch)?;
        if let Some(i) = vectors
            .iter()
            .position(|v| v.iter().any(|x| !x.is_finite()))
        {
            return Err(Error::Encoder {
                path: encoder.info().path.clone().into(),
                message: format!(
                    "produced a non-finite vector for the text {:?}",
                    batch[i].chars().take(80).collect::<String>()
                ),
            });
        }
        vectors.iter_mut().for_each(|v| dense::normalize(v));
        dense::append_vectors(gen, file, &vectors)?;
        vectors.iter().for_each(|v| flat.extend_from_slice(v));
        progress.advance(batch.len() as u64);
    }
    progress.finish();
    Ok(flat)
}

pub(crate) fn build_graph(
    vectors: &[f32],
    dim: usize,
    params: HnswParams,
    progress: &dyn Progress,
) -> Result<dense::Graph> {
    progress.stage("graph", (vectors.len() / dim) as u64);
    let graph = dense::build_graph(vectors, dim, params)?;
    progress.advance((vectors.len() / dim) as u64);
    progress.finish();
    Ok(graph)
}

pub(crate) fn check_encoder(dir: &Path, manifest: &Manifest, given: &EncoderInfo) -> Result<()> {
    if manifest.encoder.config_sha256 != given.config_sha256
        || manifest.encoder.dimension != given.dimension
        || manifest.encoder.pooling != given.pooling
    {
        // Describe both sides by what differs: two folders of the same name
        // (a re-downloaded model) differ only in their hash or dimension.
        let built = &manifest.encoder;
        let describe = |e: &EncoderInfo| {
            let mut text = format!("encoder {}", e.path);
            if built.path == given.path || built.dimension != given.dimension {
                text += &format!(" ({} dimensions, {:?} pooling", e.dimension, e.pooling);
                text += &format!(", config.json sha256 {})", &e.config_sha256);
            }
            text
        };
        return Err(Error::EncoderMismatch {
            path: dir.to_path_buf(),
            built: describe(built),
            given: describe(given),
        });
    }
    Ok(())
}
