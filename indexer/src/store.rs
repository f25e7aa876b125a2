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

/// The sled-backed passage store.
pub struct PassageStore {
    /// The store folder errors name (the published one, not a private copy).
    dir: PathBuf,
    db: sled::Db,
    passages: sled::Tree,
    sentences: sled::Tree,
    ids: sled::Tree,
    documents: sled::Tree,
    metadata: sled::Tree,
    /// Document id -> SHA-256 of the bytes it was indexed from.
    sources: sled::Tree,
    deleted: sled::Tree,
    /// Declared last so that sled closes its files before the copy goes.
    _snapshot: Option<Snapshot>,
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

    fn from_db(dir: &Path, db: sled::Db, snapshot: Option<Snapshot>) -> Result<Self> {
        let tree = |name: &str| guarded(dir, || db.open_tree(name));
        Ok(Self {
            passages: tree("passages")?,
            sentences: tree("sentences")?,
            ids: tree("passage_ids")?,
            documents: tree("documents")?,
            metadata: tree("metadata")?,
            sources: tree("document_sources")?,
            deleted: tree("deleted")?,
            dir: dir.to_path_buf(),
            db,
            _snapshot: snapshot,
        })
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
        self.sled(self.passages.apply_batch(batch))?;
        self.sled(self.ids.apply_batch(id_batch))?;
        let ords: Vec<PassageOrd> = (first..first + passages.len() as u64).collect();
        self.sled(self.documents.insert(
            doc_id.as_bytes(),
            serde_json::to_vec(&ords).expect("ords serialise"),
        ))?;
        match metadata {
            Some(m) => self.sled(self.metadata.insert(
                doc_id.as_bytes(),
                serde_json::to_vec(m).expect("a JSON object serialises"),
            ))?,
            None => self.sled(self.metadata.remove(doc_id.as_bytes()))?,
        };
        Ok(())
    }

    /// Records the SHA-256 of the bytes document `doc_id` was indexed from.
    pub fn put_source_sha256(&self, doc_id: &str, sha256: &str) -> Result<()> {
        self.sled(self.sources.insert(doc_id.as_bytes(), sha256.as_bytes()))?;
        Ok(())
    }

    /// The SHA-256 of the bytes a live document was indexed from, when
    /// recorded (indexes made before it was are not).
    pub fn source_sha256(&self, doc_id: &str) -> Result<Option<String>> {
        Ok(self
            .sled(self.sources.get(doc_id.as_bytes()))?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// A live document's metadata object (`None` when it has none).
    pub fn metadata(&self, doc_id: &str) -> Result<Option<Metadata>> {
        match self.sled(self.metadata.get(doc_id.as_bytes()))? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.corrupt(format!("the metadata of document {doc_id}"), e)),
        }
    }

    /// Records the sentences of the passage at `ord`.
    pub fn put_sentences(&self, ord: PassageOrd, sentences: &[SentenceRef]) -> Result<()> {
        let bytes = serde_json::to_vec(sentences).expect("sentence refs serialise");
        self.sled(self.sentences.insert(ord.to_be_bytes(), bytes))?;
        Ok(())
    }

    /// The sentences of the passage at `ord` (empty when none were recorded).
    pub fn sentences(&self, ord: PassageOrd) -> Result<Vec<SentenceRef>> {
        match self.sled(self.sentences.get(ord.to_be_bytes()))? {
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
        match self.sled(self.passages.get(ord.to_be_bytes()))? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.corrupt(format!("passage {ord}"), e)),
        }
    }

    /// The ordinal of a passage id.
    pub fn ord_of(&self, passage_id: &str) -> Result<Option<PassageOrd>> {
        Ok(self
            .sled(self.ids.get(passage_id.as_bytes()))?
            .map(|v| decode_ord(&v)))
    }

    /// The live passage ordinals of a document.
    pub fn document_ords(&self, doc_id: &str) -> Result<Option<Vec<PassageOrd>>> {
        match self.sled(self.documents.get(doc_id.as_bytes()))? {
            None => Ok(None),
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
                self.corrupt(format!("the passage list of document {doc_id}"), e)
            })?)),
        }
    }

    /// Whether a document id is live in the store.
    pub fn contains_document(&self, doc_id: &str) -> Result<bool> {
        self.sled(self.documents.contains_key(doc_id.as_bytes()))
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
        self.sled(self.deleted.apply_batch(batch))?;
        self.sled(self.documents.remove(doc_id.as_bytes()))?;
        self.sled(self.metadata.remove(doc_id.as_bytes()))?;
        self.sled(self.sources.remove(doc_id.as_bytes()))?;
        Ok(Some(ords.len()))
    }

    /// Whether `ord` is a tombstone.
    pub fn is_deleted(&self, ord: PassageOrd) -> Result<bool> {
        self.sled(self.deleted.contains_key(ord.to_be_bytes()))
    }

    /// All tombstoned ordinals.
    pub fn deleted_ords(&self) -> Result<Vec<PassageOrd>> {
        self.deleted
            .iter()
            .keys()
            .map(|k| Ok(decode_ord(&self.sled(k)?)))
            .collect()
    }

    /// Record counts: (passages stored, tombstones, live documents). Each is
    /// a scan of its tree (sled keeps no counts).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.passages.len() as u64,
            self.deleted.len() as u64,
            self.documents.len() as u64,
        )
    }

    /// Every live passage, in ordinal order.
    pub fn live_passages(&self) -> impl Iterator<Item = Result<(PassageOrd, Passage)>> + '_ {
        self.passages.iter().filter_map(move |item| {
            let (k, v) = match self.sled(item) {
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
        self.sled(self.db.flush())?;
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

fn decode_ord(bytes: &[u8]) -> PassageOrd {
    let mut buf = [0u8; 8];
    buf.copy_from_slice(&bytes[..8]);
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
        let copy = reader._snapshot.as_ref().expect("a copy").0.clone();
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
