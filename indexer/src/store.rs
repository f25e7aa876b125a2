//! The passage store (sled): passage ordinal -> passage record, passage id ->
//! ordinal, document id -> passage ids (and the SHA-256 of its source), and
//! tombstones of deleted passages.
//!
//! A passage's ordinal is its row in the raw vector file, its point id in the
//! HNSW graph and a fast field of the BM25 index: one number ties the three
//! indexes together.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::chunk::Passage;
use crate::error::{Error, Result};
use crate::frozen_store::{self, FrozenStore, Tree};
use crate::fsutil;

/// A document's `metadata` object.
pub type Metadata = serde_json::Map<String, serde_json::Value>;

/// Position of a passage in the index (vector row, HNSW id, BM25 fast field).
pub type PassageOrd = u64;

/// A sentence of a passage: byte offsets into the passage text and the row
/// of its vector in the sentence vector file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentenceRef {
    /// Byte offset of the sentence's first byte in the passage text.
    pub start: u32,
    /// Byte offset one past its last byte.
    pub end: u32,
    /// Row in `sentences.f32`.
    pub row: u64,
}

/// The passage store: sled to write it, and to read generations published
/// before `store.frozen` existed; the frozen file to read a published one.
pub struct PassageStore {
    /// The store folder errors name (the published one, not a private copy).
    dir: PathBuf,
    backend: Backend,
}

enum Backend {
    Sled(SledTrees),
    Frozen(FrozenStore),
}

/// The sled database and its trees.
struct SledTrees {
    db: sled::Db,
    /// One per [`Tree`], in [`Tree::ALL`]'s order.
    trees: [sled::Tree; 7],
    /// Declared last so that sled closes its files before the copy goes.
    _snapshot: Option<Snapshot>,
}

impl SledTrees {
    fn tree(&self, tree: Tree) -> &sled::Tree {
        &self.trees[tree as usize]
    }
}

/// A key and its value.
type Record = (Vec<u8>, Vec<u8>);

/// A value read from either backend.
enum Value<'a> {
    Sled(sled::IVec),
    Frozen(&'a [u8]),
}

impl std::ops::Deref for Value<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Value::Sled(v) => v,
            Value::Frozen(v) => v,
        }
    }
}

/// A private copy of a published store; removed on drop.
struct Snapshot(PathBuf);

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Prefix of the private copies in the temporary folder.
const COPY_PREFIX: &str = "capstan-store-";

