//! Continuous batching: sequences run together produce exactly the tokens each produces
//! alone (greedy, f32), whatever their lengths, limits, stops and encoder chunks; a cancelled
//! sequence leaves the others untouched; admission queues past the KV budget and refuses past
//! the queue, losing and duplicating nothing.

mod common;

use std::sync::Arc;

use candle_core::Device;
use capstan_engine::scheduler::Event;
use capstan_engine::{Error, Scheduler, SchedulerSettings};
use capstan_reader::{
    GenerationParams, Generator, LanguageModel, LoadOptions, Request, StopReason,
};
use common::{alone, decoder_request, f32_options, finish, prompt, smollm2, tiny};

/// Submits every request at once and checks each result against its generation alone, and
/// that some step ran at least `min_batch` sequences together.
fn check_together(lm: LanguageModel, cases: Vec<(Request, GenerationParams)>, min_batch: usize) {
    check_together_with(lm, cases, min_batch, SchedulerSettings::default());
}

/// [`check_together`] on a scheduler with `settings`.
fn check_together_with(
    lm: LanguageModel,
    cases: Vec<(Request, GenerationParams)>,
    min_batch: usize,
    settings: SchedulerSettings,
) {
    let want: Vec<Vec<u32>> = cases.iter().map(|(r, p)| alone(&lm, r, p)).collect();
    let scheduler = Scheduler::start("test", Arc::new(lm), settings);
    let seqs: Vec<_> = cases
        .iter()
        .map(|(r, p)| scheduler.submit(r.clone(), p.clone()).unwrap())
        .collect();
    for (i, seq) in seqs.iter().enumerate() {
        let mut streamed = Vec::new();
        let done = loop {
            match seq.next_event().expect("scheduler alive") {
                Event::Token(t) => streamed.push(t.token),
                Event::Done(g) => break g,
                Event::Failed(e) => panic!("sequence {i} failed: {e}"),
                Event::Scored(_) => panic!("sequence {i} was answered with scores"),
            }
        };
        assert_eq!(
            done.tokens, want[i],
            "sequence {i}: tokens together vs alone"
        );
        assert_eq!(streamed, done.tokens, "sequence {i}: streamed tokens");
    }
    let largest = scheduler.stats().largest_batch;
    assert!(
        largest >= min_batch,
        "sequences were not batched (largest step: {largest})"
    );
}

fn decoder_cases(vocab: usize) -> Vec<(Request, GenerationParams)> {
    [
        (1, 9, 12),
        (2, 3, 20),
        (3, 40, 6),
        (4, 1, 15),
        (5, 17, 9),
        (6, 70, 11),
    ]
    .into_iter()
    .map(|(seed, len, n)| {
        let request = Request {
            prompt: prompt(seed, len, vocab),
            encoder_chunks: Vec::new(),
        };
        (request, GenerationParams::greedy(n))
    })
    .collect()
}

#[test]
fn llama3_rope_together_equals_alone() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let mut cases = decoder_cases(384);
    // Stop at the 4th token the second sequence would generate.
    let stop = alone(&lm, &cases[1].0, &cases[1].1)[3];
    cases[1].1.stop_token_ids = vec![stop];
    check_together(lm, cases, 4);
}

#[test]
fn qwen2_together_equals_alone() {
    let (_dir, lm) = tiny("qwen2-tiny");
    check_together(lm, decoder_cases(384), 4);
}

#[test]
fn cape_rows_with_different_chunk_counts_together_equal_alone() {
    let (_dir, lm) = tiny("cepe-tiny");
    let v = 512;
    let case = |seed, len, chunks: Vec<(u32, usize)>, n| {
        let request = Request {
            prompt: prompt(seed, len, v),
            encoder_chunks: chunks.into_iter().map(|(s, l)| prompt(s, l, v)).collect(),
        };
        (request, GenerationParams::greedy(n))
    };
    let cases = vec![
        case(11, 6, vec![(21, 8), (22, 5), (23, 8)], 7),
        case(12, 4, vec![(24, 3)], 10),
        case(13, 9, vec![], 5),
        case(14, 2, vec![(25, 7), (26, 7)], 8),
    ];
    check_together(lm, cases, 3);
}

