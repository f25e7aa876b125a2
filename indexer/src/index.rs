//! An index folder and its life: build, append, delete, compact, open.
//!
//! Layout: `DIR/CURRENT` names the live generation `DIR/gen-NNNNNNNN/`, which
//! holds `manifest.json`, `bm25/` (tantivy), `store/` (sled), `vectors.f32`
//! and `hnsw/`. Every change builds a new generation beside the live one and
//! switches `CURRENT` with one atomic rename, so a crash (even `kill -9`) at
//! any instant leaves the previous generation untouched and in use.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::bm25::{Bm25Index, Bm25Params, Bm25Writer};
use crate::chunk::{ChunkParams, Chunker, Passage};
use crate::dense::{self, DenseIndex, HnswParams};
use crate::document::{Corpus, Document};
use crate::error::{Error, Result};
use crate::frozen_store;
use crate::fsutil;
use crate::integrity::{self, Damage, Depth};
use crate::manifest::{Counts, Manifest, FORMAT_VERSION};
use crate::progress::Progress;
use crate::store::{Metadata, PassageOrd, PassageStore, SentenceRef};
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

const CURRENT: &str = "CURRENT";
const LOCK: &str = ".lock";
const BM25_DIR: &str = "bm25";
const STORE_DIR: &str = "store";
/// Passages embedded per progress step.
const EMBED_STEP: usize = 256;

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
struct Rows {
    passage: PassageOrd,
    sentence: u64,
}

/// What [`add_documents`] added.
struct Added {
    /// The new unit passage vectors, flat.
    vectors: Vec<f32>,
    passages: u64,
    sentences: u64,
}

