//! An index folder and its generations: `DIR/CURRENT` names the live generation
//! `DIR/gen-NNNNNNNN/`, which holds `manifest.json`, `bm25/` (tantivy), `store/` (sled),
//! `vectors.f32` and `hnsw/`. Every change builds a new generation beside the live one and
//! switches `CURRENT` with one atomic rename, so a crash (even `kill -9`) at any instant
//! leaves the previous generation untouched and in use; one process changes an index at a
//! time (its write lock).

use std::path::{Path, PathBuf};

use crate::dense;
use crate::error::{Error, Result};
use crate::frozen_store;
use crate::fsutil;
use crate::integrity::{self, Depth};
use crate::manifest::Manifest;
use crate::store::PassageStore;

pub(crate) const CURRENT: &str = "CURRENT";
pub(crate) const LOCK: &str = ".lock";
pub(crate) const BM25_DIR: &str = "bm25";
pub(crate) const STORE_DIR: &str = "store";

/// An index folder holding generations.
pub(crate) struct IndexFolder {
    pub(crate) root: PathBuf,
}

/// Held while a process changes an index; removed on drop. A lock left by a
/// killed process (its pid no longer runs) is taken over.
pub(crate) struct WriteLock(PathBuf);

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl IndexFolder {
    /// For a new build: `dir` may be missing, empty, or a Capstan index.
    pub(crate) fn prepare(dir: &Path) -> Result<Self> {
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

    pub(crate) fn open(dir: &Path) -> Result<Self> {
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
    pub(crate) fn current(&self) -> Result<Option<Live>> {
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

    pub(crate) fn require_current(&self) -> Result<Live> {
        self.current()?
            .ok_or_else(|| Error::index(&self.root, "not a Capstan index (no CURRENT file)"))
    }

    pub(crate) fn lock(&self) -> Result<WriteLock> {
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

    pub(crate) fn generations(&self) -> Result<Vec<(u64, PathBuf)>> {
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
    pub(crate) fn new_generation(&self) -> Result<Generation> {
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
    pub(crate) fn publish(
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
pub(crate) struct Live {
    pub(crate) gen: PathBuf,
    /// Checksum of its `manifest.json`.
    pub(crate) manifest_sum: Option<String>,
}

impl Live {
    /// Its manifest, checked against the checksum in `CURRENT`.
    pub(crate) fn manifest(&self) -> Result<Manifest> {
        Manifest::read_checked(&self.gen, self.manifest_sum.as_deref())
    }

    /// Its manifest, once every file is present at its size and every file an
    /// open reads matches its checksum: not the sled store and hnsw_rs files
    /// where the generation has their frozen forms (only changes read those,
    /// after checking them; `index verify` does too), nor what is read and
    /// checked on first use: the dense index's files ([`Index::dense`]) and
    /// the sentence vectors.
    pub(crate) fn searched_manifest(&self) -> Result<Manifest> {
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
    pub(crate) fn verified_manifest(&self) -> Result<Manifest> {
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
pub(crate) fn dense_files(manifest: &Manifest) -> integrity::FileTable {
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
pub(crate) struct Generation {
    pub(crate) path: PathBuf,
    pub(crate) published: bool,
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