#[test]
fn a_cancelled_sequence_leaves_the_others_unchanged() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let long = (
        Request {
            prompt: prompt(7, 12, 384),
            encoder_chunks: Vec::new(),
        },
        GenerationParams::greedy(400),
    );
    let other = (
        Request {
            prompt: prompt(8, 5, 384),
            encoder_chunks: Vec::new(),
        },
        GenerationParams::greedy(60),
    );
    let want = alone(&lm, &other.0, &other.1);
    let scheduler = Scheduler::start("test", Arc::new(lm), SchedulerSettings::default());
    let a = scheduler.submit(long.0.clone(), long.1.clone()).unwrap();
    let b = scheduler.submit(other.0.clone(), other.1.clone()).unwrap();
    for _ in 0..3 {
        assert!(matches!(a.next_event(), Some(Event::Token(_))));
    }
    drop(a); // the client leaves mid-stream
    let got = scheduler
        .generate(other.0.clone(), other.1.clone())
        .unwrap();
    assert_eq!(
        got.tokens, want,
        "a sequence submitted after the cancellation"
    );
    assert_eq!(finish(&b).tokens, want);
    // The cancelled sequence ended long before its 400 tokens.
    let stats = scheduler.stats();
    assert!(stats.tokens < 300, "{} tokens generated", stats.tokens);
    assert_eq!(stats.finished, 3);
    // Stopping from the callback ends a sequence as cancelled, with what it has.
    let mut seen = 0;
    let g = scheduler
        .generate_stream(long.0, long.1, |_, _| {
            seen += 1;
            if seen == 5 {
                capstan_reader::Flow::Stop
            } else {
                capstan_reader::Flow::Continue
            }
        })
        .unwrap();
    assert_eq!(g.stop_reason, StopReason::Cancelled);
    assert!(
        g.tokens.len() >= 5 && g.tokens.len() < 50,
        "{}",
        g.tokens.len()
    );
}

