//! The int8 encoder kept on disk: quantizing a checkpoint (copying and transposing its
//! weights, one f32 pass over the calibration text, SmoothQuant per layer) takes about a
//! third of a second on 2 cores, most of a one-shot `capstan ask`'s start, and gives the same
//! arrays every time for the same checkpoint on the same CPU. The first load writes them to
//! `$CAPSTAN_HOME/encoder-cache/`; later loads read them back.
//!
//! A cache file is named by a hash of its key and holds the key itself: the weights file's
//! canonical path, size and modification time (the prompt cache's rule: a checkpoint replaced
//! in place gets a new time), the sha256 of config.json, the calibration text and the CPU's
//! vector extensions (the calibration pass's f32 sums, and so the int8 scales, follow the
//! kernels the CPU runs). The payload is checked against its xxh3 before use. A file that is
//! missing, for another key, damaged or unreadable is not an error: the encoder is quantized
//! afresh and the file written again (atomically: a temporary file renamed into place).

use std::io::Write;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

/// Cache files kept in the folder: writing one removes the least recently written past these
/// (an encoder whose file went is quantized again once), so that checkpoints replaced or
/// tried over time do not fill the disk at ~60 MB each.
pub(crate) const KEEP_FILES: usize = 4;

/// The first bytes of a cache file; the number is the format's version.
const MAGIC: &[u8] = b"capstan int8 encoder 1\n";

/// `$CAPSTAN_HOME`, else `~/.cache/capstan`: where Capstan keeps what it downloads and
/// caches (models, prompt and encoder caches).
pub fn capstan_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CAPSTAN_HOME") {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("capstan")
}

/// What identifies the file at `path` for a cache: its canonical path, size and modification
/// time in nanoseconds (`PATH|SIZE|NANOS`; a file replaced in place gets a new time), or `None`
/// where the file or its time cannot be read.
pub fn file_identity(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    let canonical = std::fs::canonicalize(path).ok()?;
    Some(format!("{}|{}|{modified}", canonical.display(), meta.len()))
}

/// Where an int8 encoder's arrays are kept, and what identifies them.
pub(crate) struct CacheFile {
    path: PathBuf,
    key: String,
}

impl CacheFile {
    /// The cache file of the checkpoint whose weights are `weights`, or `None` where the file
    /// cannot be identified (no metadata or modification time).
    pub(crate) fn for_checkpoint(
        weights: &Path,
        config_sha256: &str,
        calibration: &[&str],
    ) -> Option<Self> {
        let key = format!(
            "{}|config {config_sha256}|calibration {:016x}|cpu {}",
            file_identity(weights)?,
            xxh3_64(calibration.join("\n").as_bytes()),
            cpu_extensions(),
        );
        let path = capstan_home()
            .join("encoder-cache")
            .join(format!("{:016x}.int8", xxh3_64(key.as_bytes())));
        Some(Self { path, key })
    }

    /// The file, mapped, when it exists, is for this key and its payload is whole;
    /// [`CachedPayload::bytes`] gives the payload.
    pub(crate) fn read(&self) -> Option<CachedPayload> {
        let file = std::fs::File::open(&self.path).ok()?;
        // SAFETY: read-only; the file is only ever replaced by a rename, never written in
        // place, so the mapped bytes do not change under us.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let rest = map.strip_prefix(MAGIC)?;
        let mut r = ArrayReader::new(rest);
        let key = r.bytes_of("key").ok()?;
        if key != self.key.as_bytes() {
            return None;
        }
        let sum = r.u64("checksum").ok()?;
        let start = MAGIC.len() + r.at;
        (xxh3_64(&map[start..]) == sum).then_some(CachedPayload { map, start })
    }

    /// Writes `payload` under this key (best effort: a cache that cannot be written only
    /// costs the next load its time).
    pub(crate) fn write(&self, payload: &[u8]) {
        let _ = self.try_write(payload);
    }

    fn try_write(&self, payload: &[u8]) -> std::io::Result<()> {
        let dir = self.path.parent().expect("the cache file is in a folder");
        std::fs::create_dir_all(dir)?;
        let mut head = ArrayWriter::default();
        head.bytes(self.key.as_bytes());
        head.u64(xxh3_64(payload));
        let mut tmp = tempfile_in(dir)?;
        tmp.1.write_all(MAGIC)?;
        tmp.1.write_all(&head.out)?;
        tmp.1.write_all(payload)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp.0);
        })?;
        prune(dir);
        Ok(())
    }
}

/// Removes from `dir` the cache files past the [`KEEP_FILES`] most recently written, and
/// temporary files an interrupted writer left more than an hour ago.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut caches = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".int8") {
            caches.push((modified, path));
        } else if name.starts_with(".tmp-")
            && now
                .duration_since(modified)
                .is_ok_and(|age| age.as_secs() > 3600)
        {
            let _ = std::fs::remove_file(path);
        }
    }
    caches.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, path) in caches.into_iter().skip(KEEP_FILES) {
        let _ = std::fs::remove_file(path);
    }
}

