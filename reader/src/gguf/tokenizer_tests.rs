//! Tests of `tokenizer.rs`: the GGUF vocabulary's tokenizers.

use super::*;

/// A small byte-level vocabulary: single characters, two merges, two control tokens.
fn tiny_gpt2() -> GgufVocab {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<think>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    tokens.extend(bytes_to_unicode().iter().map(|c| c.to_string()));
    tokens.push("he".into());
    tokens.push("hel".into());
    let n = tokens.len();
    let mut types = vec![1; n];
    types[0] = 3;
    types[1] = 3;
    types[2] = 4;
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types: Some(types),
        merges: Some(vec!["h e".into(), "he l".into()]),
        bos: Some(1),
        eos: Some(0),
        ..Default::default()
    }
}

#[test]
fn byte_alphabet_is_a_bijection() {
    let table = bytes_to_unicode();
    assert_eq!(table.iter().collect::<HashSet<_>>().len(), 256);
    assert_eq!(table[b' ' as usize], 'Ġ');
    assert_eq!(table[b'\n' as usize], 'Ċ');
    assert_eq!(table[b'a' as usize], 'a');
}

#[test]
fn gpt2_added_tokens_and_template() {
    let mut v = tiny_gpt2();
    let tok = build_tokenizer(&v).unwrap();
    let enc = tok.encode("<|im_start|>hello<think>", false).unwrap();
    let hel = tok.token_to_id("hel").unwrap();
    assert_eq!(enc.get_ids()[0], 1);
    assert_eq!(enc.get_ids()[1], hel);
    assert_eq!(*enc.get_ids().last().unwrap(), 2);
    assert!(tok.get_added_vocabulary().is_special_token("<|im_start|>"));
    assert!(!tok.get_added_vocabulary().is_special_token("<think>"));
    // add_bos defaults to false for gpt2
    assert_eq!(tok.encode("he", true).unwrap().get_ids(), &[hel - 1]);
    v.add_bos = Some(true);
    v.add_eos = Some(true);
    let tok = build_tokenizer(&v).unwrap();
    assert_eq!(tok.encode("he", true).unwrap().get_ids(), &[1, hel - 1, 0]);
    assert_eq!(tok.encode("he", false).unwrap().get_ids(), &[hel - 1]);
}

#[test]
fn errors_name_the_key() {
    let v = tiny_gpt2();
    let n = v.tokens.len();
    let cases: Vec<(GgufVocab, &str)> = vec![
        (
            GgufVocab {
                merges: None,
                ..v.clone()
            },
            keys::MERGES,
        ),
        (
            GgufVocab {
                merges: Some(vec!["h".into()]),
                ..v.clone()
            },
            keys::MERGES,
        ),
        (
            GgufVocab {
                merges: Some(vec!["q z".into()]),
                ..v.clone()
            },
            keys::MERGES,
        ),
        (
            GgufVocab {
                scores: Some(vec![0.0; n - 1]),
                ..v.clone()
            },
            keys::SCORES,
        ),
        (
            GgufVocab {
                token_types: Some(vec![1; n + 1]),
                ..v.clone()
            },
            keys::TOKEN_TYPE,
        ),
        (
            GgufVocab {
                bos: Some(n as u32),
                ..v.clone()
            },
            keys::BOS,
        ),
        (
            GgufVocab {
                pad: Some(u32::MAX),
                ..v.clone()
            },
            keys::PAD,
        ),
        (
            GgufVocab {
                model: "rwkv".into(),
                ..v.clone()
            },
            keys::MODEL,
        ),
        (
            GgufVocab {
                tokens: vec![],
                token_types: None,
                bos: None,
                eos: None,
                ..v.clone()
            },
            keys::TOKENS,
        ),
        (
            GgufVocab {
                model: "llama".into(),
                merges: None,
                scores: None,
                ..v.clone()
            },
            keys::SCORES,
        ),
        (
            GgufVocab {
                model: "llama".into(),
                merges: None,
                scores: Some(vec![f32::NAN; n]),
                ..v.clone()
            },
            keys::SCORES,
        ),
    ];
    for (bad, key) in cases {
        let err = build_tokenizer(&bad).expect_err(key).to_string();
        assert!(err.contains(key), "{err:?} should name {key}");
    }
}

#[test]
fn no_token_is_added_past_the_vocabulary() {
    // transformers would append `<|endoftext|>` as a new id here; we must not.
    let mut v = tiny_gpt2();
    v.tokens[0] = "<|eot|>".into();
    let tok = build_tokenizer(&v).unwrap();
    assert_eq!(tok.get_vocab_size(true), v.tokens.len());
    assert_eq!(tok.token_to_id("<|endoftext|>"), None);
    assert_eq!(tok.token_to_id("<|eot|>"), Some(0));
}

#[test]
fn llama_kind_prefix_byte_fallback_and_bos() {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    for t in ["\u{2581}", "a", "b", "ab", "\u{2581}ab"] {
        tokens.push(t.into());
    }
    let n = tokens.len();
    let mut types = vec![6; n];
    types[0] = 2;
    types[1] = 3;
    types[2] = 3;
    for ty in &mut types[n - 5..] {
        *ty = 1;
    }
    let mut scores = vec![0.0; n];
    scores[n - 2] = -1.0; // "ab"
    scores[n - 1] = -2.0; // "▁ab"
    let v = GgufVocab {
        model: "llama".into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        bos: Some(1),
        eos: Some(2),
        unk: Some(0),
        ..Default::default()
    };
    let tok = build_tokenizer(&v).unwrap();
    let id = |t: &str| tok.token_to_id(t).unwrap();
    // "▁" is prepended once; "é" is not a token, so it falls back to its UTF-8 bytes.
    let enc = tok.encode("ab é", true).unwrap();
    assert_eq!(
        enc.get_ids(),
        &[
            1,
            id("\u{2581}ab"),
            id("\u{2581}"),
            id("<0xC3>"),
            id("<0xA9>")
        ]
    );
    assert_eq!(tok.decode(&enc.get_ids()[1..], false).unwrap(), "ab é");
    assert_eq!(tok.decode(enc.get_ids(), true).unwrap(), "ab é");
}

#[test]
fn unknown_pre_falls_back_to_gpt2() {
    let mut v = tiny_gpt2();
    v.pre = Some("no-such-pre".into());
    let a = build_tokenizer(&v).unwrap();
    v.pre = None;
    let b = build_tokenizer(&v).unwrap();
    let text = "hello world 123";
    assert_eq!(
        a.encode(text, false).unwrap().get_ids(),
        b.encode(text, false).unwrap().get_ids()
    );
}

#[test]
fn merges_from_scores_follow_transformers_order() {
    // Python: generate_merges({t: i}, dict(zip(tokens, scores)))
    let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc", "ca"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -1.0];
    let merges = merges_from_scores(&tokens, &scores);
    let want: Vec<(String, String)> =
        [("a", "b"), ("c", "a"), ("b", "c"), ("ab", "c"), ("a", "bc")]
            .iter()
            .map(|(l, r)| (l.to_string(), r.to_string()))
            .collect();
    assert_eq!(merges, want);
}