#[test]
fn a_burst_past_the_kv_budget_waits_and_past_the_queue_is_refused() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let n_new = 300;
    let requests: Vec<Request> = (0..6)
        .map(|i| Request {
            prompt: prompt(30 + i, 10, 384),
            encoder_chunks: Vec::new(),
        })
        .collect();
    let params = GenerationParams::greedy(n_new);
    let want: Vec<Vec<u32>> = requests.iter().map(|r| alone(&lm, r, &params)).collect();
    // Room for two sequences' KV; three may wait.
    let settings = SchedulerSettings {
        max_batch: 8,
        kv_tokens: 2 * (10 + n_new),
        step_tokens: 512,
        queue: 3,
        prefix_cache: true,
        passage_cache_bytes: 0,
    };
    let scheduler = Scheduler::start("test", Arc::new(lm), settings);
    let too_large = scheduler.submit(requests[0].clone(), GenerationParams::greedy(3 * n_new));
    assert!(
        matches!(too_large, Err(Error::TooLarge { .. })),
        "{too_large:?}"
    );
    let mut accepted = Vec::new();
    let mut refused = 0;
    for (i, r) in requests.iter().enumerate() {
        match scheduler.submit(r.clone(), params.clone()) {
            Ok(seq) => accepted.push((i, seq)),
            Err(Error::Overloaded { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // Two run, three wait, the sixth is refused (the first two need 300 steps to finish).
    assert_eq!(refused, 1, "refusals");
    assert_eq!(accepted.len(), 5);
    for (i, seq) in accepted {
        assert_eq!(finish(&seq).tokens, want[i], "request {i}");
    }
    let stats = scheduler.stats();
    assert!(
        stats.largest_batch <= 2,
        "KV budget exceeded: {}",
        stats.largest_batch
    );
    assert_eq!(stats.finished, 5, "each accepted request answered once");
    assert_eq!(stats.rejected, 1);
    assert_eq!(stats.tokens, 5 * n_new as u64);
}

#[test]
fn smollm2_chat_requests_together_equal_alone() {
    let lm = LanguageModel::load(&smollm2(), &Device::Cpu, f32_options()).unwrap();
    let questions = [
        ("What is the capital of France?", 12, None),
        ("Name three colours of the rainbow, separated by commas.", 24, Some(",")),
        ("Hi", 8, None),
        (
            "Write one sentence about rivers, mountains, forests and the sea, and say why each matters to people who live near it.",
            30,
            Some("."),
        ),
        ("2+2=", 5, None),
    ];
    let cases: Vec<(Request, GenerationParams)> = questions
        .iter()
        .map(|(q, n, stop)| {
            let mut params = lm.with_stops(GenerationParams::greedy(*n));
            params.stop_strings = stop.iter().map(|s| s.to_string()).collect();
            let request = Request {
                prompt: lm.user_prompt(q).unwrap(),
                encoder_chunks: Vec::new(),
            };
            (request, params)
        })
        .collect();
    check_together(lm, cases, 3);
}

/// Passages of `tN` words (the tiny tokenizer's), avoiding the ids in `avoid` (stop ids).
fn word_passages(seed: u32, count: usize, vocab: usize, avoid: &[u32]) -> Vec<String> {
    (0..count as u32)
        .map(|i| {
            prompt(seed * 31 + i, 12 + (i as usize * 5) % 9, vocab)
                .into_iter()
                .filter(|t| !avoid.contains(t))
                .map(|t| format!("t{t}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Grounded (span) decoding through the scheduler: each answer is a span of its passages,
/// where its matches say, and the tokens are the same alone, batched and streamed, for
/// decoders and for CAPE (encoder chunks beside the span).
#[test]
fn grounded_answers_copy_their_passages_alone_and_batched() {
    for (name, vocab, chunks) in [("llama3-rope-tiny", 384, false), ("cepe-tiny", 512, true)] {
        let (_dir, lm) = tiny(name);
        let mut cases = Vec::new();
        let mut sources = Vec::new();
        for seed in 0..8u32 {
            let passages = word_passages(seed + 1, 1 + seed as usize % 3, vocab, lm.stop_ids());
            let texts: Vec<&str> = passages.iter().map(String::as_str).collect();
            let source = Arc::new(
                lm.span_source(&texts)
                    .unwrap()
                    .with_end_bias(seed as f32 * 1.5),
            );
            let request = Request {
                prompt: prompt(seed + 40, 5 + seed as usize * 3, vocab),
                encoder_chunks: if chunks {
                    vec![prompt(seed + 60, 6, vocab)]
                } else {
                    Vec::new()
                },
            };
            let params = GenerationParams {
                max_new_tokens: 12,
                span: Some(source.clone()),
                ..lm.with_stops(GenerationParams::default())
            };
            cases.push((request, params));
            sources.push(source);
        }
        // Alone: every answer stands in its passages where its matches say.
        let generator = Generator::new(lm.model(), Some(lm.tokenizer()), lm.pad_id());
        let mut copied = 0;
        for ((request, params), source) in cases.iter().zip(&sources) {
            let g = generator.generate(request, params).unwrap();
            // The tiny tokenizer's end token is an ordinary word: leave it out of the answer.
            let kept: Vec<u32> = g
                .tokens
                .iter()
                .copied()
                .filter(|t| !lm.stop_ids().contains(t))
                .collect();
            let text = lm.decode(&kept).unwrap();
            let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(!g.span.is_empty() || g.tokens.len() <= 1, "{name}: {g:?}");
            for m in &g.span {
                let passage = &source.passages()[m.passage];
                assert_eq!(
                    passage[m.start..m.end].trim(),
                    words,
                    "{name}: the match is the decoded answer"
                );
                assert!(
                    passage.contains(&words),
                    "{name}: `{words}` not in `{passage}`"
                );
            }
            copied += usize::from(!words.is_empty());
        }
        assert!(copied >= 6, "{name}: only {copied} answers copied anything");
        check_together(lm, cases, 4);
    }
}

/// Prompts cut by a small step budget answer as they do read whole, on the quantized model
/// (whose short pieces would otherwise run other kernels than a whole read: the per-row
/// attention and the quantized products instead of the tiled attention and the GEMM).
#[test]
fn prompts_cut_by_the_step_budget_answer_as_read_whole() {
    let natural = LoadOptions {
        dtype: None,
        no_chat_template: false,
    };
    let lm = LanguageModel::load(&smollm2(), &Device::Cpu, natural).unwrap();
    let questions = [
        "Write one sentence about rivers, mountains, forests and the sea, and say why each matters to people who live near it.",
        "Name three colours of the rainbow, separated by commas, and say which one is the brightest to the human eye.",
        "What is the capital of France, and which river runs through it?",
        "List the first five prime numbers and explain in a few words what makes a number prime.",
    ];
    let cases: Vec<(Request, GenerationParams)> = questions
        .iter()
        .map(|q| {
            let request = Request {
                prompt: lm.user_prompt(q).unwrap(),
                encoder_chunks: Vec::new(),
            };
            (request, lm.with_stops(GenerationParams::greedy(12)))
        })
        .collect();
    assert!(cases.iter().all(|(r, _)| r.prompt.len() > 40));
    let settings = SchedulerSettings {
        step_tokens: 40,
        prefix_cache: false,
        ..SchedulerSettings::default()
    };
    check_together_with(lm, cases, 2, settings);
}

/// Scoring span candidates goes through admission: the scores through the scheduler are the
/// model's own while a sequence decodes beside them (its tokens unchanged); a scoring request
/// that could never fit the KV budget is refused; every reservation is given back.
#[test]
fn scoring_is_admitted_like_a_sequence_and_scores_as_the_model_does() {
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let scored_prompt = prompt(7, 40, 384);
    let answers: Vec<String> = ["t9", "t200 t201 t202", "t17 t42", ""]
        .map(String::from)
        .to_vec();
    let texts: Vec<&str> = answers.iter().map(String::as_str).collect();
    let want = lm.answer_likelihoods(&scored_prompt, &texts).unwrap();
    let request = decoder_request(&prompt(8, 12, 384));
    let params = GenerationParams::greedy(40);
    let tokens_alone = alone(&lm, &request, &params);
    let need = capstan_reader::scoring_kv_tokens(scored_prompt.len(), answers.len());
    let settings = SchedulerSettings {
        kv_tokens: need + 12 + 40,
        prefix_cache: false,
        ..SchedulerSettings::default()
    };
    let scheduler = Scheduler::start("test", Arc::new(lm), settings);
    let seq = scheduler.submit(request, params).unwrap();
    let got = scheduler
        .score(scored_prompt.clone(), answers.clone())
        .unwrap();
    assert_eq!(got, want);
    assert_eq!(finish(&seq).tokens, tokens_alone);
    let too_many: Vec<String> = (0..64).map(|i| format!("t{i}")).collect();
    let refused = scheduler.score(scored_prompt.clone(), too_many);
    assert!(
        matches!(refused, Err(Error::TooLarge { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        scheduler.score(Vec::new(), answers),
        Err(Error::Reader(_))
    ));
    let stats = scheduler.stats();
    assert_eq!(stats.finished, 2, "the sequence and the scoring");
    assert_eq!(stats.kv_used, 0, "every reservation given back");
}

/// A generation or a scoring still waiting for admission past its deadline (the server's
/// `--queue-timeout`, counted from when the request was queued) is refused, not run late;
/// one within its deadline runs.
#[test]
fn work_waiting_past_its_deadline_is_refused_not_run_late() {
    use capstan_engine::scheduler::Deadline;
    use capstan_reader::Flow;
    use std::time::{Duration, Instant};
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let settings = SchedulerSettings {
        max_batch: 1,
        ..SchedulerSettings::default()
    };
    let scheduler = Scheduler::start("test", Arc::new(lm), settings);
    // One long sequence holds the only slot.
    let running = scheduler
        .submit(
            decoder_request(&prompt(1, 10, 384)),
            GenerationParams::greedy(3000),
        )
        .unwrap();
    let late = Deadline {
        queued: Instant::now() - Duration::from_secs(1),
        wait: Duration::from_millis(10),
    };
    let refused = scheduler.generate_stream_until(
        decoder_request(&prompt(2, 10, 384)),
        GenerationParams::greedy(5),
        Some(late),
        |_, _| Flow::Continue,
    );
    assert!(
        matches!(refused, Err(Error::Expired { waited_ms, deadline_ms: 10, .. }) if waited_ms >= 1000),
        "{refused:?}"
    );
    let refused = scheduler.score_until(prompt(3, 10, 384), vec!["t9".into()], Some(late));
    assert!(matches!(refused, Err(Error::Expired { .. })), "{refused:?}");
    drop(running);
    let on_time = Deadline {
        queued: Instant::now(),
        wait: Duration::from_secs(600),
    };
    let done = scheduler
        .generate_stream_until(
            decoder_request(&prompt(4, 10, 384)),
            GenerationParams::greedy(5),
            Some(on_time),
            |_, _| Flow::Continue,
        )
        .unwrap();
    assert_eq!(done.tokens.len(), 5);
}

/// Scoring jobs admitted together are answered one by one, each as soon as it is scored, not
/// all after the last (16 concurrent span answers once all waited for the slowest: median
/// 16.7 s against 7.7 s one at a time). Three jobs queue behind a fourth that occupies the
/// scheduler; the last of the three arrives at least half a scoring after the first of them.
#[test]
fn scoring_jobs_admitted_together_are_answered_one_by_one() {
    use std::time::{Duration, Instant};
    let (_dir, lm) = tiny("llama3-rope-tiny");
    let answers: Vec<String> = (0..8).map(|i| format!("t{} t{}", i + 5, i + 9)).collect();
    let settings = SchedulerSettings {
        prefix_cache: false,
        ..SchedulerSettings::default()
    };
    let scheduler = Arc::new(Scheduler::start("test", Arc::new(lm), settings));
    // One scoring alone, at its fastest of three (the first warms up).
    let one = (0..3)
        .map(|i| {
            let t = Instant::now();
            scheduler
                .score(prompt(30 + i, 300, 384), answers.clone())
                .unwrap();
            t.elapsed()
        })
        .min()
        .unwrap();
    let spawn = |seed: u32| {
        let (s, a) = (scheduler.clone(), answers.clone());
        std::thread::spawn(move || {
            s.score(prompt(seed, 300, 384), a).unwrap();
            Instant::now()
        })
    };
    let first = spawn(40);
    // The first is being scored while the others arrive.
    std::thread::sleep(one / 4);
    let others: Vec<_> = (41..44).map(spawn).collect();
    let done: Vec<Instant> = others.into_iter().map(|h| h.join().unwrap()).collect();
    first.join().unwrap();
    let spread = *done.iter().max().unwrap() - *done.iter().min().unwrap();
    assert!(
        spread >= one / 2 && one > Duration::ZERO,
        "the three answers arrived within {spread:?}; one scoring takes {one:?}"
    );
    assert_eq!(scheduler.stats().kv_used, 0);
}
