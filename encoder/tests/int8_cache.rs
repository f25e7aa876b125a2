//! The int8 encoder read back from `$CAPSTAN_HOME/encoder-cache` is the one quantized afresh:
//! the same vectors bit for bit; a damaged or foreign cache file is quantized again and
//! rewritten, never used. One test in its own process, as it sets `CAPSTAN_HOME`.

use std::path::PathBuf;

use candle_core::Device;
use capstan_encoder::{Encoder, EncoderOptions, EncoderPrecision};

/// The all-MiniLM-L6-v2 folder: `CAPSTAN_ENCODER`, else scripts/setup.sh's location.
fn encoder_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_ENCODER") {
        return dir.into();
    }
    capstan_encoder::capstan_home()
        .join("models")
        .join("all-MiniLM-L6-v2")
}

#[test]
fn the_cached_int8_encoder_equals_the_fresh_one_and_a_damaged_cache_is_rebuilt() {
    let dir = encoder_dir();
    let home = tempfile::tempdir().unwrap();
    // The folder is resolved first: from here on the cache goes to a fresh home.
    std::env::set_var("CAPSTAN_HOME", home.path());
    let load = || {
        let options = EncoderOptions {
            precision: EncoderPrecision::Int8,
            padded: false,
        };
        Encoder::load_with(&dir, &Device::Cpu, options)
            .unwrap_or_else(|e| panic!("{e} (run scripts/setup.sh first)"))
    };
    let texts = [
        "Who founded the Vujoul Institute?",
        "The river rises in the northern hills and flows south for 212 kilometres.",
        "x",
    ];

    let fresh = load();
    assert!(!fresh.int8_from_cache());
    let want = fresh.embed(&texts).unwrap();
    let cache_dir = home.path().join("encoder-cache");
    let files: Vec<PathBuf> = std::fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "one cache file, no temporary left: {files:?}"
    );

    let cached = load();
    assert!(cached.int8_from_cache());
    assert!(
        cached.embed(&texts).unwrap() == want,
        "cached vectors differ"
    );

    // One byte of the payload changed: the checksum refuses it, the encoder is quantized
    // again (the same vectors) and the file rewritten whole.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&files[0], &bytes).unwrap();
    let rebuilt = load();
    assert!(!rebuilt.int8_from_cache());
    assert!(rebuilt.embed(&texts).unwrap() == want);
    assert!(load().int8_from_cache());

    // A cut file, and a file of another format, are refused the same way.
    for damage in [bytes.len() / 2, 10] {
        std::fs::write(&files[0], &bytes[..damage]).unwrap();
        let again = load();
        assert!(!again.int8_from_cache());
        assert!(again.embed(&texts).unwrap() == want);
    }

    // Writing a cache file keeps the four most recently written: five older files of other
    // checkpoints (and an interrupted writer's temporary file) around a rewrite leave the new
    // file and three of them, the newest.
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    let mut others = Vec::new();
    for i in 0..5u64 {
        let path = cache_dir.join(format!("{i:016x}.int8"));
        std::fs::write(&path, b"another checkpoint's").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(long_ago + std::time::Duration::from_secs(i))
            .unwrap();
        others.push(path);
    }
    let stale = cache_dir.join(".tmp-1-2");
    std::fs::write(&stale, b"cut short").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    std::fs::remove_file(&files[0]).unwrap();
    assert!(!load().int8_from_cache());
    assert!(files[0].exists());
    let kept: Vec<bool> = others.iter().map(|p| p.exists()).collect();
    assert_eq!(kept, [false, false, true, true, true]);
    assert!(!stale.exists());
    assert!(load().int8_from_cache());

    // The f32 encoder neither reads nor writes the cache.
    std::fs::remove_dir_all(&cache_dir).unwrap();
    Encoder::load(&dir).unwrap();
    assert!(!cache_dir.exists());
}
