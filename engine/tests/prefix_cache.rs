//! The prefix cache behind the scheduler: a prompt, a CAPE passage or a SelfExtend prefix read
//! before is read from the cache, never again, and answers and scores exactly as a fresh read
//! does; cached blocks make room for new sequences without disturbing running ones, and a
//! one-shot run's cache kept on disk starts the next run unless it is damaged or another
//! model's.

mod common;

use std::sync::Arc;

use candle_core::Device;
use capstan_engine::scheduler::Event;
use capstan_engine::{Scheduler, SchedulerSettings};
use capstan_reader::{GenerationParams, LanguageModel, Request};
use common::{alone, decoder_request, f32_options, prompt, run, smollm2, tiny};

#[test]
fn a_prompt_read_before_starts_from_its_cached_prefix_and_answers_the_same() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let base = prompt(7, 200, 384);
    let mut shared = base[..150].to_vec();
    shared.extend(prompt(8, 40, 384));
    let params = GenerationParams::greedy(8);
    let want_base = alone(&lm, &decoder_request(&base), &params);
    let want_shared = alone(&lm, &decoder_request(&shared), &params);
    let scheduler = Scheduler::start("test", Arc::new(lm), SchedulerSettings::default());
    assert_eq!(run(&scheduler, &base, &params), want_base);
    let s = scheduler.stats();
    assert_eq!((s.prefix_hit_tokens, s.prefix_cached_tokens), (0, 192));
    // The same prompt again: the whole blocks that leave STABLE_CHUNK_ROWS tokens to read.
    let stable = capstan_reader::STABLE_CHUNK_ROWS;
    let blocks = |len: usize, shared: usize| ((len - stable) / 64).min(shared / 64) * 64;
    assert_eq!(run(&scheduler, &base, &params), want_base);
    let again = blocks(200, 200) as u64;
    assert!(again >= 64);
    assert_eq!(scheduler.stats().prefix_hit_tokens, again);
    // A prompt of 190 sharing 150 tokens: the shared whole blocks that leave enough to read.
    assert_eq!(run(&scheduler, &shared, &params), want_shared);
    let s = scheduler.stats();
    assert_eq!(s.prefix_hit_tokens, again + blocks(190, 150) as u64);
    assert_eq!(s.prompt_tokens, 200 + 200 + 190);
    // Off: nothing cached.
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let off = Scheduler::start(
        "test",
        Arc::new(lm),
        SchedulerSettings {
            prefix_cache: false,
            ..SchedulerSettings::default()
        },
    );
    assert_eq!(run(&off, &base, &params), want_base);
    assert_eq!(run(&off, &base, &params), want_base);
    assert_eq!(off.stats().prefix_hit_tokens, 0);
}

#[test]
fn cached_prefixes_make_room_for_new_sequences_and_never_disturb_a_running_one() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let params = GenerationParams::greedy(8);
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| prompt(40 + i, 200, 384)).collect();
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| alone(&lm, &decoder_request(p), &params))
        .collect();
    // Room for one sequence (208 tokens) and 92 cached tokens.
    let settings = SchedulerSettings {
        kv_tokens: 300,
        ..SchedulerSettings::default()
    };
    let scheduler = Scheduler::start("test", Arc::new(lm), settings);
    for (p, w) in prompts.iter().zip(&want) {
        assert_eq!(&run(&scheduler, p, &params), w);
        let s = scheduler.stats();
        assert!(s.prefix_cached_tokens + 208 <= 300, "{s:?}");
    }
    let s = scheduler.stats();
    assert!(s.prefix_evicted_blocks >= 4, "{s:?}");
    // Two at once: the cache gives way to the second reservation's wait, never to a running one.
    let a = scheduler
        .submit(decoder_request(&prompts[0]), params.clone())
        .unwrap();
    let b = scheduler
        .submit(decoder_request(&prompts[1]), params.clone())
        .unwrap();
    for (seq, w) in [(a, &want[0]), (b, &want[1])] {
        let done = loop {
            match seq.next_event().expect("scheduler alive") {
                Event::Token(_) => {}
                Event::Done(g) => break g,
                Event::Failed(e) => panic!("{e}"),
                Event::Scored(_) => panic!("a generation answered with scores"),
            }
        };
        assert_eq!(&done.tokens, w);
    }
}

