//! Extraction in a child process, under a time and an address-space bound:
//! a parser that panics, loops or allocates without end loses one file
//! (named, with what happened) and never the indexing run.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ExtractError, Extracted, Format};

/// How to run a child that extracts one file: `program args… FILE` must
/// print the JSON of `Result<Extracted, ExtractError>` on its standard
/// output (`capstan corpus extract --json FILE` does).
#[derive(Debug, Clone)]
pub struct ChildExtractor {
    /// The program (the running `capstan`, usually).
    pub program: PathBuf,
    /// Its arguments before the file's path.
    pub args: Vec<OsString>,
    /// The most one file may take.
    pub timeout: Duration,
    /// The child's address-space limit (`RLIMIT_AS`), in bytes.
    pub memory_limit_bytes: u64,
    /// The most of the child's answer this process reads: past it the child is stopped and
    /// the file refused (its text would be past any document bound anyway).
    pub max_output_bytes: u64,
}

impl ChildExtractor {
    /// The default bounds: 120 s and 4 GiB a file.
    pub const TIMEOUT: Duration = Duration::from_secs(120);
    /// See [`ChildExtractor::TIMEOUT`].
    pub const MEMORY_LIMIT_BYTES: u64 = 4 << 30;

    /// The bound on the child's answer for documents of at most `max_document_bytes` of text:
    /// JSON escapes a character in at most 6 bytes, and the layout adds little.
    pub fn output_bound(max_document_bytes: usize) -> u64 {
        6 * max_document_bytes as u64 + (1 << 20)
    }

    /// The largest file the child is given: a parser holds a file and its objects, some
    /// times its size, within [`ChildExtractor::memory_limit_bytes`].
    pub fn max_input_bytes(&self) -> u64 {
        self.memory_limit_bytes / 4
    }

    /// Extracts `path` (of `format`) in a child process.
    pub fn extract(&self, path: &Path, format: Format) -> Result<Extracted, ExtractError> {
        let crashed = |message: String| ExtractError::Crashed {
            format: format.name().into(),
            message,
        };
        let text_too_large = || ExtractError::TooLarge {
            format: format.name().into(),
            what: format!(
                "its text is past {} MiB (the bound on a document's text)",
                self.max_output_bytes >> 20
            ),
        };
        // A file the parser could not hold is refused unread.
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        if size > self.max_input_bytes() {
            return Err(ExtractError::TooLarge {
                format: format.name().into(),
                what: format!(
                    "{} MiB, past the {} MiB a file may be (a quarter of the parser's memory \
                     bound, --parse-memory-mb)",
                    size >> 20,
                    self.max_input_bytes() >> 20
                ),
            });
        }
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // Its own process group, so that a timeout stops whatever it started too.
            command.process_group(0);
            let limit = self.memory_limit_bytes;
            // SAFETY: setrlimit is async-signal-safe, and the closure touches
            // nothing but its own copy of `limit`.
            unsafe {
                command.pre_exec(move || {
                    let bound = libc::rlimit {
                        rlim_cur: limit as libc::rlim_t,
                        rlim_max: limit as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &bound) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command
            .spawn()
            .map_err(|e| crashed(format!("could not start {}: {e}", self.program.display())))?;
        // Each pipe is read up to a bound; one byte past it raises `over`, and the rest is
        // drained without being kept (the child is stopped then).
        let over = Arc::new(AtomicBool::new(false));
        let drain = |pipe: Option<Box<dyn Read + Send>>, bound: u64, raise: bool| {
            let over = over.clone();
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = (&mut pipe).take(bound + 1).read_to_end(&mut bytes);
                    if bytes.len() as u64 > bound {
                        if raise {
                            over.store(true, Ordering::SeqCst);
                        }
                        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                    }
                }
                bytes
            })
        };
        let stdout = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            self.max_output_bytes,
            true,
        );
        // The child's errors: their first MiB is plenty to say what happened.
        let stderr = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            1 << 20,
            false,
        );
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if over.load(Ordering::SeqCst) => {
                    kill_group(&mut child);
                    let _ = child.wait();
                    return Err(text_too_large());
                }
                Ok(None) if started.elapsed() >= self.timeout => {
                    kill_group(&mut child);
                    let _ = child.wait();
                    // The pipes' readers end when the group's last writer does.
                    return Err(ExtractError::TimedOut {
                        format: format.name().into(),
                        seconds: self.timeout.as_secs(),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(crashed(format!("waiting for the parser process: {e}"))),
            }
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
        if over.load(Ordering::SeqCst) {
            return Err(text_too_large());
        }
        if status.success() {
            return serde_json::from_slice::<Result<Extracted, ExtractError>>(&stdout)
                .map_err(|e| crashed(format!("unreadable answer from the parser process: {e}")))?;
        }
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        let message = if stderr.contains("has overflowed its stack") {
            "the parser overflowed its stack (the file nests its objects too deep)".to_string()
        } else if stderr.contains("memory allocation of") {
            format!(
                "ran out of memory (the bound is {} MiB a file): {last}",
                self.memory_limit_bytes >> 20
            )
        } else {
            match (status.code(), signal_of(&status)) {
                (Some(code), _) => format!("the parser process exited with status {code}: {last}"),
                (None, Some(signal)) => format!(
                    "the parser process was killed by signal {signal} ({} MiB of memory a file is the bound){}",
                    self.memory_limit_bytes >> 20,
                    if last.is_empty() { String::new() } else { format!(": {last}") }
                ),
                (None, None) => format!("the parser process failed: {last}"),
            }
        };
        Err(crashed(message))
    }
}