/// Chunks, stores, BM25-indexes and embeds `docs` (and, with
/// `sentence_vectors`, every passage sentence), with rows from `first`.
#[allow(clippy::too_many_arguments)]
fn add_documents(
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
fn embed_into(
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

fn build_graph(
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

fn check_encoder(dir: &Path, manifest: &Manifest, given: &EncoderInfo) -> Result<()> {
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

/// An index folder holding generations.
struct IndexFolder {
    root: PathBuf,
}

/// Held while a process changes an index; removed on drop. A lock left by a
/// killed process (its pid no longer runs) is taken over.
struct WriteLock(PathBuf);

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl IndexFolder {
    /// For a new build: `dir` may be missing, empty, or a Capstan index.
    fn prepare(dir: &Path) -> Result<Self> {
        if dir.exists() {
            let is_index = dir.join(CURRENT).is_file();
            let empty = std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .next()
                .is_none();
            let only_generations = std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .filter_map(|e| e.ok())
                .all(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with("gen-") || n == LOCK
                });
            if !(is_index || empty || only_generations) {
                return Err(Error::index(
                    dir,
                    "exists and is not a Capstan index; refusing to write into it",
                ));
            }
        } else {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        Ok(Self {
            root: dir.to_path_buf(),
        })
    }

    fn open(dir: &Path) -> Result<Self> {
        if !dir.join(CURRENT).is_file() {
            return Err(Error::index(
                dir,
                "not a Capstan index (no CURRENT file); build it with `capstan index`",
            ));
        }
        Ok(Self {
            root: dir.to_path_buf(),
        })
    }

    /// The live generation named by `CURRENT` (`gen-NNNNNNNN XXH3`, the
    /// checksum being that of its manifest), if there is one.
    fn current(&self) -> Result<Option<Live>> {
        let path = self.root.join(CURRENT);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(Error::Damaged {
                    path,
                    message: "not text".into(),
                })
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let mut words = text.split_whitespace();
        let name = words.next().unwrap_or("");
        let manifest_sum = words.next().map(str::to_string);
        let well_formed = name
            .strip_prefix("gen-")
            .is_some_and(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()))
            && manifest_sum
                .as_deref()
                .is_none_or(|s| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            && words.next().is_none();
        if !well_formed {
            return Err(Error::Damaged {
                path,
                message: format!(
                    "reads `{}`, not `gen-NNNNNNNN CHECKSUM`",
                    text.trim().escape_debug()
                ),
            });
        }
        let gen = self.root.join(name);
        if !gen.is_dir() {
            return Err(Error::Damaged {
                path,
                message: format!("names {name}, which is missing"),
            });
        }
        Ok(Some(Live { gen, manifest_sum }))
    }

    fn require_current(&self) -> Result<Live> {
        self.current()?
            .ok_or_else(|| Error::index(&self.root, "not a Capstan index (no CURRENT file)"))
    }

    fn lock(&self) -> Result<WriteLock> {
        let path = self.root.join(LOCK);
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    use std::io::Write;
                    let _ = write!(f, "{}", std::process::id());
                    return Ok(WriteLock(path));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&path).unwrap_or_default();
                    let alive = holder
                        .trim()
                        .parse::<u32>()
                        .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
                    if alive {
                        return Err(Error::index(
                            &self.root,
                            format!(
                                "another process (pid {}) is changing this index",
                                holder.trim()
                            ),
                        ));
                    }
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        Err(Error::index(&self.root, "could not take the index lock"))
    }

    fn generations(&self) -> Result<Vec<(u64, PathBuf)>> {
        let mut gens = Vec::new();
        for entry in std::fs::read_dir(&self.root).map_err(|e| Error::io(&self.root, e))? {
            let entry = entry.map_err(|e| Error::io(&self.root, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(n) = name
                .strip_prefix("gen-")
                .and_then(|n| n.parse::<u64>().ok())
            {
                gens.push((n, entry.path()));
            }
        }
        gens.sort();
        Ok(gens)
    }

    /// A fresh, empty generation folder (leftovers of crashed runs included
    /// in the numbering, and removed at the next publish). It is removed
    /// again unless published, so a failed change (a full disk, a bad
    /// document) leaves nothing behind.
    fn new_generation(&self) -> Result<Generation> {
        let next = self.generations()?.last().map_or(1, |(n, _)| n + 1);
        let path = self.root.join(format!("gen-{next:08}"));
        std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Generation {
            path,
            published: false,
        })
    }

    /// Lists the files of `gen` in `manifest`, writes it, and makes `gen` the
    /// live generation (one atomic rename of `CURRENT`); removes every other
    /// generation. `store` is the handle that changed `gen`'s passage store.
    fn publish(
        &self,
        mut gen: Generation,
        store: PassageStore,
        manifest: &mut Manifest,
    ) -> Result<()> {
        // What searches read in place: the store's trees in one file, and
        // (for generations changed from one written before it) the graph's
        // links. The frozen file is written from the change's own handle:
        // sled unlocks a folder only once a dropped handle's threads end, so
        // opening it again here failed now and then ("could not acquire lock").
        store.flush()?;
        store.write_frozen(&gen.join(frozen_store::FILE))?;
        drop(store);
        if !gen.join(dense::FROZEN_GRAPH).is_file() {
            dense::save_graph(&dense::load_graph(&gen)?, &gen)?;
        }
        manifest.files = integrity::file_table(&gen)?;
        let manifest_sum = manifest.write(&gen)?;
        fsutil::sync_tree(&gen)?;
        let name = gen
            .file_name()
            .expect("generation has a name")
            .to_string_lossy()
            .into_owned();
        fsutil::write_durably(
            &self.root.join(CURRENT),
            format!("{name} {manifest_sum}\n").as_bytes(),
        )?;
        gen.published = true;
        for (_, old) in self.generations()? {
            if old != gen.path {
                let _ = std::fs::remove_dir_all(&old);
            }
        }
        Ok(())
    }
}

/// The live generation, as `CURRENT` names it.
struct Live {
    gen: PathBuf,
    /// Checksum of its `manifest.json`.
    manifest_sum: Option<String>,
}

impl Live {
    /// Its manifest, checked against the checksum in `CURRENT`.
    fn manifest(&self) -> Result<Manifest> {
        Manifest::read_checked(&self.gen, self.manifest_sum.as_deref())
    }

    /// Its manifest, once every file is present at its size and every file an
    /// open reads matches its checksum: not the sled store and hnsw_rs files
    /// where the generation has their frozen forms (only changes read those,
    /// after checking them; `index verify` does too), nor what is read and
    /// checked on first use: the dense index's files ([`Index::dense`]) and
    /// the sentence vectors.
    fn searched_manifest(&self) -> Result<Manifest> {
        let manifest = self.manifest()?;
        let has = |file: &str| manifest.files.contains_key(file);
        let frozen_store = has(frozen_store::FILE);
        let dense = dense_files(&manifest);
        let read: integrity::FileTable = manifest
            .files
            .iter()
            .filter(|(name, sum)| {
                !(frozen_store && name.starts_with("store/")
                    // Checked block by block as a search reads it.
                    || !sum.blocks.is_empty()
                    || name.starts_with("hnsw/")
                    || dense.contains_key(*name)
                    || name.as_str() == dense::SENTENCE_VECTORS)
            })
            .map(|(name, sum)| (name.clone(), sum.clone()))
            .collect();
        integrity::first_error(integrity::check(&self.gen, &manifest.files, Depth::Sizes))?;
        integrity::first_error(integrity::check(&self.gen, &read, Depth::Checksums))?;
        Ok(manifest)
    }

    /// Its manifest, once every file matches its checksum: a change never
    /// builds on damaged files.
    fn verified_manifest(&self) -> Result<Manifest> {
        let manifest = self.manifest()?;
        integrity::first_error(integrity::check(
            &self.gen,
            &manifest.files,
            Depth::Checksums,
        ))?;
        Ok(manifest)
    }
}

/// The files [`DenseIndex::open`] reads: the vectors and the frozen graph, or hnsw_rs's files
/// in generations written before it.
fn dense_files(manifest: &Manifest) -> integrity::FileTable {
    let frozen_graph = manifest.files.contains_key(dense::FROZEN_GRAPH);
    manifest
        .files
        .iter()
        .filter(|(name, _)| {
            name.as_str() == dense::PASSAGE_VECTORS
                || if frozen_graph {
                    name.as_str() == dense::FROZEN_GRAPH
                } else {
                    name.starts_with("hnsw/")
                }
        })
        .map(|(name, sum)| (name.clone(), sum.clone()))
        .collect()
}

/// A generation being written; removed on drop unless published.
struct Generation {
    path: PathBuf,
    published: bool,
}

impl std::ops::Deref for Generation {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What [`Index::verify`] found.
#[derive(Debug)]
pub struct Verification {
    /// The live generation checked.
    pub generation: PathBuf,
    /// Files listed in its manifest.
    pub files: usize,
    /// Their total size.
    pub bytes: u64,
    /// Files that are missing or whose size or checksum differ.
    pub damage: Vec<Damage>,
    /// With intact files: why the generation still failed to open, if it did.
    pub open_error: Option<String>,
}

impl Verification {
    /// Whether the index is intact.
    pub fn is_intact(&self) -> bool {
        self.damage.is_empty() && self.open_error.is_none()
    }
}

/// An index opened for search.
pub struct Index {
    dir: PathBuf,
    /// The generation searched.
    gen: PathBuf,
    manifest: Manifest,
    /// The sentence vectors (the extractive reader's), read and checksummed on first use.
    sentence_vectors: std::sync::OnceLock<Vec<f32>>,
    bm25: Bm25Index,
    /// Read and checksummed on first use: a BM25 search never reads them.
    dense: std::sync::OnceLock<DenseIndex>,
    store: PassageStore,
    deleted: HashSet<PassageOrd>,
}

impl Index {
    /// Opens the live generation of the index in `dir` for search, reading
    /// only: every file is checked against the size and checksum its
    /// manifest records before a loader sees it, and every count against
    /// the manifest's, so damage is an error naming the file, never a crash
    /// or a different answer. Nothing in `dir` is written.
    pub fn open(dir: &Path) -> Result<Self> {
        let live = IndexFolder::open(dir)?.require_current()?;
        let manifest = live.searched_manifest()?;
        Self::open_checked(dir, &live.gen, manifest)
    }

    /// Opens a generation whose files passed their checksums.
    fn open_checked(dir: &Path, gen: &Path, manifest: Manifest) -> Result<Self> {
        let dim = manifest.encoder.dimension;
        let counts = manifest.counts;
        let damaged = |file: &str, message: String| Error::Damaged {
            path: gen.join(file),
            message,
        };
        let bm25 = Bm25Index::open(&gen.join(BM25_DIR), manifest.bm25)?;
        if bm25.num_passages() != counts.passages {
            return Err(damaged(
                BM25_DIR,
                format!(
                    "holds {} live passages, the manifest says {}",
                    bm25.num_passages(),
                    counts.passages
                ),
            ));
        }
        // The vectors' rows from their sizes (their values are read on first use). Sentence
        // vectors are absent from an index built without them.
        let rows_match = |file: &str, want: u64, absent_is_empty: bool| -> Result<()> {
            let bytes = match std::fs::metadata(gen.join(file)) {
                Ok(m) => m.len(),
                Err(e) if absent_is_empty && e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(Error::io(gen.join(file), e)),
            };
            let row_bytes = (4 * dim) as u64;
            if bytes % row_bytes != 0 || bytes / row_bytes != want {
                return Err(damaged(
                    file,
                    format!("holds {bytes} bytes, not the manifest's {want} rows of {dim} f32s"),
                ));
            }
            Ok(())
        };
        rows_match(dense::PASSAGE_VECTORS, counts.stored_passages, false)?;
        rows_match(dense::SENTENCE_VECTORS, counts.stored_sentences, true)?;
        let frozen = gen.join(frozen_store::FILE);
        let store = if frozen.is_file() {
            let blocks = manifest
                .files
                .get(frozen_store::FILE)
                .map(|sum| sum.blocks.as_slice())
                .filter(|b| !b.is_empty());
            PassageStore::open_frozen(&gen.join(STORE_DIR), &frozen, blocks)?
        } else {
            PassageStore::open_for_reading(&gen.join(STORE_DIR))?
        };
        let (stored, tombstones, documents) = store.counts();
        let want = (
            counts.stored_passages,
            counts.deleted_passages,
            counts.documents,
        );
        if (stored, tombstones, documents) != want {
            return Err(damaged(
                STORE_DIR,
                format!(
                    "holds {stored} passages, {tombstones} deleted, {documents} documents; the manifest says {}, {}, {}",
                    want.0, want.1, want.2
                ),
            ));
        }
        let deleted = store.deleted_ords()?.into_iter().collect();
        Ok(Self {
            dir: dir.to_path_buf(),
            gen: gen.to_path_buf(),
            sentence_vectors: std::sync::OnceLock::new(),
            manifest,
            bm25,
            dense: std::sync::OnceLock::new(),
            store,
            deleted,
        })
    }

    /// Checks the live generation of `dir` in full: every file against its
    /// size and checksum (all damaged files listed, not only the first),
    /// then opens it as a search would and compares every count.
    pub fn verify(dir: &Path) -> Result<Verification> {
        let live = IndexFolder::open(dir)?.require_current()?;
        let manifest = live.manifest()?;
        let damage = integrity::check(&live.gen, &manifest.files, Depth::Checksums);
        let files = manifest.files.len();
        let bytes = manifest.files.values().map(|f| f.bytes).sum();
        let opened = if damage.is_empty() {
            Self::open_checked(dir, &live.gen, manifest)
                .and_then(|index| {
                    index.dense()?;
                    index.sentence_vectors().map(|_| ())
                })
                .err()
        } else {
            None
        };
        Ok(Verification {
            generation: live.gen,
            files,
            bytes,
            damage,
            open_error: opened.map(|e| e.to_string()),
        })
    }

    /// The index folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the index was built with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Errors unless `encoder` is the one the index was built with.
    pub fn check_encoder(&self, encoder: &EncoderInfo) -> Result<()> {
        check_encoder(&self.dir, &self.manifest, encoder)
    }

    /// The BM25 index.
    pub fn bm25(&self) -> &Bm25Index {
        &self.bm25
    }

    /// The dense index on first use: its vectors and frozen graph mapped and checked against
    /// their checksums in place, hnsw_rs's files (generations written before the frozen graph)
    /// checked before they are read (an open checks only their sizes: a BM25 search never reads
    /// them).
    pub fn dense(&self) -> Result<&DenseIndex> {
        if let Some(d) = self.dense.get() {
            return Ok(d);
        }
        let mut files = dense_files(&self.manifest);
        files.remove(dense::PASSAGE_VECTORS);
        files.remove(dense::FROZEN_GRAPH);
        integrity::first_error(integrity::check(&self.gen, &files, Depth::Checksums))?;
        let dense = DenseIndex::open(
            &self.gen,
            self.manifest.encoder.dimension,
            Some(&self.manifest.files),
        )?;
        let stored = self.manifest.counts.stored_passages;
        if dense.len() as u64 != stored {
            return Err(Error::Damaged {
                path: self.gen.join(dense::PASSAGE_VECTORS),
                message: format!("holds {} rows, the manifest says {stored}", dense.len()),
            });
        }
        Ok(self.dense.get_or_init(|| dense))
    }

    /// Passages stored, deleted ones included (the dense index's rows).
    pub fn stored_passages(&self) -> usize {
        self.manifest.counts.stored_passages as usize
    }

    /// Tombstoned ordinals (filtered out of dense search).
    pub fn deleted(&self) -> &HashSet<PassageOrd> {
        &self.deleted
    }

    /// A live passage by ordinal.
    pub fn passage(&self, ord: PassageOrd) -> Result<Option<Passage>> {
        self.store.get(ord)
    }

    /// The sentence vectors, read on first use after their checksum and values are checked
    /// (an open checks only their size: searches never read them).
    fn sentence_vectors(&self) -> Result<&[f32]> {
        if let Some(v) = self.sentence_vectors.get() {
            return Ok(v);
        }
        if let Some(sum) = self.manifest.files.get(dense::SENTENCE_VECTORS) {
            let table: integrity::FileTable = [(dense::SENTENCE_VECTORS.to_string(), sum.clone())]
                .into_iter()
                .collect();
            integrity::first_error(integrity::check(&self.gen, &table, Depth::Checksums))?;
        }
        let dim = self.manifest.encoder.dimension;
        let v = dense::read_vectors(&self.gen, dense::SENTENCE_VECTORS, dim)?;
        if (v.len() / dim) as u64 != self.manifest.counts.stored_sentences {
            return Err(Error::Damaged {
                path: self.gen.join(dense::SENTENCE_VECTORS),
                message: format!(
                    "holds {} rows, the manifest says {}",
                    v.len() / dim,
                    self.manifest.counts.stored_sentences
                ),
            });
        }
        Ok(self.sentence_vectors.get_or_init(|| v))
    }

    /// The sentences of a passage with their unit vectors (empty when the
    /// index was built without sentence vectors).
    pub fn sentences(&self, ord: PassageOrd) -> Result<Vec<(SentenceRef, &[f32])>> {
        let dim = self.manifest.encoder.dimension;
        let refs = self.store.sentences(ord)?;
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let vectors = self.sentence_vectors()?;
        refs.into_iter()
            .map(|r| {
                let start = r.row as usize * dim;
                let v = vectors.get(start..start + dim).ok_or_else(|| {
                    Error::index(&self.dir, format!("sentence vector {} is missing", r.row))
                })?;
                Ok((r, v))
            })
            .collect()
    }

    /// A live document's metadata object.
    pub fn metadata(&self, doc_id: &str) -> Result<Option<Metadata>> {
        self.store.metadata(doc_id)
    }

    /// The ordinal of a passage id.
    pub fn ord_of(&self, id: &str) -> Result<Option<PassageOrd>> {
        self.store.ord_of(id)
    }

    /// A live passage by id (`doc#n`).
    pub fn passage_by_id(&self, id: &str) -> Result<Option<Passage>> {
        match self.store.ord_of(id)? {
            Some(ord) => self.store.get(ord),
            None => Ok(None),
        }
    }
}