#[test]
fn smollm2_answers_a_repeated_prompt_from_its_cached_prefix_as_afresh() {
    let lm = LanguageModel::load(&smollm2(), &Device::Cpu, f32_options()).unwrap();
    let document = "The Dorvize Glassworks were founded in 1821 by Ilsa Marr, who had learned \
                    the trade in Murano and came back to the valley with two furnaces' worth of \
                    debt. Within ten years the works employed ninety people and shipped window \
                    glass as far as the coast. ";
    let prompts: Vec<Vec<u32>> = [
        "Who founded the Dorvize Glassworks?",
        "How many people did the works employ?",
    ]
    .iter()
    .map(|q| {
        lm.user_prompt(&format!("{}\n\nQuestion: {q}", document.repeat(6)))
            .unwrap()
    })
    .collect();
    let params = lm.with_stops(GenerationParams::greedy(24));
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| alone(&lm, &decoder_request(p), &params))
        .collect();
    let scheduler = Scheduler::start("test", Arc::new(lm), SchedulerSettings::default());
    for round in 0..2 {
        for (p, w) in prompts.iter().zip(&want) {
            assert_eq!(&run(&scheduler, p, &params), w, "round {round}");
        }
    }
    // The second question shares the document with the first; then both come again.
    let s = scheduler.stats();
    assert!(
        prompts[0].len() > 350 && s.prefix_hit_tokens >= 3 * 128,
        "{s:?}"
    );
}

/// CAPE's passage cache behind the scheduler: passages read before are not encoded again
/// (in another order, beside new ones), the answers are those of generation alone, and the
/// metrics say what was reused.
#[test]
fn cape_passages_read_before_are_reused_exactly() {
    let (_dir, lm) = tiny("cepe-tiny");
    let v = 512;
    let a = prompt(31, 9, v);
    let b = prompt(32, 6, v);
    let c = prompt(33, 12, v);
    let request = |chunks: &[&Vec<u32>]| Request {
        prompt: prompt(30, 5, v),
        encoder_chunks: chunks.iter().map(|c| c.to_vec()).collect(),
    };
    let requests = [
        request(&[&a, &b]),
        request(&[&b, &a]),
        request(&[&c, &a, &b]),
    ];
    let params = GenerationParams::greedy(6);
    let want: Vec<Vec<u32>> = requests.iter().map(|r| alone(&lm, r, &params)).collect();
    let scheduler = Scheduler::start("test", Arc::new(lm), SchedulerSettings::default());
    for (r, w) in requests.iter().zip(&want) {
        assert_eq!(
            &scheduler
                .generate(r.clone(), params.clone())
                .unwrap()
                .tokens,
            w
        );
    }
    let s = scheduler.stats().passages;
    assert_eq!(s.encoded_tokens, 9 + 6 + 12, "{s:?}");
    assert_eq!(s.hit_tokens, (6 + 9) + (9 + 6), "{s:?}");
    assert_eq!(s.chunks, 3, "{s:?}");
    let mut text = String::new();
    capstan_engine::scheduler::render_schedulers(&mut text, &[("cape", scheduler.stats())]);
    assert!(
        text.contains("capstan_scheduler_passage_hit_tokens_total{reader=\"cape\"} 30"),
        "{text}"
    );
}

/// SelfExtend's prefixes are reused too (its grouped keys come along): a repeated prompt
/// reads only what the prefix cache leaves, and answers as generation alone does.
#[test]
fn selfextend_prompts_start_from_their_cached_prefix() {
    let (_dir, mut lm) = tiny("llama3-rope-tiny");
    lm.model_mut()
        .set_attention(capstan_reader::AttentionPattern::SelfExtend {
            group: 2,
            window: 32,
        })
        .unwrap();
    let base = prompt(9, 200, 384);
    let params = GenerationParams::greedy(8);
    let want = alone(&lm, &decoder_request(&base), &params);
    let scheduler = Scheduler::start("test", Arc::new(lm), SchedulerSettings::default());
    assert_eq!(run(&scheduler, &base, &params), want);
    assert_eq!(scheduler.stats().prefix_hit_tokens, 0);
    assert_eq!(run(&scheduler, &base, &params), want);
    let stable = capstan_reader::STABLE_CHUNK_ROWS;
    let hit = ((200 - stable) / 64 * 64) as u64;
    assert!(hit > 0);
    assert_eq!(scheduler.stats().prefix_hit_tokens, hit);
}

