//! The passage store of a published generation as one read-only file,
//! `store.frozen`, that a search maps and reads in place.
//!
//! sled has no read-only mode: opening a store recovers it, grows its files
//! and writes snapshots, and one process may hold it at a time, so a reader
//! of a sled store must copy the whole folder first, which costs time in
//! proportion to the index at every open. A published generation never
//! changes, so when it is published its sled trees are also written, in key
//! order, into this file (an SSTable without blocks): per tree a table of
//! record offsets, then the records (`key length: u32`, key, value). A
//! lookup is a binary search over the offsets; nothing is read until asked
//! for, so opening costs the same at any size. With the manifest's block
//! checksums ([`crate::integrity::CheckedBlocks`]) each block is checked when
//! a read first touches it. Writers (`--append`, `delete`, `compact`) keep
//! using the sled store beside it.

use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::integrity::CheckedBlocks;

/// The file's name in a generation (a file [`crate::integrity`] checks by block).
pub const FILE: &str = crate::integrity::FROZEN_STORE_FILE;

/// The first bytes of the file, with its version.
const MAGIC: &[u8; 8] = b"CPSTSTR1";

/// The trees of a passage store, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    Passages,
    Sentences,
    Ids,
    Documents,
    Metadata,
    Sources,
    Deleted,
}

impl Tree {
    /// Every tree, in file order.
    pub const ALL: [Tree; 7] = [
        Tree::Passages,
        Tree::Sentences,
        Tree::Ids,
        Tree::Documents,
        Tree::Metadata,
        Tree::Sources,
        Tree::Deleted,
    ];

    /// Its name in sled.
    pub fn sled_name(self) -> &'static str {
        match self {
            Tree::Passages => "passages",
            Tree::Sentences => "sentences",
            Tree::Ids => "passage_ids",
            Tree::Documents => "documents",
            Tree::Metadata => "metadata",
            Tree::Sources => "document_sources",
            Tree::Deleted => "deleted",
        }
    }
}

/// Bytes of the header: the magic, then per tree its record count, the
/// position of its offset table, the position and length of its records.
const HEADER: usize = MAGIC.len() + Tree::ALL.len() * 32;

