//! Shared by the indexer's integration tests.

use std::path::PathBuf;

/// The encoder folder: `CAPSTAN_ENCODER`, or where scripts/setup.sh puts it.
pub fn encoder_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_ENCODER") {
        return dir.into();
    }
    let home = std::env::var_os("CAPSTAN_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/capstan")
        });
    home.join("models/all-MiniLM-L6-v2")
}
