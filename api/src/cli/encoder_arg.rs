//! Where the dense encoder comes from: `--encoder`, `CAPSTAN_ENCODER`, or the
//! folder `scripts/setup.sh` fills.

use std::path::PathBuf;

/// The default encoder folder: `$CAPSTAN_HOME/models/all-MiniLM-L6-v2`, with
/// `CAPSTAN_HOME` defaulting to `~/.cache/capstan`.
pub fn default_encoder() -> PathBuf {
    capstan_home().join("models").join("all-MiniLM-L6-v2")
}

/// Capstan's cache folder.
pub fn capstan_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CAPSTAN_HOME") {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("capstan")
}