/// Writes `trees` (each tree's records in key order, as sled iterates them)
/// to `path`, durably.
pub fn write(path: &Path, trees: &[Vec<(Vec<u8>, Vec<u8>)>; 7]) -> Result<()> {
    let record_len = |(key, value): &(Vec<u8>, Vec<u8>)| 4 + key.len() + value.len();
    // Where each tree's offset table and records go, so that the file is
    // written in one pass into one buffer.
    let mut layout = Vec::with_capacity(trees.len());
    let mut at = HEADER;
    for records in trees {
        let data_len: usize = records.iter().map(record_len).sum();
        let index_pos = at;
        let data_pos = index_pos + (records.len() + 1) * 8;
        layout.push([records.len(), index_pos, data_pos, data_len]);
        at = data_pos + data_len;
    }
    let mut out = Vec::with_capacity(at);
    out.extend_from_slice(MAGIC);
    for fields in &layout {
        for v in fields {
            out.extend_from_slice(&(*v as u64).to_le_bytes());
        }
    }
    for records in trees {
        let mut offset = 0u64;
        for record in records {
            out.extend_from_slice(&offset.to_le_bytes());
            offset += record_len(record) as u64;
        }
        out.extend_from_slice(&offset.to_le_bytes());
        for (key, value) in records {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
    }
    debug_assert_eq!(out.len(), at);
    crate::fsutil::write_durably(path, &out)
}

/// Where one tree lies in the file.
#[derive(Debug, Clone, Copy)]
struct TreeView {
    count: usize,
    index_pos: usize,
    data_pos: usize,
    data_len: usize,
}

/// A `store.frozen` mapped for reading.
pub struct FrozenStore {
    path: PathBuf,
    map: Mmap,
    /// `None`: the file was checked whole before it was opened.
    blocks: Option<CheckedBlocks>,
    trees: [TreeView; 7],
}

impl FrozenStore {
    /// Maps `path` and checks its header (every tree within the file); the
    /// records are checked as they are read, and with `block_sums` (the
    /// manifest's [`crate::integrity::FileSum::blocks`]) so are the blocks
    /// they lie in.
    pub fn open(path: &Path, block_sums: Option<&[String]>) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: a published generation is never written again (writers make
        // a new one); the map is read-only and its bytes are bounds-checked
        // before use, so a file changed under us gives wrong bytes or an
        // error, never memory unsafety beyond what any mmap reader accepts.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let damaged = |message: &str| Error::Damaged {
            path: path.to_path_buf(),
            message: message.to_string(),
        };
        let blocks = match block_sums {
            Some(sums) => Some(CheckedBlocks::new(map.len(), sums).map_err(|m| damaged(&m))?),
            None => None,
        };
        let mut store = Self {
            path: path.to_path_buf(),
            map,
            blocks,
            trees: [TreeView {
                count: 0,
                index_pos: 0,
                data_pos: 0,
                data_len: 0,
            }; 7],
        };
        let len = store.map.len();
        if len < HEADER || store.read(0..MAGIC.len())? != MAGIC {
            return Err(damaged("not a Capstan passage store file"));
        }
        let header = store.read(MAGIC.len()..HEADER)?;
        let field = |i: usize| {
            u64::from_le_bytes(header[i * 8..i * 8 + 8].try_into().expect("8 bytes")) as usize
        };
        let mut trees = store.trees;
        for (t, view) in trees.iter_mut().enumerate() {
            *view = TreeView {
                count: field(4 * t),
                index_pos: field(4 * t + 1),
                data_pos: field(4 * t + 2),
                data_len: field(4 * t + 3),
            };
            let index_end = view
                .count
                .checked_add(1)
                .and_then(|n| n.checked_mul(8))
                .and_then(|n| n.checked_add(view.index_pos));
            let data_end = view.data_pos.checked_add(view.data_len);
            if !matches!((index_end, data_end), (Some(i), Some(d)) if i <= len && d <= len) {
                return Err(damaged("a tree lies past the end of the file"));
            }
        }
        store.trees = trees;
        Ok(store)
    }

    /// Bytes `range` of the file (within it), after checking the blocks they lie in.
    fn read(&self, range: std::ops::Range<usize>) -> Result<&[u8]> {
        if let Some(blocks) = &self.blocks {
            blocks
                .check(&self.map, range.clone())
                .map_err(|m| self.damaged(m))?;
        }
        Ok(&self.map[range])
    }

    fn damaged(&self, message: String) -> Error {
        Error::Damaged {
            path: self.path.clone(),
            message,
        }
    }

    /// Records in `tree`.
    pub fn len(&self, tree: Tree) -> usize {
        self.trees[tree as usize].count
    }

    /// Record `i` of `tree`: its key and value.
    fn record(&self, tree: Tree, i: usize) -> Result<(&[u8], &[u8])> {
        let view = self.trees[tree as usize];
        let offsets = self.read(view.index_pos + i * 8..view.index_pos + i * 8 + 16)?;
        let offset = |j: usize| {
            u64::from_le_bytes(offsets[j * 8..j * 8 + 8].try_into().expect("8 bytes")) as usize
        };
        let (start, end) = (offset(0), offset(1));
        if start > end || end > view.data_len || end - start < 4 {
            return Err(self.damaged(format!("record {i} of {tree:?} is out of bounds")));
        }
        let record = self.read(view.data_pos + start..view.data_pos + end)?;
        let key_len = u32::from_le_bytes(record[..4].try_into().expect("4 bytes")) as usize;
        let key_end = 4usize
            .checked_add(key_len)
            .filter(|&e| e <= record.len())
            .ok_or_else(|| self.damaged(format!("record {i} of {tree:?} is inconsistent")))?;
        Ok((&record[4..key_end], &record[key_end..]))
    }

    /// The value of `key` in `tree` (binary search: the records are sorted).
    pub fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        let (mut lo, mut hi) = (0, self.len(tree));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.record(tree, mid)?;
            match k.cmp(key) {
                std::cmp::Ordering::Equal => return Ok(Some(v)),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        Ok(None)
    }

    /// Every record of `tree`, in key order.
    pub fn iter(&self, tree: Tree) -> impl Iterator<Item = Result<(&[u8], &[u8])>> + '_ {
        (0..self.len(tree)).map(move |i| self.record(tree, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_found_by_key_and_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let mut trees: [Vec<(Vec<u8>, Vec<u8>)>; 7] = Default::default();
        trees[Tree::Passages as usize] = (0u64..1000)
            .map(|i| {
                (
                    i.to_be_bytes().to_vec(),
                    format!("passage {i}").into_bytes(),
                )
            })
            .collect();
        let mut ids: Vec<(Vec<u8>, Vec<u8>)> = (0u64..1000)
            .map(|i| (format!("doc-{i}").into_bytes(), i.to_be_bytes().to_vec()))
            .collect();
        ids.sort();
        trees[Tree::Ids as usize] = ids;
        write(&path, &trees).unwrap();
        let store = FrozenStore::open(&path, None).unwrap();
        assert_eq!(store.len(Tree::Passages), 1000);
        assert_eq!(store.len(Tree::Deleted), 0);
        for i in [0u64, 1, 499, 999] {
            let v = store
                .get(Tree::Passages, &i.to_be_bytes())
                .unwrap()
                .unwrap();
            assert_eq!(v, format!("passage {i}").as_bytes());
            let ord = store
                .get(Tree::Ids, format!("doc-{i}").as_bytes())
                .unwrap()
                .unwrap();
            assert_eq!(ord, i.to_be_bytes());
        }
        assert!(store
            .get(Tree::Passages, &5000u64.to_be_bytes())
            .unwrap()
            .is_none());
        assert!(store.get(Tree::Ids, b"doc-x").unwrap().is_none());
        assert!(store.get(Tree::Deleted, b"").unwrap().is_none());
        assert_eq!(store.iter(Tree::Passages).count(), 1000);
        drop(store);

        // Truncated: the header names the file; a record past the end too.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let err = FrozenStore::open(&path, None).err().unwrap().to_string();
        assert!(err.contains(FILE) && err.contains("past the end"), "{err}");
        std::fs::write(&path, &bytes[..10]).unwrap();
        assert!(FrozenStore::open(&path, None).is_err());
        let mut bad = bytes.clone();
        // The first offset of the passages tree, made huge.
        let index_pos = u64::from_le_bytes(bad[16..24].try_into().unwrap()) as usize;
        bad[index_pos..index_pos + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        let store = FrozenStore::open(&path, None).unwrap();
        let err = store
            .iter(Tree::Passages)
            .next()
            .unwrap()
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("out of bounds"), "{err}");
    }

    #[test]
    fn with_block_checksums_only_the_blocks_read_are_checked() {
        use crate::integrity::{checksum_with_blocks, CHECK_BLOCK};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let mut trees: [Vec<(Vec<u8>, Vec<u8>)>; 7] = Default::default();
        // About 3 MiB of records: three full blocks and a partial one.
        trees[Tree::Passages as usize] = (0u64..3000)
            .map(|i| (i.to_be_bytes().to_vec(), vec![(i % 251) as u8; 1024]))
            .collect();
        write(&path, &trees).unwrap();
        let sum = checksum_with_blocks(&path).unwrap();
        assert_eq!(sum.blocks.len(), (sum.bytes as usize).div_ceil(CHECK_BLOCK));
        let intact = FrozenStore::open(&path, Some(&sum.blocks)).unwrap();
        for i in [0u64, 1500, 2999] {
            assert_eq!(
                intact
                    .get(Tree::Passages, &i.to_be_bytes())
                    .unwrap()
                    .unwrap()[0],
                (i % 251) as u8
            );
        }
        drop(intact);

        // A flipped byte in the last block: records in the first blocks read as before,
        // a record in the last block is an error naming the file and the block.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 100;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let store = FrozenStore::open(&path, Some(&sum.blocks)).unwrap();
        assert!(store
            .get(Tree::Passages, &0u64.to_be_bytes())
            .unwrap()
            .is_some());
        let err = store
            .get(Tree::Passages, &2999u64.to_be_bytes())
            .err()
            .unwrap()
            .to_string();
        let block = (bytes.len() - 1) / CHECK_BLOCK;
        assert!(
            err.contains(FILE) && err.contains(&format!("block {block} ")),
            "{err}"
        );
        // Checked whole (no block sums), the open itself does not look at the records.
        assert!(FrozenStore::open(&path, None).is_ok());
        // Block sums that do not fit the file's size.
        let err = FrozenStore::open(&path, Some(&sum.blocks[1..]))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("block checksums"), "{err}");
    }
}
