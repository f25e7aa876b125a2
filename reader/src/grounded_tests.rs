//! Tests of `grounded.rs`: grounded span decoding.

use super::*;

fn vocab() -> Arc<TokenBytes> {
    let pieces: Vec<&str> = vec![
        "",
        "", // 0, 1: specials
        " Fen",
        "sk",
        "orun",
        "Fensk",
        " fenskorun",
        ".",
        " born",
        " in",
        " the",
        " town",
        " of",
        "F",
        "e",
        "n",
        "s",
        "k",
        "o",
        "r",
        "u",
        " ",
        "\n",
        "Th",
        "alrau",
        " Thalrau",
        "ra",
        "\u{e9}",
        " caf",
        " Ca",
    ];
    let mut bytes: Vec<Vec<u8>> = pieces.iter().map(|p| p.as_bytes().to_vec()).collect();
    // A byte-level piece that is half of "é" (0xC3 0xA9).
    bytes.push(vec![0xC3]);
    bytes.push(vec![0xA9]);
    Arc::new(TokenBytes::from_pieces(bytes))
}

const END: u32 = 1;

/// `text` stands at `s` of `p` and crosses no clause break.
fn copies(p: &[u8], s: usize, text: &[u8]) -> bool {
    p[s..].starts_with(text) && (s..s + text.len()).all(|i| !is_clause_break(p, i))
}

/// Tokens allowed after `so_far` by searching every start of every passage for the bytes.
fn brute_force(tokens: &TokenBytes, passages: &[&str], so_far: &[u32]) -> Vec<u32> {
    let answer: Vec<u8> = so_far
        .iter()
        .flat_map(|&t| tokens.piece(t).to_vec())
        .collect();
    let mut out = Vec::new();
    for id in 0..tokens.len() as u32 {
        let piece = tokens.piece(id);
        if piece.is_empty() {
            continue;
        }
        let full: Vec<u8> = answer.iter().chain(piece).copied().collect();
        let candidates: Vec<&[u8]> = if full.len() > 1 && full[0] == b' ' {
            vec![&full[..], &full[1..]]
        } else {
            vec![&full[..]]
        };
        let ok = passages.iter().any(|p| {
            let p = p.as_bytes().to_ascii_lowercase();
            (0..p.len())
                .filter(|&s| may_start(&p, s))
                .any(|s| candidates.iter().any(|c| copies(&p, s, c)))
        });
        if ok {
            out.push(id);
        }
    }
    let ends = !so_far.is_empty()
        && passages.iter().any(|p| {
            let p = p.as_bytes().to_ascii_lowercase();
            let cands: Vec<&[u8]> = if answer.first() == Some(&b' ') {
                vec![&answer[..], &answer[1..]]
            } else {
                vec![&answer[..]]
            };
            (0..p.len()).filter(|&s| may_start(&p, s)).any(|s| {
                cands
                    .iter()
                    .any(|c| copies(&p, s, c) && is_end(&p, s + c.len()))
            })
        });
    if ends {
        out.push(END);
    }
    out.sort_unstable();
    out
}

#[test]
fn the_trie_agrees_with_a_brute_force_search() {
    let tokens = vocab();
    let passages = [
        "He was born in the town of Fenskorun.",
        "Thalrau (caf\u{e9}) is a town; fenskorun lies near Thalrau.",
    ];
    let source = Arc::new(SpanSource::new(tokens.clone(), &passages, &[END]).unwrap());
    // Walk many paths: at each step try every allowed token, depth-first to depth 4.
    fn walk(
        state: &SpanState,
        so_far: &mut Vec<u32>,
        tokens: &TokenBytes,
        passages: &[&str],
        checked: &mut usize,
    ) {
        let allowed = state.allowed();
        assert_eq!(
            allowed,
            brute_force(tokens, passages, so_far),
            "after {so_far:?}"
        );
        *checked += 1;
        if so_far.len() == 4 {
            return;
        }
        for &t in allowed.iter().filter(|&&t| t != END) {
            let mut next = state.clone();
            next.advance(t);
            so_far.push(t);
            walk(&next, so_far, tokens, passages, checked);
            so_far.pop();
        }
    }
    let mut checked = 0;
    walk(
        &SpanState::new(source),
        &mut Vec::new(),
        &tokens,
        &passages,
        &mut checked,
    );
    assert!(checked > 100, "only {checked} states walked");
}

#[test]
fn a_span_is_copied_whatever_its_tokenization_and_case() {
    let tokens = vocab();
    let passages = ["He was born in the town of Fenskorun."];
    let source = Arc::new(SpanSource::new(tokens.clone(), &passages, &[END]).unwrap());
    // " Fen" + "sk" + "orun": a leading space the passage has, a split the passage's own
    // tokenization would not make.
    for path in [vec![2, 3, 4], vec![5, 4], vec![6]] {
        let mut state = SpanState::new(source.clone());
        for &t in &path {
            assert!(state.allowed().contains(&t), "{path:?}");
            state.advance(t);
        }
        assert!(state.allowed().contains(&END), "{path:?} ends on a word");
        let m = state.matches();
        assert_eq!(m.len(), 1);
        let (text, at) = span_text(&source, m[0]).unwrap();
        assert_eq!(text, "Fenskorun");
        assert_eq!(&passages[0][at.start..at.end], "Fenskorun");
    }
    // Mid-word: "Fensk" may not end the answer, "orun" may not start one.
    let mut state = SpanState::new(source.clone());
    assert!(!state.allowed().contains(&4));
    state.advance(5);
    assert!(!state.allowed().contains(&END));
    // Nothing absent from the passage: " Thalrau" is not in it.
    assert!(!SpanState::new(source).allowed().contains(&25));
}