/// A cache file's checked payload, still mapped.
pub(crate) struct CachedPayload {
    map: memmap2::Mmap,
    start: usize,
}

impl CachedPayload {
    /// The payload's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map[self.start..]
    }
}

/// A new file in `dir` with a name no other writer picks.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let path = dir.join(format!(".tmp-{}-{nanos}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// The vector extensions the encoder's kernels choose between.
fn cpu_extensions() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let mut s = String::from("x86_64");
        for (name, on) in [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            (
                "avx512vnni",
                std::arch::is_x86_feature_detected!("avx512vnni"),
            ),
        ] {
            if on {
                s.push('+');
                s.push_str(name);
            }
        }
        s
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// Arrays written one after another, each its length (u64) and its little-endian values.
#[derive(Default)]
pub(crate) struct ArrayWriter {
    pub(crate) out: Vec<u8>,
}

impl ArrayWriter {
    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.out.extend_from_slice(v);
    }

    pub(crate) fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        v.iter()
            .for_each(|x| self.out.extend_from_slice(&x.to_le_bytes()));
    }

    pub(crate) fn i32s(&mut self, v: &[i32]) {
        self.u64(v.len() as u64);
        v.iter()
            .for_each(|x| self.out.extend_from_slice(&x.to_le_bytes()));
    }

    pub(crate) fn i8s(&mut self, v: &[i8]) {
        self.u64(v.len() as u64);
        self.out.extend(v.iter().map(|&x| x as u8));
    }
}

/// Reads back what an [`ArrayWriter`] wrote, in the same order; every error names the array.
pub(crate) struct ArrayReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> ArrayReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Errors unless every byte was read.
    pub(crate) fn finish(&self) -> Result<(), String> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(format!("{n} bytes past the last array")),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("{what}: the file ends"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// An array's bytes, `width` bytes a value; with `want`, its length must be that.
    fn values(
        &mut self,
        width: usize,
        want: Option<usize>,
        what: &str,
    ) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.u64(what)?).map_err(|_| format!("{what}: too long"))?;
        if let Some(want) = want.filter(|&w| w != n) {
            return Err(format!("{what}: {n} values, the config asks {want}"));
        }
        let bytes = n
            .checked_mul(width)
            .ok_or_else(|| format!("{what}: too long"))?;
        self.take(bytes, what)
    }

    fn bytes_of(&mut self, what: &str) -> Result<&'a [u8], String> {
        self.values(1, None, what)
    }

    pub(crate) fn f32s(&mut self, want: Option<usize>, what: &str) -> Result<Vec<f32>, String> {
        self.words(want, what, f32::from_le_bytes)
    }

    pub(crate) fn i32s(&mut self, what: &str) -> Result<Vec<i32>, String> {
        self.words(None, what, i32::from_le_bytes)
    }

    /// An array of 4-byte little-endian values, each decoded by `from_le`.
    fn words<T>(
        &mut self,
        want: Option<usize>,
        what: &str,
        from_le: fn([u8; 4]) -> T,
    ) -> Result<Vec<T>, String> {
        Ok(self
            .values(4, want, what)?
            .chunks_exact(4)
            .map(|c| from_le(c.try_into().expect("4 bytes")))
            .collect())
    }

    pub(crate) fn i8s(&mut self, what: &str) -> Result<Vec<i8>, String> {
        Ok(self
            .values(1, None, what)?
            .iter()
            .map(|&b| b as i8)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_read_back_as_written_and_a_short_file_names_its_array() {
        let mut w = ArrayWriter::default();
        w.f32s(&[1.5, -0.0, f32::MIN_POSITIVE]);
        w.i32s(&[i32::MIN, 7]);
        w.i8s(&[-127, 0, 127]);
        w.u64(42);
        let mut r = ArrayReader::new(&w.out);
        assert_eq!(
            r.f32s(Some(3), "a").unwrap(),
            vec![1.5, -0.0, f32::MIN_POSITIVE]
        );
        assert_eq!(r.i32s("b").unwrap(), vec![i32::MIN, 7]);
        assert_eq!(r.i8s("c").unwrap(), vec![-127, 0, 127]);
        assert_eq!(r.u64("d").unwrap(), 42);
        r.finish().unwrap();

        let mut r = ArrayReader::new(&w.out);
        assert_eq!(
            r.f32s(Some(4), "a").unwrap_err(),
            "a: 3 values, the config asks 4"
        );
        let cut = &w.out[..w.out.len() - 9];
        let mut r = ArrayReader::new(cut);
        r.f32s(None, "a").unwrap();
        r.i32s("b").unwrap();
        assert_eq!(r.i8s("c").unwrap_err(), "c: the file ends");
        // A length past the end of memory is an error, not an overflow.
        let mut huge = ArrayWriter::default();
        huge.u64(u64::MAX / 2);
        assert!(ArrayReader::new(&huge.out).f32s(None, "x").is_err());
    }
}