/// Scoring starts from the prompt's cached blocks: two questions sharing a long head (the
/// instruction and worked example of every span prompt) score as the model scores each alone,
/// the second and a repeat reading only what the cache does not hold.
#[test]
fn scoring_reads_a_shared_prompt_head_from_the_prefix_cache() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let head = prompt(21, 300, 384);
    let prompts: Vec<Vec<u32>> = [22, 23]
        .iter()
        .map(|&seed| [head.clone(), prompt(seed, 150, 384)].concat())
        .collect();
    let answers: Vec<String> = ["t9", "t200 t201 t202", "t17 t42"]
        .map(String::from)
        .to_vec();
    let texts: Vec<&str> = answers.iter().map(String::as_str).collect();
    let want: Vec<_> = prompts
        .iter()
        .map(|p| lm.answer_likelihoods(p, &texts).unwrap())
        .collect();
    let scheduler = Scheduler::start("test", Arc::new(lm), SchedulerSettings::default());
    for round in 0..2 {
        for (p, w) in prompts.iter().zip(&want) {
            let got = scheduler.score(p.clone(), answers.clone()).unwrap();
            for (g, w) in got.iter().zip(w) {
                assert!(
                    (g.logprob - w.logprob).abs() < 1e-4 && (g.end - w.end).abs() < 1e-4,
                    "round {round}: {g:?} vs {w:?}"
                );
            }
        }
    }
    // The second prompt reuses the head's whole blocks; the repeats reuse all but the last
    // STABLE_CHUNK_ROWS tokens.
    let s = scheduler.stats();
    assert!(s.prefix_hit_tokens >= 256 + 2 * 320, "{s:?}");
    assert_eq!(s.kv_used, 0, "every reservation given back");
}

/// A one-shot run's prefix cache kept on disk: a new scheduler (a new `capstan ask`) starts
/// from the blocks the last one read, scores as the model does, and a file that is damaged or
/// was written for another model is not used (a warning, the same scores).
#[test]
fn a_stored_prefix_cache_starts_the_next_run_and_a_bad_one_is_ignored() {
    use capstan_engine::scheduler::PrefixStore;
    let dir = tempfile::tempdir().unwrap();
    let store = |key: &str| PrefixStore {
        path: dir.path().join("prompt.safetensors"),
        key: key.into(),
        max_blocks: 16,
    };
    let head = prompt(31, 300, 384);
    let first = [head.clone(), prompt(32, 150, 384)].concat();
    let second = [head, prompt(33, 150, 384)].concat();
    let answers: Vec<String> = ["t9", "t200 t201 t202"].map(String::from).to_vec();
    let texts: Vec<&str> = answers.iter().map(String::as_str).collect();
    let (_tiny_dir, lm) = tiny("llama3-rope-tiny");
    let want = lm.answer_likelihoods(&second, &texts).unwrap();
    let lm = Arc::new(lm);
    let run = |key: &str, p: &[u32]| {
        let s = Scheduler::start_with_store(
            "test",
            lm.clone(),
            SchedulerSettings::default(),
            Some(store(key)),
        );
        let got = s.score(p.to_vec(), answers.clone()).unwrap();
        (got, s.stats().prefix_hit_tokens)
    };
    let (_, hit) = run("model a", &first);
    assert_eq!(hit, 0, "nothing stored yet");
    assert!(dir.path().join("prompt.safetensors").exists());
    let (got, hit) = run("model a", &second);
    assert_eq!(hit, 256, "the shared head's whole blocks, from the file");
    for (g, w) in got.iter().zip(&want) {
        assert!((g.logprob - w.logprob).abs() < 1e-4, "{g:?} vs {w:?}");
    }
    // Another model's file is not read.
    let (_, hit) = run("model b", &second);
    assert_eq!(hit, 0);
    // A damaged file is not read either, and the run answers as the model does.
    let path = dir.path().join("prompt.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&path, &bytes).unwrap();
    let (got, hit) = run("model b", &second);
    assert_eq!(hit, 0);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g.logprob - w.logprob).abs() < 1e-4, "{g:?} vs {w:?}");
    }
}