#[test]
fn byte_level_pieces_copy_multibyte_characters() {
    let tokens = vocab();
    let passages = ["Thalrau (caf\u{e9}) is a town."];
    let source = Arc::new(SpanSource::new(tokens.clone(), &passages, &[END]).unwrap());
    let mut state = SpanState::new(source.clone());
    state.advance(28); // " caf" (virtual leading space)
    let allowed = state.allowed();
    assert!(allowed.contains(&27) && allowed.contains(&30)); // "é" whole, or its first byte
    assert!(!allowed.contains(&END));
    state.advance(30);
    assert_eq!(state.allowed(), vec![31]); // only the second byte of "é"
    state.advance(31);
    assert!(state.allowed().contains(&END));
    let (text, _) = span_text(&source, state.matches()[0]).unwrap();
    assert_eq!(text, "caf\u{e9}");
}

#[test]
fn spans_stay_in_one_clause_and_do_not_start_with_the_question() {
    let tokens = vocab();
    let passages = ["Born in the town. Fenskorun, the town of Thalrau."];
    let source = Arc::new(
        SpanSource::new(tokens.clone(), &passages, &[END])
            .unwrap()
            .avoiding_start_words(&["town", "Thalrau"]),
    );
    let mut state = SpanState::new(source.clone());
    let first = state.allowed();
    assert!(!first.contains(&11) && !first.contains(&25), "{first:?}"); // " town", " Thalrau"
    assert!(first.contains(&10)); // " the"
    state.advance(10);
    state.advance(11); // "the town" (inside a span a question word is fine)
                       // "the town." stops at its full stop (a clause break); "the town of" goes on.
    assert_eq!(state.allowed(), vec![END, 12, 21]);
    state.advance(12);
    state.advance(25);
    assert_eq!(state.allowed(), vec![END]); // the final full stop
    let mut state = SpanState::new(source);
    state.advance(6); // " fenskorun"
    assert_eq!(state.allowed(), vec![END]); // "," + space breaks the clause
}

#[test]
fn a_number_question_starts_with_a_digit_and_others_do_not() {
    let pieces: Vec<Vec<u8>> = ["", "", " born", " 1878", "1878", " in", " Thalrau"]
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
    let tokens = Arc::new(TokenBytes::from_pieces(pieces));
    let passages = ["born in 1878 in Thalrau"];
    let source = || SpanSource::new(tokens.clone(), &passages, &[END]).unwrap();
    let digits = SpanState::new(Arc::new(source().starting_with_digit(true)));
    assert_eq!(digits.allowed(), vec![3, 4]);
    let words = SpanState::new(Arc::new(source().starting_with_digit(false)));
    assert_eq!(words.allowed(), vec![2, 5, 6]);
    // No digit anywhere: the filter is not applied.
    let none = SpanSource::new(tokens.clone(), &["in Thalrau"], &[END]).unwrap();
    assert_eq!(
        SpanState::new(Arc::new(none.starting_with_digit(true))).allowed(),
        vec![5, 6]
    );
}

#[test]
fn masking_keeps_only_allowed_logits() {
    let mut l = vec![1.0, 2.0, 3.0, 4.0];
    mask_logits(&mut l, &[1, 3]);
    assert_eq!(l, vec![f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY, 4.0]);
}

#[test]
fn byte_level_decoder_inverts_gpt2() {
    let d = byte_level_decoder();
    assert_eq!(d.len(), 256);
    assert_eq!(d[&'\u{120}'], b' '); // "Ġ"
    assert_eq!(d[&'\u{10a}'], b'\n'); // "Ċ"
    assert_eq!(d[&'a'], b'a');
}

#[test]
fn an_empty_span_is_no_answer() {
    let source = SpanSource::new(vocab(), &["Fenskorun, Thalrau."], &[END]).unwrap();
    let m = |start, end| SpanMatch {
        passage: 0,
        start,
        end,
    };
    assert_eq!(span_text(&source, m(9, 11)), None); // ", "
    assert_eq!(span_text(&source, m(0, 0)), None);
    let (text, at) = span_text(&source, m(0, 10)).unwrap(); // "Fenskorun,"
    assert_eq!((text.as_str(), at.start, at.end), ("Fenskorun", 0, 9));
}

#[test]
fn no_passages_no_span() {
    assert!(SpanSource::new(vocab(), &["", "  "], &[END]).is_err());
    assert!(SpanSource::new(vocab(), &["text"], &[]).is_err());
}