#[cfg(unix)]
fn kill_group(child: &mut std::process::Child) {
    // SAFETY: kill(2) with a negative pid signals the child's own process
    // group (made at spawn); it touches no memory.
    let _ = unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.kill();
}

#[cfg(not(unix))]
fn kill_group(child: &mut std::process::Child) {
    let _ = child.kill();
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A child that runs `script` under `sh` (the file's path is `$1`).
    fn shell(script: &str, timeout: Duration) -> ChildExtractor {
        ChildExtractor {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "sh".into()],
            timeout,
            memory_limit_bytes: ChildExtractor::MEMORY_LIMIT_BYTES,
            max_output_bytes: 1 << 20,
        }
    }

    fn run(script: &str, timeout: Duration) -> Result<Extracted, ExtractError> {
        shell(script, timeout).extract(Path::new("/no/such.pdf"), Format::Pdf)
    }

    #[test]
    fn an_answer_comes_back_through_the_pipe() {
        let got = run(
            r#"printf '{"Ok":{"title":null,"text":"hi","layout":{"page_starts":[0]}}}'"#,
            ChildExtractor::TIMEOUT,
        )
        .unwrap();
        assert_eq!(got.text, "hi");
        assert_eq!(got.layout.page_starts, [0]);
        let err = run(
            r#"printf '{"Err":{"Encrypted":{"format":"PDF"}}}'"#,
            ChildExtractor::TIMEOUT,
        )
        .unwrap_err();
        assert!(matches!(err, ExtractError::Encrypted { .. }), "{err}");
    }

    #[test]
    fn a_runaway_is_stopped_at_the_bound() {
        let started = Instant::now();
        let err = run("sleep 30", Duration::from_secs(1)).unwrap_err();
        assert!(
            matches!(err, ExtractError::TimedOut { seconds: 1, .. }),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_crash_or_an_allocation_failure_is_named() {
        let err = run(
            "echo 'thread panicked at parser.rs' >&2; kill -SEGV $$",
            ChildExtractor::TIMEOUT,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("signal 11 (4096 MiB") && err.contains("parser.rs"),
            "{err}"
        );
        let err = run(
            "echo 'memory allocation of 8589934592 bytes failed' >&2; kill -ABRT $$",
            ChildExtractor::TIMEOUT,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("ran out of memory (the bound is 4096 MiB"),
            "{err}"
        );
        let err = run("echo 'not json'", ChildExtractor::TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unreadable answer"), "{err}");
    }

    #[test]
    fn a_flood_of_output_a_stack_overflow_and_a_file_too_large_are_named() {
        // 5 MB of answer against a bound of 1 MiB: the child is stopped, the file refused.
        let err = run("head -c 5000000 /dev/zero", ChildExtractor::TIMEOUT).unwrap_err();
        assert!(
            matches!(&err, ExtractError::TooLarge { what, .. } if what.contains("past 1 MiB")),
            "{err}"
        );
        let err = run(
            "echo \"thread 'main' has overflowed its stack\" >&2; kill -ABRT $$",
            ChildExtractor::TIMEOUT,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("overflowed its stack (the file nests"),
            "{err}"
        );
        // A (sparse) file of 2 GiB against a bound of 1 GiB: refused before the child runs.
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.pdf");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        let child = ChildExtractor {
            memory_limit_bytes: 1 << 30,
            ..shell("echo ran >&2; exit 3", ChildExtractor::TIMEOUT)
        };
        let err = child.extract(&big, Format::Pdf).unwrap_err().to_string();
        assert!(
            err.contains("2048 MiB, past the 256 MiB a file may be") && !err.contains("ran"),
            "{err}"
        );
    }

    #[test]
    fn the_address_space_bound_applies_to_the_child() {
        // `ulimit -v` prints the child's bound in KiB.
        let probe = ChildExtractor {
            memory_limit_bytes: 512 << 20,
            ..shell("ulimit -v >&2; exit 3", ChildExtractor::TIMEOUT)
        };
        let err = probe
            .extract(Path::new("x"), Format::Pdf)
            .unwrap_err()
            .to_string();
        assert!(err.contains("status 3: 524288"), "{err}");
    }
}
