//! Generation behaviour on a tiny checkpoint: streaming, stops, sampling determinism.

use candle_core::{DType, Device};
use capstan_reader::{Checkpoint, Error, Flow, GenerationParams, Generator, Request, StopReason};

mod common;
use common::fixture;

fn setup() -> (Checkpoint, capstan_reader::Llama, Request) {
    let dir = fixture("llama-tied");
    let ckpt = Checkpoint::open(&dir).unwrap();
    let model = ckpt.load_model(&Device::Cpu, Some(DType::F32)).unwrap();
    let request = Request {
        prompt: vec![1, 17, 42, 99, 7],
        ..Request::default()
    };
    (ckpt, model, request)
}

#[test]
fn streaming_sees_every_token_and_can_cancel() {
    let (_, model, request) = setup();
    let gen = Generator::new(&model, None, 2);
    let full = gen
        .generate(&request, &GenerationParams::greedy(6))
        .unwrap();
    assert_eq!(full.tokens.len(), 6);
    assert_eq!(full.stop_reason, StopReason::Length);
    let mut streamed = Vec::new();
    let out = gen
        .generate_stream(&request, &GenerationParams::greedy(6), |t, piece| {
            assert!(piece.is_none());
            streamed.push(t);
            if streamed.len() == 3 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        })
        .unwrap();
    assert_eq!(streamed, full.tokens[..3]);
    assert_eq!(out.tokens, full.tokens[..3]);
    assert_eq!(out.stop_reason, StopReason::Cancelled);
}

#[test]
fn stop_token_ends_generation() {
    let (_, model, request) = setup();
    let gen = Generator::new(&model, None, 2);
    let full = gen
        .generate(&request, &GenerationParams::greedy(6))
        .unwrap();
    let params = GenerationParams {
        stop_token_ids: vec![full.tokens[2]],
        ..GenerationParams::greedy(6)
    };
    let out = gen.generate(&request, &params).unwrap();
    let first = full
        .tokens
        .iter()
        .position(|&t| t == full.tokens[2])
        .unwrap();
    assert_eq!(out.tokens, full.tokens[..=first]);
    assert_eq!(out.stop_reason, StopReason::StopToken(full.tokens[2]));
}

#[test]
fn stop_strings_need_a_tokenizer() {
    let (_, model, request) = setup();
    let params = GenerationParams {
        stop_strings: vec!["\n".into()],
        ..GenerationParams::greedy(4)
    };
    let err = Generator::new(&model, None, 2)
        .generate(&request, &params)
        .unwrap_err();
    assert!(matches!(err, Error::NoTokenizer));
}

#[test]
fn sampling_is_seeded() {
    let (_, model, request) = setup();
    let gen = Generator::new(&model, None, 2);
    let params = GenerationParams {
        temperature: Some(0.8),
        top_p: Some(0.9),
        top_k: Some(50),
        repetition_penalty: 1.1,
        seed: 3,
        ..GenerationParams::greedy(8)
    };
    let a = gen.generate(&request, &params).unwrap();
    let b = gen.generate(&request, &params).unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.tokens.len(), 8);
}

/// A CEPE batch: row 0 has encoder context and must reproduce the reference's greedy tokens;
/// row 1 (shorter, left-padded, no encoder context) must decode as plain Llama.
#[test]
fn cepe_batch_mixes_encoder_and_plain_rows() {
    let dir = fixture("cepe-tiny");
    let ckpt = Checkpoint::open(&dir).unwrap();
    let model = ckpt.load_model(&Device::Cpu, Some(DType::F32)).unwrap();
    let inputs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("inputs.json")).unwrap()).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let with_context = Request {
        prompt: ids(&inputs["input_ids"][0]),
        encoder_chunks: inputs["encoder_input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(ids)
            .collect(),
    };
    let plain = Request {
        prompt: with_context.prompt[..9].to_vec(),
        ..Request::default()
    };
    let n = inputs["max_new_tokens"].as_u64().unwrap() as usize;
    let gen = Generator::new(&model, None, 2);
    let batch = gen
        .generate_batch(
            &[with_context, plain.clone()],
            &GenerationParams::greedy(n),
            0,
        )
        .unwrap();
    assert_eq!(batch[0], ids(&expected["greedy_tokens"]));
    let single = gen.generate(&plain, &GenerationParams::greedy(n)).unwrap();
    assert_eq!(batch[1], single.tokens);
}

/// A word-level tokenizer over the tiny vocabulary: token `i` is the word `<i>`.
fn word_tokenizer(vocab: usize) -> tokenizers::Tokenizer {
    let words: serde_json::Map<String, serde_json::Value> = (0..vocab)
        .map(|i| (format!("<{i}>"), serde_json::Value::from(i)))
        .collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<0>"}
    });
    json.to_string().parse().unwrap()
}

#[test]
fn stop_strings_cut_text_and_streaming_pieces_add_up() {
    let (_, model, request) = setup();
    let tok = word_tokenizer(model.config().vocab_size);
    let gen = Generator::new(&model, Some(&tok), 2);
    let full = gen
        .generate(&request, &GenerationParams::greedy(6))
        .unwrap();
    let text = full.text.clone().unwrap();
    let words: Vec<String> = full.tokens.iter().map(|t| format!("<{t}>")).collect();
    assert_eq!(text, words.join(" "));

    let mut pieces = String::new();
    gen.generate_stream(&request, &GenerationParams::greedy(6), |_, piece| {
        pieces.push_str(piece.unwrap());
        Flow::Continue
    })
    .unwrap();
    assert_eq!(pieces, text);

    let stop = words[2].clone();
    let first = words.iter().position(|w| *w == stop).unwrap();
    let params = GenerationParams {
        stop_strings: vec![stop.clone()],
        ..GenerationParams::greedy(6)
    };
    let out = gen.generate(&request, &params).unwrap();
    assert_eq!(out.tokens, full.tokens[..=first]);
    assert_eq!(out.stop_reason, StopReason::StopString(stop));
    assert_eq!(out.text.unwrap().trim_end(), words[..first].join(" "));

    // A stop string over two tokens: its first token is held back while it may
    // be the stop's start, so what was streamed is exactly the answer's text.
    let stop = format!("{} {}", words[1], words[2]);
    let cut = text.find(&stop).unwrap();
    let params = GenerationParams {
        stop_strings: vec![stop.clone()],
        ..GenerationParams::greedy(6)
    };
    let mut streamed = Vec::new();
    let out = gen
        .generate_stream(&request, &params, |_, piece| {
            streamed.push(piece.unwrap().to_string());
            Flow::Continue
        })
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::StopString(stop));
    assert_eq!(out.text.as_deref(), Some(&text[..cut]));
    assert_eq!(streamed.concat(), text[..cut], "{streamed:?}");
}
