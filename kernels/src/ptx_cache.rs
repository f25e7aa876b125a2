//! NVRTC's output kept on disk between processes: a module's PTX is compiled once per source,
//! architecture, options and NVRTC version on a machine, not once per process (the decoding
//! step's modules take NVRTC seconds each, and every process of a server or of a benchmark run
//! would pay them at its first step).
//!
//! The directory is `$CAPSTAN_PTX_CACHE`, else `$HOME/.cache/capstan/ptx`; `CAPSTAN_PTX_CACHE=off`
//! turns the cache off. A file is named by its module and a hash of everything its PTX depends
//! on, written to a temporary name and renamed (concurrent processes never read half a file),
//! and ends with a marker line that a read checks; a file that fails the check, or cannot be
//! read or written, is compiled again — the cache never stops a launch.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The last line of every cached file: a file without it was cut short.
const COMPLETE: &str = "// capstan ptx cache: complete\n";

/// FNV-1a, 64 bits: stable across Rust releases (std's hasher is not), and enough to tell
/// sources apart in a cache keyed also by module name.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The cache directory this process uses, if any.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn directory() -> Option<PathBuf> {
    directory_from(
        std::env::var_os("CAPSTAN_PTX_CACHE"),
        std::env::var_os("HOME"),
    )
}

/// The cache directory for these values of `CAPSTAN_PTX_CACHE` and `HOME`.
fn directory_from(setting: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    match setting {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => home.map(|h| Path::new(&h).join(".cache/capstan/ptx")),
    }
}

/// The PTX of `module` whose output depends on `key` (its source, architecture, options,
/// compiler version): read from `dir` when a complete file is there, else `compile`d and
/// written there.
pub(crate) fn cached<E>(
    dir: Option<&Path>,
    module: &str,
    key: &[&str],
    compile: impl FnOnce() -> Result<String, E>,
) -> Result<String, E> {
    let Some(dir) = dir else {
        return compile();
    };
    let mut parts = vec![module];
    parts.extend_from_slice(key);
    let path = dir.join(format!("{module}-{:016x}.ptx", fnv1a(&parts)));
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some(ptx) = text.strip_suffix(COMPLETE) {
            return Ok(ptx.to_string());
        }
    }
    let ptx = compile()?;
    // Best effort: a cache that cannot be written costs the next process a compilation.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, format!("{ptx}{COMPLETE}")))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(ptx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn compiles_once_then_reads_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Cell::new(0);
        let compile = || -> Result<String, ()> {
            calls.set(calls.get() + 1);
            Ok(format!(".version 8.8\n// ptx {}\n", calls.get()))
        };
        let key = ["source text", "compute_90", "-default-device", "13.0"];
        let first = cached(Some(dir.path()), "decode_step", &key, compile).unwrap();
        let again = cached(Some(dir.path()), "decode_step", &key, compile).unwrap();
        assert_eq!((first.as_str(), calls.get()), (again.as_str(), 1));
        // Another source, architecture or compiler version, or another module: compiled.
        for other in [
            ["changed source", "compute_90", "-default-device", "13.0"],
            ["source text", "compute_80", "-default-device", "13.0"],
            ["source text", "compute_90", "-default-device", "12.8"],
        ] {
            cached(Some(dir.path()), "decode_step", &other, compile).unwrap();
        }
        cached(Some(dir.path()), "rope", &key, compile).unwrap();
        assert_eq!(calls.get(), 5);
        // No temporary files left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| n.ends_with(".ptx")), "{names:?}");
        assert_eq!(names.len(), 5);
    }

    #[test]
    fn a_file_cut_short_is_compiled_again_and_errors_are_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let key = ["source"];
        let ptx = cached(Some(dir.path()), "m", &key, || {
            Ok::<_, ()>("full ptx\n".into())
        })
        .unwrap();
        let file = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::write(&file, &ptx[..4]).unwrap();
        let again = cached(Some(dir.path()), "m", &key, || {
            Ok::<_, ()>("new ptx\n".into())
        });
        assert_eq!(again.unwrap(), "new ptx\n");
        // A failed compilation writes nothing; the next call compiles again.
        let dir = tempfile::tempdir().unwrap();
        assert!(cached(Some(dir.path()), "m", &key, || Err::<String, _>("nvrtc")).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).map_or(0, |d| d.count()), 0);
        // No directory (the cache off): every call compiles.
        assert_eq!(
            cached(None, "m", &key, || Ok::<_, ()>("x".into())).unwrap(),
            "x"
        );
    }

    #[test]
    fn the_directory_follows_the_setting() {
        let v = |s: &str| Some(OsString::from(s));
        assert_eq!(directory_from(v("off"), v("/h")), None);
        assert_eq!(directory_from(v("/tmp/p"), v("/h")), Some("/tmp/p".into()));
        let default = Some(PathBuf::from("/h/.cache/capstan/ptx"));
        assert_eq!(directory_from(None, v("/h")), default);
        assert_eq!(directory_from(v(""), v("/h")), default);
        assert_eq!(directory_from(None, None), None);
    }

    #[test]
    fn an_unwritable_directory_still_gives_the_ptx() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not a directory");
        std::fs::write(&file, "").unwrap();
        let ptx = cached(Some(&file), "m", &["k"], || Ok::<_, ()>("ptx".into()));
        assert_eq!(ptx.unwrap(), "ptx");
    }
}
