//! No passage is truncated by the encoder: what it embeds, `title + ". " +
//! passage` with its special tokens, fits its window whole, for short, long
//! and absent titles.

use capstan_indexer::{ChunkParams, Chunker, Document, Encoder};

mod common;

#[test]
fn every_passage_fits_the_encoder_window_with_its_title() {
    let encoder = Encoder::load(&common::encoder_dir()).unwrap();
    let window = encoder.info().max_tokens;
    let mut untruncated = encoder.tokenizer().clone();
    untruncated.with_truncation(None).unwrap();
    // Dense text: numbers, hyphenation and rare words make several tokens a word.
    let text: String = (0..3000)
        .map(|i| format!("word{i} re-entrant x{}y Ærøskøbing, ", i * 7919))
        .collect();
    let titles = [
        String::new(),
        "Short".to_string(),
        "A considerably longer title about glass-blowing in nineteenth-century Dorvize".into(),
        "t-i-t-l-e ".repeat(40),
    ];
    for params in [
        ChunkParams::default(),
        ChunkParams {
            chunk_tokens: 512,
            overlap: 32,
        },
    ] {
        let chunker = Chunker::for_encoder(&encoder, params).unwrap();
        for title in &titles {
            let doc = Document {
                id: "d".into(),
                title: title.clone(),
                text: text.clone(),
                metadata: None,
                ..Default::default()
            };
            let passages = chunker.chunk(&doc);
            assert!(passages.len() > 10);
            let mut longest = 0;
            for p in &passages {
                let tokens = untruncated.encode(p.embedding_text(), true).unwrap().len();
                longest = longest.max(tokens);
                // A title that leaves less than 32 tokens is cut instead.
                if title.len() < 100 {
                    assert!(
                        tokens <= window,
                        "{params:?}, title {title:?}: passage {} embeds as {tokens} tokens > {window}",
                        p.id
                    );
                }
            }
            // Passages are as full as the window allows, not needlessly short.
            if title.len() < 100 {
                assert!(longest + 8 >= window.min(params.chunk_tokens), "{longest}");
            }
        }
    }
}
