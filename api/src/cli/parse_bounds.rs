//! The bounds on parsing one PDF, DOCX or EPUB file, shared by `index` and `corpus extract`:
//! each file is parsed in a child process (`capstan corpus extract --child`) under a time and
//! a memory bound, and this process reads no more of its answer than a document may hold.

use anyhow::Context as _;
use capstan_indexer::{ChildExtractor, ReadOptions};
use clap::Args;

/// Flags bounding the parse of one file.
#[derive(Debug, Clone, Args)]
pub struct ParseBounds {
    /// Largest document in bytes (its JSONL line or file, or the text of a PDF,
    /// DOCX or EPUB); a larger one is an error naming it, or skipped with
    /// --skip-bad [default: 16 MiB].
    #[arg(long, default_value_t = ReadOptions::MAX_DOCUMENT_BYTES)]
    pub max_document_bytes: usize,
    /// The most seconds one PDF, DOCX or EPUB file may take to parse; each is
    /// parsed in a child process, stopped past this.
    #[arg(long, default_value_t = ChildExtractor::TIMEOUT.as_secs())]
    pub parse_timeout: u64,
    /// The memory (address space, MiB) a file's parser process may use; a file
    /// larger than a quarter of it is refused unread.
    #[arg(long, default_value_t = ChildExtractor::MEMORY_LIMIT_BYTES >> 20)]
    pub parse_memory_mb: u64,
}

impl ParseBounds {
    /// The child process that parses a file under these bounds.
    pub fn extractor(&self) -> anyhow::Result<ChildExtractor> {
        Ok(ChildExtractor {
            program: std::env::current_exe()
                .context("finding the capstan binary to parse files with")?,
            args: ["corpus", "extract", "--child"].map(Into::into).to_vec(),
            timeout: std::time::Duration::from_secs(self.parse_timeout.max(1)),
            memory_limit_bytes: self.parse_memory_mb.max(16) << 20,
            max_output_bytes: ChildExtractor::output_bound(self.max_document_bytes),
        })
    }
}
