//! The passage store (sled): passage ordinal -> passage record, passage id ->
//! ordinal, document id -> passage ids, and tombstones of deleted passages.
//!
//! A passage's ordinal is its row in the raw vector file, its point id in the
//! HNSW graph and a fast field of the BM25 index: one number ties the three
//! indexes together.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::chunk::Passage;
use crate::error::{Error, Result};
use crate::fsutil;

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
    db: sled::Db,
    passages: sled::Tree,
    sentences: sled::Tree,
    ids: sled::Tree,
    documents: sled::Tree,
    deleted: sled::Tree,
    /// Declared last so that sled closes its files before the copy goes.
    _snapshot: Option<Snapshot>,
}

/// A private copy of a store that another process holds open; removed on drop.
struct Snapshot(PathBuf);

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl PassageStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::from_db(sled::Config::new().path(dir).open()?, None)
    }

    /// Opens the store in `dir` to read it. sled lets one process open a
    /// store at a time, so when another one holds it (a running `capstan
    /// serve`, say) this reads a private copy instead: published
    /// generations are never written again, so the copy is exact.
    pub fn open_for_reading(dir: &Path) -> Result<Self> {
        match sled::Config::new().path(dir).open() {
            Ok(db) => Self::from_db(db, None),
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                static COPIES: AtomicUsize = AtomicUsize::new(0);
                let copy = std::env::temp_dir().join(format!(
                    "capstan-store-{}-{}",
                    std::process::id(),
                    COPIES.fetch_add(1, Ordering::Relaxed)
                ));
                let snapshot = Snapshot(copy.clone());
                let _ = std::fs::remove_dir_all(&copy);
                fsutil::copy_tree(dir, &copy)?;
                let db = sled::Config::new().path(&copy).open()?;
                Self::from_db(db, Some(snapshot))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn from_db(db: sled::Db, snapshot: Option<Snapshot>) -> Result<Self> {
        Ok(Self {
            passages: db.open_tree("passages")?,
            sentences: db.open_tree("sentences")?,
            ids: db.open_tree("passage_ids")?,
            documents: db.open_tree("documents")?,
            deleted: db.open_tree("deleted")?,
            db,
            _snapshot: snapshot,
        })
    }

    /// Stores the passages of one document under consecutive ordinals from `first`.
    pub fn put_document(
        &self,
        doc_id: &str,
        first: PassageOrd,
        passages: &[Passage],
    ) -> Result<()> {
        let mut batch = sled::Batch::default();
        let mut id_batch = sled::Batch::default();
        for (i, p) in passages.iter().enumerate() {
            let ord = first + i as u64;
            let record = serde_json::to_vec(p).expect("a passage always serialises");
            batch.insert(&ord.to_be_bytes(), record);
            id_batch.insert(p.id.as_bytes(), &ord.to_be_bytes());
        }
        self.passages.apply_batch(batch)?;
        self.ids.apply_batch(id_batch)?;
        let ords: Vec<PassageOrd> = (first..first + passages.len() as u64).collect();
        self.documents.insert(
            doc_id.as_bytes(),
            serde_json::to_vec(&ords).expect("ords serialise"),
        )?;
        Ok(())
    }

    /// Records the sentences of the passage at `ord`.
    pub fn put_sentences(&self, ord: PassageOrd, sentences: &[SentenceRef]) -> Result<()> {
        let bytes = serde_json::to_vec(sentences).expect("sentence refs serialise");
        self.sentences.insert(ord.to_be_bytes(), bytes)?;
        Ok(())
    }

    /// The sentences of the passage at `ord` (empty when none were recorded).
    pub fn sentences(&self, ord: PassageOrd) -> Result<Vec<SentenceRef>> {
        match self.sentences.get(ord.to_be_bytes())? {
            None => Ok(Vec::new()),
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::index(
                    Path::new("store"),
                    format!("sentences of passage {ord} are corrupt: {e}"),
                )
            }),
        }
    }

    /// The passage at `ord`, if it exists and is not deleted.
    pub fn get(&self, ord: PassageOrd) -> Result<Option<Passage>> {
        if self.is_deleted(ord)? {
            return Ok(None);
        }
        self.get_any(ord)
    }

    fn get_any(&self, ord: PassageOrd) -> Result<Option<Passage>> {
        match self.passages.get(ord.to_be_bytes())? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::index(Path::new("store"), format!("passage {ord} is corrupt: {e}"))
            }),
        }
    }

    /// The ordinal of a passage id.
    pub fn ord_of(&self, passage_id: &str) -> Result<Option<PassageOrd>> {
        Ok(self.ids.get(passage_id.as_bytes())?.map(|v| decode_ord(&v)))
    }

    /// The live passage ordinals of a document.
    pub fn document_ords(&self, doc_id: &str) -> Result<Option<Vec<PassageOrd>>> {
        match self.documents.get(doc_id.as_bytes())? {
            None => Ok(None),
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
                Error::index(
                    Path::new("store"),
                    format!("document {doc_id} is corrupt: {e}"),
                )
            })?)),
        }
    }

    /// Whether a document id is live in the store.
    pub fn contains_document(&self, doc_id: &str) -> Result<bool> {
        Ok(self.documents.contains_key(doc_id.as_bytes())?)
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
        self.deleted.apply_batch(batch)?;
        self.documents.remove(doc_id.as_bytes())?;
        Ok(Some(ords.len()))
    }

    /// Whether `ord` is a tombstone.
    pub fn is_deleted(&self, ord: PassageOrd) -> Result<bool> {
        Ok(self.deleted.contains_key(ord.to_be_bytes())?)
    }

    /// All tombstoned ordinals.
    pub fn deleted_ords(&self) -> Result<Vec<PassageOrd>> {
        self.deleted
            .iter()
            .keys()
            .map(|k| Ok(decode_ord(&k?)))
            .collect()
    }

    /// Every live passage, in ordinal order.
    pub fn live_passages(&self) -> impl Iterator<Item = Result<(PassageOrd, Passage)>> + '_ {
        self.passages.iter().filter_map(move |item| {
            let (k, v) = match item {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e.into())),
            };
            let ord = decode_ord(&k);
            match self.is_deleted(ord) {
                Ok(true) => None,
                Ok(false) => Some(serde_json::from_slice(&v).map(|p| (ord, p)).map_err(|e| {
                    Error::index(Path::new("store"), format!("passage {ord} is corrupt: {e}"))
                })),
                Err(e) => Some(Err(e)),
            }
        })
    }

    /// Writes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
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
        }
    }

    #[test]
    fn round_trip_and_tombstones() {
        let dir = tempfile::tempdir().unwrap();
        let store = PassageStore::open(dir.path()).unwrap();
        store
            .put_document("a", 0, &[passage("a", 0), passage("a", 1)])
            .unwrap();
        store.put_document("b", 2, &[passage("b", 0)]).unwrap();
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
    fn a_store_held_by_another_opener_is_read_from_a_private_copy() {
        let dir = tempfile::tempdir().unwrap();
        let holder = PassageStore::open(dir.path()).unwrap();
        holder.put_document("a", 0, &[passage("a", 0)]).unwrap();
        holder.flush().unwrap();
        // sled's file lock is per open file, so a second open here fails
        // exactly as it does in a second process.
        assert!(PassageStore::open(dir.path()).is_err());
        let reader = PassageStore::open_for_reading(dir.path()).unwrap();
        let copy = reader._snapshot.as_ref().expect("a copy").0.clone();
        assert!(copy.is_dir());
        assert_eq!(reader.get(0).unwrap().unwrap().id, "a#0");
        drop(reader);
        assert!(!copy.exists(), "the copy is removed with the store");
        // The holder is untouched and still writable.
        holder.put_document("b", 1, &[passage("b", 0)]).unwrap();
        assert_eq!(holder.get(1).unwrap().unwrap().id, "b#0");
        drop(holder);
        // Nobody holds it now: it opens in place.
        let reader = PassageStore::open_for_reading(dir.path()).unwrap();
        assert!(reader._snapshot.is_none());
        assert_eq!(reader.get(1).unwrap().unwrap().id, "b#0");
    }
}
