//! An index opened for search: the live generation, checked against its manifest, read
//! in place; and `verify`, which checks every file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::bm25::Bm25Index;
use crate::changes::check_encoder;
use crate::chunk::Passage;
use crate::dense::{self, DenseIndex};
use crate::error::{Error, Result};
use crate::frozen_store;
use crate::generations::{dense_files, IndexFolder, BM25_DIR, STORE_DIR};
use crate::integrity::{self, Damage, Depth};
use crate::manifest::Manifest;
use crate::store::{Metadata, PassageOrd, PassageStore, SentenceRef};
use capstan_encoder::EncoderInfo;

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
    /// The sentence vectors (the extractive reader's), mapped and checksummed on first use.
    sentence_vectors: std::sync::OnceLock<dense::VectorRows>,
    /// Held while the dense index or the sentence vectors are read on first use, so that
    /// requests arriving together read them once: a reader of the sentence vectors holds the
    /// file twice over while checking and converting it (570 MB for 100K passages), and eight
    /// at once peaked at 4.8 GB.
    first_use: std::sync::Mutex<()>,
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
            first_use: std::sync::Mutex::new(()),
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
        self.on_first_use(&self.dense, || {
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
            Ok(dense)
        })
    }

    /// `cell`'s value, made by `load` on first use. Callers arriving together wait for one
    /// load rather than each making its own (see `first_use`); a failed load leaves the cell
    /// empty for the next caller to try.
    fn on_first_use<'a, T>(
        &'a self,
        cell: &'a std::sync::OnceLock<T>,
        load: impl FnOnce() -> Result<T>,
    ) -> Result<&'a T> {
        if let Some(v) = cell.get() {
            return Ok(v);
        }
        let _loading = self.first_use.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = cell.get() {
            return Ok(v);
        }
        let v = load()?;
        Ok(cell.get_or_init(|| v))
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

    /// The sentence vectors, mapped on first use after their checksum and values are checked
    /// in place (an open checks only their size: searches never read them).
    fn sentence_vectors(&self) -> Result<&[f32]> {
        self.on_first_use(&self.sentence_vectors, || {
            let path = self.gen.join(dense::SENTENCE_VECTORS);
            let dim = self.manifest.encoder.dimension;
            let sum = self.manifest.files.get(dense::SENTENCE_VECTORS);
            let rows = if path.exists() {
                dense::map_vectors(&path, dim, sum)?
            } else {
                // An index built without sentence vectors has no file: no rows (the count
                // below tells a file gone missing from one built with them).
                dense::VectorRows::Read(Vec::new())
            };
            let stored = rows.as_f32().len() / dim;
            if stored as u64 != self.manifest.counts.stored_sentences {
                return Err(Error::Damaged {
                    path,
                    message: format!(
                        "holds {stored} rows, the manifest says {}",
                        self.manifest.counts.stored_sentences
                    ),
                });
            }
            Ok(rows)
        })
        .map(dense::VectorRows::as_f32)
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
