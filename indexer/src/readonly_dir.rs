//! A tantivy directory that never writes: published generations are
//! immutable, so searching one needs no lock file, and a read-only copy of an
//! index (a read-only mount, an immutable snapshot) searches like any other.
//!
//! tantivy's reader takes its meta lock by creating `.tantivy-meta.lock` so
//! that a concurrent writer's garbage collection cannot delete files it is
//! loading. Nobody writes a published generation, so the lock guards nothing
//! here and is granted without touching the disk.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, WatchCallback, WatchHandle, WritePtr,
};

/// [`MmapDirectory`] for reading only.
#[derive(Debug, Clone)]
pub struct ReadOnlyDirectory {
    inner: MmapDirectory,
}

impl ReadOnlyDirectory {
    /// Opens `dir` without writing to it.
    pub fn open(dir: &Path) -> tantivy::Result<Self> {
        Ok(Self {
            inner: MmapDirectory::open(dir)?,
        })
    }
}

fn read_only(path: &Path) -> Arc<io::Error> {
    Arc::new(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{}: a published index generation is read-only",
            path.display()
        ),
    ))
}

impl Directory for ReadOnlyDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        Err(DeleteError::IoError {
            io_error: read_only(path),
            filepath: path.to_path_buf(),
        })
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        Err(OpenWriteError::IoError {
            io_error: read_only(path),
            filepath: path.to_path_buf(),
        })
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, _data: &[u8]) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            read_only(path).to_string(),
        ))
    }

    fn sync_directory(&self) -> io::Result<()> {
        Ok(())
    }

    fn acquire_lock(&self, _lock: &Lock) -> Result<DirectoryLock, LockError> {
        Ok(DirectoryLock::from(Box::new(PathBuf::new())))
    }

    fn watch(&self, _callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        Ok(WatchHandle::empty())
    }
}