impl PassageStore {
    /// Opens (or creates) the store in `dir` to change it.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = guarded(dir, || sled::Config::new().path(dir).open())?;
        Self::from_db(dir, db, None)
    }

    /// Opens the published store in `dir` to read it, without writing a byte
    /// of it: sled has no read-only mode (opening recovers, grows `db` and
    /// writes snapshots) and lets one process hold a store at a time, so a
    /// reader opens a private copy in the temporary folder (`TMPDIR`),
    /// removed when the store is dropped. The original may be on a
    /// read-only mount or held by a running server.
    pub fn open_for_reading(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Damaged {
                path: dir.to_path_buf(),
                message: "the passage store folder is missing".into(),
            });
        }
        remove_stale_copies();
        static COPIES: AtomicUsize = AtomicUsize::new(0);
        let copy = std::env::temp_dir().join(format!(
            "{COPY_PREFIX}{}-{}",
            std::process::id(),
            COPIES.fetch_add(1, Ordering::Relaxed)
        ));
        let snapshot = Snapshot(copy.clone());
        let _ = std::fs::remove_dir_all(&copy);
        fsutil::copy_tree(dir, &copy)?;
        let db = guarded(dir, || sled::Config::new().path(&copy).open())?;
        Self::from_db(dir, db, Some(snapshot))
    }

    /// Opens a published generation's `store.frozen` ([`frozen_store`]) to
    /// read it in place; `dir` is the store folder errors name; `block_sums`: its
    /// blocks' checksums, checked as reads reach them (`None`: checked whole before).
    pub fn open_frozen(dir: &Path, file: &Path, block_sums: Option<&[String]>) -> Result<Self> {
        Ok(Self {
            dir: dir.to_path_buf(),
            backend: Backend::Frozen(FrozenStore::open(file, block_sums)?),
        })
    }

    fn from_db(dir: &Path, db: sled::Db, snapshot: Option<Snapshot>) -> Result<Self> {
        let mut trees = Vec::with_capacity(Tree::ALL.len());
        for tree in Tree::ALL {
            trees.push(guarded(dir, || db.open_tree(tree.sled_name()))?);
        }
        Ok(Self {
            backend: Backend::Sled(SledTrees {
                trees: trees.try_into().expect("one sled tree per Tree"),
                db,
                _snapshot: snapshot,
            }),
            dir: dir.to_path_buf(),
        })
    }

    /// Writes every tree, in key order, to the read-only file `path`
    /// ([`frozen_store`]), for the searches of the published generation.
    pub fn write_frozen(&self, path: &Path) -> Result<()> {
        let mut trees: [Vec<(Vec<u8>, Vec<u8>)>; 7] = Default::default();
        for (records, tree) in trees.iter_mut().zip(Tree::ALL) {
            for item in self.records(tree) {
                let (k, v) = item?;
                records.push((k, v));
            }
        }
        frozen_store::write(path, &trees)
    }

    fn sled<T>(&self, result: sled::Result<T>) -> Result<T> {
        result.map_err(|e| Error::store(&self.dir, e))
    }

    fn corrupt(&self, what: String, e: serde_json::Error) -> Error {
        Error::Damaged {
            path: self.dir.clone(),
            message: format!("{what} is corrupt: {e}"),
        }
    }

    /// The sled trees, to change them.
    fn writable(&self) -> Result<&SledTrees> {
        match &self.backend {
            Backend::Sled(trees) => Ok(trees),
            Backend::Frozen(_) => Err(Error::Damaged {
                path: self.dir.clone(),
                message: "a published store is read-only".into(),
            }),
        }
    }

    /// The value of `key` in `tree`.
    fn read(&self, tree: Tree, key: &[u8]) -> Result<Option<Value<'_>>> {
        match &self.backend {
            Backend::Sled(trees) => Ok(self.sled(trees.tree(tree).get(key))?.map(Value::Sled)),
            Backend::Frozen(store) => Ok(store.get(tree, key)?.map(Value::Frozen)),
        }
    }

    /// Every record of `tree`, in key order.
    fn records(&self, tree: Tree) -> Box<dyn Iterator<Item = Result<Record>> + '_> {
        match &self.backend {
            Backend::Sled(trees) => Box::new(trees.tree(tree).iter().map(move |item| {
                let (k, v) = self.sled(item)?;
                Ok((k.to_vec(), v.to_vec()))
            })),
            Backend::Frozen(store) => Box::new(
                store
                    .iter(tree)
                    .map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec()))),
            ),
        }
    }

    /// Records in `tree` (a scan in sled, which keeps no counts).
    fn len(&self, tree: Tree) -> usize {
        match &self.backend {
            Backend::Sled(trees) => trees.tree(tree).len(),
            Backend::Frozen(store) => store.len(tree),
        }
    }

    /// Stores the passages of one document under consecutive ordinals from
    /// `first`, and its metadata object.
    pub fn put_document(
        &self,
        doc_id: &str,
        first: PassageOrd,
        passages: &[Passage],
        metadata: Option<&Metadata>,
    ) -> Result<()> {
        let mut batch = sled::Batch::default();
        let mut id_batch = sled::Batch::default();
        for (i, p) in passages.iter().enumerate() {
            let ord = first + i as u64;
            let record = serde_json::to_vec(p).expect("a passage always serialises");
            batch.insert(&ord.to_be_bytes(), record);
            id_batch.insert(p.id.as_bytes(), &ord.to_be_bytes());
        }
        let trees = self.writable()?;
        self.sled(trees.tree(Tree::Passages).apply_batch(batch))?;
        self.sled(trees.tree(Tree::Ids).apply_batch(id_batch))?;
        let ords: Vec<PassageOrd> = (first..first + passages.len() as u64).collect();
        self.sled(trees.tree(Tree::Documents).insert(
            doc_id.as_bytes(),
            serde_json::to_vec(&ords).expect("ords serialise"),
        ))?;
        match metadata {
            Some(m) => self.sled(trees.tree(Tree::Metadata).insert(
                doc_id.as_bytes(),
                serde_json::to_vec(m).expect("a JSON object serialises"),
            ))?,
            None => self.sled(trees.tree(Tree::Metadata).remove(doc_id.as_bytes()))?,
        };
        Ok(())
    }

    /// Records the SHA-256 of the bytes document `doc_id` was indexed from.
    pub fn put_source_sha256(&self, doc_id: &str, sha256: &str) -> Result<()> {
        let trees = self.writable()?;
        self.sled(
            trees
                .tree(Tree::Sources)
                .insert(doc_id.as_bytes(), sha256.as_bytes()),
        )?;
        Ok(())
    }

    /// The SHA-256 of the bytes a live document was indexed from, when
    /// recorded (indexes made before it was are not).
    pub fn source_sha256(&self, doc_id: &str) -> Result<Option<String>> {
        Ok(self
            .read(Tree::Sources, doc_id.as_bytes())?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// A live document's metadata object (`None` when it has none).
    pub fn metadata(&self, doc_id: &str) -> Result<Option<Metadata>> {
        match self.read(Tree::Metadata, doc_id.as_bytes())? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.corrupt(format!("the metadata of document {doc_id}"), e)),
        }
    }

    /// Records the sentences of the passage at `ord`.
    pub fn put_sentences(&self, ord: PassageOrd, sentences: &[SentenceRef]) -> Result<()> {
        let bytes = serde_json::to_vec(sentences).expect("sentence refs serialise");
        self.sled(
            self.writable()?
                .tree(Tree::Sentences)
                .insert(ord.to_be_bytes(), bytes),
        )?;
        Ok(())
    }

    /// The sentences of the passage at `ord` (empty when none were recorded).
    pub fn sentences(&self, ord: PassageOrd) -> Result<Vec<SentenceRef>> {
        match self.read(Tree::Sentences, &ord.to_be_bytes())? {
            None => Ok(Vec::new()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| self.corrupt(format!("the sentence list of passage {ord}"), e)),
        }
    }

    /// The passage at `ord`, if it exists and is not deleted.
    pub fn get(&self, ord: PassageOrd) -> Result<Option<Passage>> {
        if self.is_deleted(ord)? {
            return Ok(None);
        }
        match self.read(Tree::Passages, &ord.to_be_bytes())? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.corrupt(format!("passage {ord}"), e)),
        }
    }

    /// The ordinal of a passage id.
    pub fn ord_of(&self, passage_id: &str) -> Result<Option<PassageOrd>> {
        Ok(self
            .read(Tree::Ids, passage_id.as_bytes())?
            .map(|v| decode_ord(&v)))
    }

    /// The live passage ordinals of a document.
    pub fn document_ords(&self, doc_id: &str) -> Result<Option<Vec<PassageOrd>>> {
        match self.read(Tree::Documents, doc_id.as_bytes())? {
            None => Ok(None),
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
                self.corrupt(format!("the passage list of document {doc_id}"), e)
            })?)),
        }
    }

    /// Whether a document id is live in the store.
    pub fn contains_document(&self, doc_id: &str) -> Result<bool> {
        Ok(self.read(Tree::Documents, doc_id.as_bytes())?.is_some())
    }

    /// Deletes a document: its passages become tombstones (the HNSW graph
    /// cannot delete points; searches filter them out). Returns how many
    /// passages it had, or `None` if the document is unknown.
    pub fn delete_document(&self, doc_id: &str) -> Result<Option<usize>> {
        let Some(ords) = self.document_ords(doc_id)? else {
            return Ok(None);
        };
        let mut batch = sled::Batch::default();
        for ord in &ords {
            batch.insert(&ord.to_be_bytes(), &[]);
        }
        let trees = self.writable()?;
        self.sled(trees.tree(Tree::Deleted).apply_batch(batch))?;
        self.sled(trees.tree(Tree::Documents).remove(doc_id.as_bytes()))?;
        self.sled(trees.tree(Tree::Metadata).remove(doc_id.as_bytes()))?;
        self.sled(trees.tree(Tree::Sources).remove(doc_id.as_bytes()))?;
        Ok(Some(ords.len()))
    }

    /// Whether `ord` is a tombstone.
    pub fn is_deleted(&self, ord: PassageOrd) -> Result<bool> {
        Ok(self.read(Tree::Deleted, &ord.to_be_bytes())?.is_some())
    }

    /// All tombstoned ordinals.
    pub fn deleted_ords(&self) -> Result<Vec<PassageOrd>> {
        self.records(Tree::Deleted)
            .map(|item| Ok(decode_ord(&item?.0)))
            .collect()
    }

    /// Record counts: (passages stored, tombstones, live documents). In
    /// sled each is a scan of its tree (it keeps no counts); the frozen file
    /// records them.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.len(Tree::Passages) as u64,
            self.len(Tree::Deleted) as u64,
            self.len(Tree::Documents) as u64,
        )
    }

    /// Every live passage, in ordinal order.
    pub fn live_passages(&self) -> impl Iterator<Item = Result<(PassageOrd, Passage)>> + '_ {
        self.records(Tree::Passages).filter_map(move |item| {
            let (k, v) = match item {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e)),
            };
            let ord = decode_ord(&k);
            match self.is_deleted(ord) {
                Ok(true) => None,
                Ok(false) => Some(
                    serde_json::from_slice(&v)
                        .map(|p| (ord, p))
                        .map_err(|e| self.corrupt(format!("passage {ord}"), e)),
                ),
                Err(e) => Some(Err(e)),
            }
        })
    }

    /// Writes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.sled(self.writable()?.db.flush())?;
        Ok(())
    }
}

