//! The reader's likelihood of candidate answers (`LanguageModel::answer_likelihoods`), which
//! reads the prompt once and every candidate as a branch after it in one pass, equals teacher
//! forcing each whole sequence from scratch, for every Llama-family
//! shape of the tiny checkpoints (tied embeddings, grouped-query heads, Llama 3 RoPE, Qwen2
//! biases).

mod common;

use candle_core::Tensor;
use capstan_reader::{Cache, LanguageModel};
use common::tiny;

/// Log-probabilities of `answer`, then of any of `ends` after it, following `prompt`, by one
/// plain forward.
fn teacher_forced(lm: &LanguageModel, prompt: &[u32], answer: &[u32], ends: &[u32]) -> (f32, f32) {
    let model = lm.model();
    let mut ids = prompt.to_vec();
    ids.extend_from_slice(answer);
    ids.push(ends[0]);
    let input = Tensor::new(ids.as_slice(), model.device())
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut cache = Cache::new(model);
    let logits: Vec<Vec<f32>> = model
        .forward(&input, None, &mut cache)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap();
    let lp = |row: &[f32], ts: &[u32]| {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|x| (x - max).exp()).sum();
        let picked: f32 = ts.iter().map(|&t| (row[t as usize] - max).exp()).sum();
        picked.ln() - sum.ln()
    };
    let mut total = 0.0;
    for (j, &t) in answer.iter().enumerate() {
        total += lp(&logits[prompt.len() - 1 + j], &[t]);
    }
    let end_lp = lp(&logits[prompt.len() - 1 + answer.len()], ends);
    (total, end_lp)
}

#[test]
fn candidates_scored_from_a_shared_prompt_equal_teacher_forcing_each_alone() {
    for name in [
        "llama-tied",
        "llama-abf-tiny",
        "llama3-rope-tiny",
        "qwen2-tiny",
    ] {
        let (_dir, lm) = tiny(name);
        assert!(!lm.uses_chat_template(), "{name}");
        let prompt = lm.encode("t5 t17 t42 t99 t7 t8 t120 t33").unwrap();
        let answers = ["t9", "t200 t201 t202", "t17 t42", ""];
        let scored = lm.answer_likelihoods(&prompt, &answers).unwrap();
        assert_eq!(scored.len(), answers.len());
        // The word-level vocabulary has no line break: an answer ends at any stop token.
        let ends = lm.stop_ids().to_vec();
        for (a, s) in answers.iter().zip(&scored) {
            if a.is_empty() {
                assert_eq!(s.tokens, 0);
                assert_eq!(s.logprob, f32::NEG_INFINITY, "{name}: an empty answer");
                continue;
            }
            let ids = lm.encode(a).unwrap();
            let (want, want_end) = teacher_forced(&lm, &prompt, &ids, &ends);
            assert_eq!(s.tokens, ids.len());
            assert!(
                (s.logprob - want).abs() < 1e-3 && (s.end - want_end).abs() < 1e-3,
                "{name} {a:?}: {s:?} vs {want} / {want_end}"
            );
            assert!(s.first <= 0.0 && s.logprob <= s.first + 1e-6);
        }
        // The order of the answers does not change any answer's score.
        let reversed: Vec<&str> = answers.iter().rev().copied().collect();
        let again = lm.answer_likelihoods(&prompt, &reversed).unwrap();
        for (a, b) in scored.iter().zip(again.iter().rev()) {
            assert!(
                (a.logprob - b.logprob).abs() < 1e-4 || a.tokens == 0,
                "{name}"
            );
        }
    }
}

#[test]
fn a_windowed_pattern_scores_each_candidate_from_its_own_copy_of_the_prompt() {
    let (_dir, mut lm) = tiny("llama3-rope-tiny");
    lm.model_mut()
        .set_attention(capstan_reader::AttentionPattern::Zebra {
            every: 2,
            window: 4,
        })
        .unwrap();
    let prompt = lm.encode("t5 t17 t42 t99 t7 t8 t120 t33 t64 t2").unwrap();
    let answers = ["t9 t10", "t17 t42 t99 t100 t3"];
    let scored = lm.answer_likelihoods(&prompt, &answers).unwrap();
    let ends = lm.stop_ids().to_vec();
    for (a, s) in answers.iter().zip(&scored) {
        let ids = lm.encode(a).unwrap();
        let (want, want_end) = teacher_forced(&lm, &prompt, &ids, &ends);
        assert!(
            (s.logprob - want).abs() < 1e-3 && (s.end - want_end).abs() < 1e-3,
            "{a:?}: {s:?} vs {want} / {want_end}"
        );
    }
}

#[test]
fn an_empty_prompt_is_refused() {
    let (_dir, lm) = tiny("llama-tied");
    assert!(lm.answer_likelihoods(&[], &["t1"]).is_err());
}
