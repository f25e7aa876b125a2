//! Durable file operations: an index folder must survive `kill -9` at any
//! instant with its previous generation intact.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` through a temporary file, fsync and rename.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    file.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    file.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Flushes a folder's entries (new, renamed files) to disk.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Fsyncs every file below `dir`, then the folders themselves.
pub fn sync_tree(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
            sync_tree(&path)?;
        } else {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&path, e))?;
        }
    }
    sync_dir(dir)
}

/// Copies a folder tree.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        if entry.file_type().map_err(|e| Error::io(&src, e))?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            copy_file(&src, &dst)?;
        }
    }
    Ok(())
}

/// Copies one file; an error names the side that failed (on a full disk,
/// the file being written, not the one being read).
fn copy_file(src: &Path, dst: &Path) -> Result<()> {
    let mut from = File::open(src).map_err(|e| Error::io(src, e))?;
    let mut to = File::create(dst).map_err(|e| Error::io(dst, e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        use std::io::Read;
        let n = from.read(&mut buf).map_err(|e| Error::io(src, e))?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).map_err(|e| Error::io(dst, e))?;
    }
}
