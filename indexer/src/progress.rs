//! Progress reporting of long stages (reading a corpus, encoding, building an index), shared
//! by every stage that reports.

/// Reports the progress of long stages (the CLI draws bars with it).
pub trait Progress: Sync {
    /// A stage of `total` units begins.
    fn stage(&self, name: &str, total: u64);
    /// `n` more units are done.
    fn advance(&self, n: u64);
    /// The current stage is over.
    fn finish(&self);
}

/// Progress reporting that reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}
