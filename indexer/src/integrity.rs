//! The file table of a generation: every file's size and XXH3-64 checksum,
//! recorded in the manifest at publish and checked before any loader
//! (tantivy, hnsw_rs, sled) is given a byte.
//!
//! Why checksums and not only sizes: a flipped byte in a vector file or a
//! posting list is served as a different answer, silently; in hnsw_rs's graph
//! it can end the process (`process::exit`) before any error reaches us. XXH3
//! hashes at memory speed, so [`Index::open`](crate::Index::open) checks every
//! file it is about to load for the price of reading it once.
//!
//! A file read in place, a little at a time (`store.frozen`: a search reads the
//! few records of its hits), also has a checksum per [`CHECK_BLOCK`] bytes,
//! so that a reader checks the blocks it reads, when it first reads them,
//! and an open costs the same at any size.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Size and checksum of one file of a generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    /// Length in bytes.
    pub bytes: u64,
    /// XXH3-64 of the contents, 16 hex digits.
    pub xxh3: String,
    /// XXH3-64 of each [`CHECK_BLOCK`] bytes, 16 hex digits each, for files read in place
    /// ([`block_checked`]); empty for the others (and in manifests written before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<String>,
}

/// Bytes per block checksum.
pub const CHECK_BLOCK: usize = 1 << 20;

/// The frozen passage store's name in a generation (`crate::frozen_store::FILE`).
pub const FROZEN_STORE_FILE: &str = "store.frozen";

/// Files that get a checksum per block: those read in place, a few records at a time.
pub fn block_checked(relative: &str) -> bool {
    relative == FROZEN_STORE_FILE
}

/// Files of a generation by path relative to it (`/`-separated).
pub type FileTable = BTreeMap<String, FileSum>;

/// The manifest itself (its checksum lives in `CURRENT`), temporary files and
/// tantivy's lock files (created by writers, never read) are not listed.
fn listed(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative);
    relative != "manifest.json"
        && !name.ends_with(".tmp")
        && !(name.starts_with(".tantivy-") && name.ends_with(".lock"))
}

/// Sizes and checksums of every file below `gen`.
pub fn file_table(gen: &Path) -> Result<FileTable> {
    let mut table = FileTable::new();
    walk(gen, gen, &mut table)?;
    Ok(table)
}

fn walk(root: &Path, dir: &Path, table: &mut FileTable) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
            walk(root, &path, table)?;
            continue;
        }
        let relative = relative_name(root, &path);
        if listed(&relative) {
            let sum = if block_checked(&relative) {
                checksum_with_blocks(&path)?
            } else {
                checksum(&path)?
            };
            table.insert(relative, sum);
        }
    }
    Ok(())
}

fn relative_name(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Size and XXH3-64 of one file, read in 1 MiB blocks.
pub fn checksum(path: &Path) -> Result<FileSum> {
    sum_file(path, false)
}

/// [`checksum`], and the checksum of each [`CHECK_BLOCK`] bytes.
pub fn checksum_with_blocks(path: &Path) -> Result<FileSum> {
    sum_file(path, true)
}

fn sum_file(path: &Path, with_blocks: bool) -> Result<FileSum> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; CHECK_BLOCK];
    let mut bytes = 0u64;
    let mut blocks = Vec::new();
    loop {
        // A whole block, unless the file ends first.
        let mut n = 0;
        while n < buf.len() {
            match file.read(&mut buf[n..]).map_err(|e| Error::io(path, e))? {
                0 => break,
                got => n += got,
            }
        }
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if with_blocks {
            blocks.push(checksum_bytes(&buf[..n]));
        }
        bytes += n as u64;
        if n < buf.len() {
            break;
        }
    }
    Ok(FileSum {
        bytes,
        xxh3: format!("{:016x}", hasher.digest()),
        blocks,
    })
}

