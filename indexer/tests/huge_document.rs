//! A huge document is chunked in bounded memory and linear time: words are
//! tokenized a window at a time (the whole document at once took 6 GB for
//! 50 MB) and character offsets are computed in one pass. Alone in its test
//! binary, so the process's peak memory is this test's.

use capstan_indexer::{ChunkParams, Chunker, Document};

mod common;
use common::encoder_dir;

/// Peak resident memory of this process so far, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

#[test]
fn a_20_mb_document_is_chunked_in_bounded_memory_and_time() {
    let tokenizer = tokenizers::Tokenizer::from_file(encoder_dir().join("tokenizer.json")).unwrap();
    let chunker = Chunker::new(&tokenizer, ChunkParams::default()).unwrap();
    // Varied words, some multi-byte, so offsets in bytes and characters differ.
    let words = [
        "lighthouse",
        "keeper",
        "Ærøskøbing",
        "glass-blower",
        "1843,",
        "naïve",
        "river",
        "the",
    ];
    let mut text = String::with_capacity(21 << 20);
    let mut i = 0usize;
    while text.len() < 20 << 20 {
        text.push_str(words[i % words.len()]);
        text.push(if i % 17 == 16 { '\n' } else { ' ' });
        i += 1;
    }
    let doc = Document {
        id: "huge".into(),
        title: "Huge".into(),
        text,
        metadata: None,
        ..Default::default()
    };
    let before = peak_rss();
    let started = std::time::Instant::now();
    let passages = chunker.chunk(&doc);
    let elapsed = started.elapsed();
    let grown = peak_rss().saturating_sub(before);
    let text_bytes: usize = passages.iter().map(|p| p.text.len()).sum();
    eprintln!(
        "{} passages in {elapsed:?}; peak memory grew {} MB for {} MB of passage text",
        passages.len(),
        grown >> 20,
        text_bytes >> 20
    );
    // The passages themselves are the output (about 1.15x the text with the
    // overlap); the work beside them is a window of words.
    assert!(
        grown < (text_bytes as u64) * 2 + (64 << 20),
        "peak memory grew {} MB",
        grown >> 20
    );
    // A bound, not a benchmark: linear work; the old offset cursor restarted
    // from the top of the document for every passage.
    assert!(elapsed.as_secs() < 240, "{elapsed:?}");
    // Offsets are exact, consecutive passages overlap, the last ends the text.
    let chars: Vec<usize> = doc.text.char_indices().map(|(b, _)| b).collect();
    for p in passages.iter().step_by(997) {
        let byte = chars[p.char_start];
        assert!(doc.text[byte..].starts_with(&p.text), "{}", p.id);
    }
    for pair in passages.windows(2) {
        assert!(pair[1].char_start < pair[0].char_end);
        assert!(pair[1].char_start > pair[0].char_start);
    }
    assert_eq!(
        passages.last().unwrap().char_end,
        doc.text.trim_end().chars().count()
    );
}