/// Runs a sled call that may panic on damaged files (its recovery indexes
/// into what it read) and names the store folder in either failure.
fn guarded<T>(dir: &Path, open: impl FnOnce() -> sled::Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)) {
        Ok(result) => result.map_err(|e| Error::store(dir, e)),
        Err(panic) => Err(Error::Damaged {
            path: dir.to_path_buf(),
            message: format!(
                "sled could not read it ({})",
                crate::panic_message(panic.as_ref())
            ),
        }),
    }
}

/// Removes private copies left by readers that were killed (their pid no
/// longer runs).
fn remove_stale_copies() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(COPY_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A big-endian ordinal (a damaged, shorter value reads as another number,
/// never a panic; `index verify` names the file).
fn decode_ord(bytes: &[u8]) -> PassageOrd {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(doc: &str, i: u32) -> Passage {
        Passage {
            id: format!("{doc}#{i}"),
            doc_id: doc.into(),
            title: "t".into(),
            text: format!("text {i}"),
            index: i,
            char_start: 0,
            char_end: 6,
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_and_tombstones() {
        let dir = tempfile::tempdir().unwrap();
        let store = PassageStore::open(dir.path()).unwrap();
        store
            .put_document("a", 0, &[passage("a", 0), passage("a", 1)], None)
            .unwrap();
        store
            .put_document("b", 2, &[passage("b", 0)], None)
            .unwrap();
        assert_eq!(store.get(1).unwrap().unwrap().id, "a#1");
        assert_eq!(store.ord_of("b#0").unwrap(), Some(2));
        assert_eq!(store.delete_document("a").unwrap(), Some(2));
        assert_eq!(store.delete_document("zzz").unwrap(), None);
        assert!(store.get(0).unwrap().is_none());
        assert_eq!(store.deleted_ords().unwrap(), vec![0, 1]);
        let live: Vec<_> = store.live_passages().map(|r| r.unwrap().0).collect();
        assert_eq!(live, vec![2]);
    }

    #[test]
    fn the_frozen_file_reads_as_the_sled_store_does() {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        let writer = PassageStore::open(&store_dir).unwrap();
        let mut meta = Metadata::new();
        meta.insert("year".into(), 1843.into());
        for (i, doc) in ["b", "a", "c"].iter().enumerate() {
            let first = 2 * i as u64;
            let passages = [passage(doc, 0), passage(doc, 1)];
            writer
                .put_document(doc, first, &passages, Some(&meta))
                .unwrap();
            writer.put_source_sha256(doc, "abc").unwrap();
            let refs = [SentenceRef {
                start: 0,
                end: 3,
                row: first,
            }];
            writer.put_sentences(first, &refs).unwrap();
        }
        writer.delete_document("c").unwrap();
        let file = dir.path().join(frozen_store::FILE);
        writer.write_frozen(&file).unwrap();
        let frozen = PassageStore::open_frozen(&store_dir, &file, None).unwrap();
        assert_eq!(frozen.counts(), writer.counts());
        assert_eq!(frozen.counts(), (6, 2, 2));
        for ord in 0..7u64 {
            let (a, b) = (frozen.get(ord).unwrap(), writer.get(ord).unwrap());
            assert_eq!(a.map(|p| p.id), b.map(|p| p.id), "ord {ord}");
            assert_eq!(
                frozen.sentences(ord).unwrap(),
                writer.sentences(ord).unwrap()
            );
            assert_eq!(
                frozen.is_deleted(ord).unwrap(),
                writer.is_deleted(ord).unwrap()
            );
        }
        assert_eq!(frozen.ord_of("a#1").unwrap(), Some(3));
        assert_eq!(frozen.document_ords("b").unwrap(), Some(vec![0, 1]));
        assert!(frozen.contains_document("a").unwrap() && !frozen.contains_document("c").unwrap());
        assert_eq!(frozen.metadata("a").unwrap(), Some(meta.clone()));
        assert_eq!(frozen.source_sha256("b").unwrap().as_deref(), Some("abc"));
        assert_eq!(frozen.deleted_ords().unwrap(), vec![4, 5]);
        let live: Vec<u64> = frozen.live_passages().map(|p| p.unwrap().0).collect();
        assert_eq!(live, vec![0, 1, 2, 3]);
        // Read-only: a change is refused, not written.
        assert!(frozen.delete_document("a").is_err());
    }

    #[test]
    fn a_reader_opens_a_private_copy_and_never_writes_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let writer = PassageStore::open(dir.path()).unwrap();
        writer
            .put_document("a", 0, &[passage("a", 0)], None)
            .unwrap();
        writer.flush().unwrap();
        drop(writer);
        let before = crate::integrity::file_table(dir.path()).unwrap();
        let reader = PassageStore::open_for_reading(dir.path()).unwrap();
        let Backend::Sled(trees) = &reader.backend else {
            panic!("a sled reader")
        };
        let copy = trees._snapshot.as_ref().expect("a copy").0.clone();
        assert!(copy.is_dir());
        assert_eq!(reader.get(0).unwrap().unwrap().id, "a#0");
        assert_eq!(reader.counts(), (1, 0, 1));
        drop(reader);
        assert!(!copy.exists(), "the copy is removed with the store");
        assert_eq!(
            crate::integrity::file_table(dir.path()).unwrap(),
            before,
            "a reader wrote to the store"
        );
        // sled's file lock is per open file, so a second open here fails
        // exactly as it does in a second process; a reader does not care.
        let holder = PassageStore::open(dir.path()).unwrap();
        assert!(PassageStore::open(dir.path()).is_err());
        let reader = PassageStore::open_for_reading(dir.path()).unwrap();
        assert_eq!(reader.get(0).unwrap().unwrap().id, "a#0");
        drop(holder);
    }
}
