//! The bounds on parsing PDF, DOCX and EPUB files, shared by `index` and `corpus extract`:
//! each file is parsed in a child process (`capstan corpus extract --child`) under a time and
//! a memory bound, this process reads no more of its answer than a document may hold, and no
//! more files are parsed at once than the run's memory bound holds.

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
    /// The memory (MiB) the run's parser processes may use together, each counted at
    /// --parse-memory-mb plus the most of its answer read back: files are parsed one per
    /// core only as far as this holds them [default: half the machine's memory].
    #[arg(long)]
    pub memory_mb: Option<u64>,
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

    /// How many files are parsed at once: one per core, as far as [`ParseBounds::memory_mb`]
    /// holds their parsers; an error when it cannot hold one.
    pub fn parallel_files(&self) -> anyhow::Result<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let total = match self.memory_mb {
            Some(mb) => mb,
            None => physical_memory_mb().map_or(8 << 10, |mb| mb / 2),
        };
        files_at_once(total, self.per_file_mb(), cores)
    }

    /// What one parse may take: the parser's address space and the answer read back.
    fn per_file_mb(&self) -> u64 {
        self.parse_memory_mb.max(16)
            + ChildExtractor::output_bound(self.max_document_bytes).div_ceil(1 << 20)
    }
}

/// Parsers of `per_file` MiB at once within `total` MiB, at most one per core.
fn files_at_once(total: u64, per_file: u64, cores: usize) -> anyhow::Result<usize> {
    if per_file > total {
        anyhow::bail!(
            "--memory-mb {total} cannot hold the parse of one file: {per_file} MiB \
             (--parse-memory-mb and the most of its text read back, from --max-document-bytes); \
             raise --memory-mb or lower --parse-memory-mb"
        );
    }
    Ok(((total / per_file) as usize).clamp(1, cores.max(1)))
}

/// The machine's memory in MiB, from the operating system.
fn physical_memory_mb() -> Option<u64> {
    // SAFETY: sysconf only reads system constants.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page > 0).then(|| (pages as u64).saturating_mul(page as u64) >> 20)
}

#[cfg(test)]
mod tests {
    use super::files_at_once;

    #[test]
    fn files_are_parsed_at_once_only_as_far_as_the_memory_bound_holds() {
        // 4,096 MiB of parser and 97 MiB of answer a file.
        assert_eq!(files_at_once(12 << 10, 4193, 2).unwrap(), 2);
        assert_eq!(files_at_once(12 << 10, 4193, 16).unwrap(), 2);
        assert_eq!(files_at_once(64 << 10, 4193, 16).unwrap(), 15);
        assert_eq!(files_at_once(5000, 4193, 16).unwrap(), 1);
        let e = files_at_once(4000, 4193, 16).unwrap_err().to_string();
        assert!(
            e.contains("--memory-mb 4000 cannot hold the parse of one file: 4193 MiB"),
            "{e}"
        );
    }
}