/// XXH3-64 of a byte string, 16 hex digits.
pub fn checksum_bytes(bytes: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// Which blocks of a file read in place have been checked against their checksums; each is
/// checked the first time any of its bytes is read.
#[derive(Debug)]
pub struct CheckedBlocks {
    sums: Vec<u64>,
    checked: Vec<std::sync::atomic::AtomicBool>,
}

impl CheckedBlocks {
    /// For a file of `bytes` bytes with block checksums `sums` (as [`FileSum::blocks`]);
    /// `Err` names what does not fit.
    pub fn new(bytes: usize, sums: &[String]) -> std::result::Result<Self, String> {
        if sums.len() != bytes.div_ceil(CHECK_BLOCK) {
            return Err(format!(
                "is {bytes} bytes, the manifest has {} block checksums",
                sums.len()
            ));
        }
        let sums = sums
            .iter()
            .map(|h| u64::from_str_radix(h, 16).map_err(|_| format!("block checksum `{h}`")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let checked = sums
            .iter()
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect();
        Ok(Self { sums, checked })
    }

    /// Checks the blocks of `data` (the whole file) that `range` touches and were not
    /// checked yet.
    pub fn check(
        &self,
        data: &[u8],
        range: std::ops::Range<usize>,
    ) -> std::result::Result<(), String> {
        use std::sync::atomic::Ordering;
        if range.is_empty() {
            return Ok(());
        }
        for b in range.start / CHECK_BLOCK..=(range.end - 1) / CHECK_BLOCK {
            if self.checked[b].load(Ordering::Acquire) {
                continue;
            }
            let (start, end) = (b * CHECK_BLOCK, ((b + 1) * CHECK_BLOCK).min(data.len()));
            let got = xxhash_rust::xxh3::xxh3_64(&data[start..end]);
            if got != self.sums[b] {
                return Err(format!(
                    "block {b} (bytes {start}..{end}) has checksum {got:016x}, the manifest says {:016x} (its bytes changed)",
                    self.sums[b]
                ));
            }
            self.checked[b].store(true, Ordering::Release);
        }
        Ok(())
    }
}

/// How thoroughly [`check`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Presence and sizes only (a `stat` per file).
    Sizes,
    /// Sizes, then every byte against its checksum.
    Checksums,
}

/// One file that does not match the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The damaged file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

/// Every listed file of `gen` that is missing, has another size or (at
/// [`Depth::Checksums`]) other contents. Empty when the generation is intact.
pub fn check(gen: &Path, table: &FileTable, depth: Depth) -> Vec<Damage> {
    let mut damage = Vec::new();
    for (name, want) in table {
        let path = gen.join(name);
        let problem = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("is missing".to_string()),
            Err(e) => Some(format!("cannot be read: {e}")),
            Ok(meta) if meta.len() != want.bytes => Some(format!(
                "is {} bytes long, the manifest says {}",
                meta.len(),
                want.bytes
            )),
            Ok(_) if depth == Depth::Sizes => None,
            Ok(_) => match checksum(&path) {
                Err(e) => Some(format!("cannot be read: {e}")),
                Ok(got) if got.xxh3 != want.xxh3 => Some(changed(&got.xxh3, &want.xxh3)),
                Ok(_) => None,
            },
        };
        if let Some(problem) = problem {
            damage.push(Damage { path, problem });
        }
    }
    damage
}

/// What [`check`] says of a file whose checksum is not the manifest's.
fn changed(got: &str, want: &str) -> String {
    format!("has checksum {got}, the manifest says {want} (its bytes changed)")
}

/// [`check`] for a file already in memory or mapped (`bytes`, all of `path`), so that a file
/// read in place is not read a second time to be checked.
pub fn check_in_place(path: &Path, bytes: &[u8], want: &FileSum) -> Result<()> {
    let got = checksum_bytes(bytes);
    if bytes.len() as u64 != want.bytes || got != want.xxh3 {
        return Err(Error::Damaged {
            path: path.to_path_buf(),
            message: changed(&got, &want.xxh3),
        });
    }
    Ok(())
}

/// The first damage as an error, with how many more files are damaged.
pub fn first_error(damage: Vec<Damage>) -> Result<()> {
    let more = damage.len().saturating_sub(1);
    match damage.into_iter().next() {
        None => Ok(()),
        Some(Damage { path, problem }) => {
            Err(Error::Damaged {
                path,
                message: if more > 0 {
                    format!("{problem} ({more} more damaged file(s); `capstan index verify` lists them)")
                } else {
                    problem
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_catches_missing_resized_and_changed_files() {
        let dir = tempfile::tempdir().unwrap();
        let gen = dir.path();
        std::fs::create_dir_all(gen.join("bm25")).unwrap();
        std::fs::write(gen.join("vectors.f32"), [1u8; 64]).unwrap();
        let frozen: Vec<u8> = (0..CHECK_BLOCK * 2 + 10).map(|i| (i % 251) as u8).collect();
        std::fs::write(gen.join(crate::frozen_store::FILE), &frozen).unwrap();
        std::fs::write(gen.join("bm25/meta.json"), b"{}").unwrap();
        std::fs::write(gen.join("bm25/.tantivy-writer.lock"), b"").unwrap();
        std::fs::write(gen.join("manifest.json"), b"{}").unwrap();
        let table = file_table(gen).unwrap();
        let names: Vec<&str> = table.keys().map(String::as_str).collect();
        assert_eq!(names, ["bm25/meta.json", "store.frozen", "vectors.f32"]);
        assert!(check(gen, &table, Depth::Checksums).is_empty());
        // Blocks for the file read in place only, each the checksum of its bytes.
        assert!(table["vectors.f32"].blocks.is_empty());
        let blocks = &table[crate::frozen_store::FILE].blocks;
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[2], checksum_bytes(&frozen[2 * CHECK_BLOCK..]));
        assert_eq!(
            table[crate::frozen_store::FILE].xxh3,
            checksum_bytes(&frozen)
        );

        let mut flipped = [1u8; 64];
        flipped[10] ^= 0x20;
        std::fs::write(gen.join("vectors.f32"), flipped).unwrap();
        assert!(check(gen, &table, Depth::Sizes).is_empty(), "same size");
        let damage = check(gen, &table, Depth::Checksums);
        assert_eq!(damage.len(), 1);
        assert!(damage[0].path.ends_with("vectors.f32"));
        assert!(damage[0].problem.contains("checksum"));

        std::fs::write(gen.join("vectors.f32"), [1u8; 60]).unwrap();
        std::fs::remove_file(gen.join("bm25/meta.json")).unwrap();
        let damage = check(gen, &table, Depth::Sizes);
        assert_eq!(damage.len(), 2);
        assert!(damage[0].problem.contains("is missing"));
        assert!(damage[1].problem.contains("60 bytes long"));
        let err = first_error(damage).unwrap_err().to_string();
        assert!(err.contains("meta.json") && err.contains("1 more"), "{err}");
    }
}
