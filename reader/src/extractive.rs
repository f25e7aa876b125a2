//! The extractive reader: answers with the sentence of the retrieved passages
//! closest to the question in the dense encoder's space, and cites its
//! passage. It needs no generative weights and never generates text.
//!
//! Sentence vectors normally come precomputed from the index (one question
//! embedding and a few dot products per answer); passages without them are
//! split and embedded on the spot.

use std::sync::Arc;

use capstan_encoder::{dot, normalize, sentence_embedding_text, sentence_spans, Encoder};

use crate::error::Result;

/// A passage as the extractive reader sees it.
#[derive(Debug, Clone, Copy)]
pub struct ExtractivePassage<'a> {
    /// Title of the passage's document (sentences are embedded as `title. sentence`).
    pub title: &'a str,
    /// Passage text.
    pub text: &'a str,
    /// Its sentences as byte spans of `text` with unit vectors, or `None`
    /// when the index holds none (they are then computed here).
    pub sentences: Option<&'a [(u32, u32, &'a [f32])]>,
}

/// One scored sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredSentence {
    /// Index of its passage in the input.
    pub passage: usize,
    /// Byte offset of the sentence in the passage text.
    pub start: usize,
    /// Byte offset one past its end.
    pub end: usize,
    /// Cosine similarity to the question.
    pub score: f32,
}

/// The extractive reader.
#[derive(Clone)]
pub struct ExtractiveReader {
    encoder: Arc<Encoder>,
}

impl ExtractiveReader {
    /// A reader ranking sentences with `encoder` (the index's encoder).
    pub fn new(encoder: Arc<Encoder>) -> Self {
        Self { encoder }
    }

    /// Sentences of `passages` ranked by similarity to the unit question
    /// vector, best first (ties: earlier passage, earlier sentence).
    pub fn rank(
        &self,
        question: &[f32],
        passages: &[ExtractivePassage<'_>],
    ) -> Result<Vec<ScoredSentence>> {
        let mut ranked = Vec::new();
        let mut missing: Vec<(usize, usize, usize)> = Vec::new();
        for (pi, p) in passages.iter().enumerate() {
            match p.sentences {
                Some(sentences) if !sentences.is_empty() => {
                    for &(start, end, v) in sentences {
                        ranked.push(ScoredSentence {
                            passage: pi,
                            start: start as usize,
                            end: end as usize,
                            score: dot(question, v),
                        });
                    }
                }
                _ => missing.extend(sentence_spans(p.text).into_iter().map(|(s, e)| (pi, s, e))),
            }
        }
        if !missing.is_empty() {
            let texts: Vec<String> = missing
                .iter()
                .map(|&(pi, s, e)| {
                    sentence_embedding_text(passages[pi].title, &passages[pi].text[s..e])
                })
                .collect();
            let vectors = self.encoder.embed(&texts)?;
            for (&(pi, start, end), mut v) in missing.iter().zip(vectors) {
                normalize(&mut v);
                ranked.push(ScoredSentence {
                    passage: pi,
                    start,
                    end,
                    score: dot(question, &v),
                });
            }
        }
        ranked.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(a.passage.cmp(&b.passage))
                .then(a.start.cmp(&b.start))
        });
        Ok(ranked)
    }
}
