//! Candidate answers: the short spans of the retrieved passages a question could be answered
//! with.
//!
//! Words are split at white space; a clause ends where the reader's copying constraint ends
//! one ([`capstan_reader::is_clause_break`]: sentence punctuation, a comma, a semicolon, a line
//! break, a tab or two spaces) and also at a bracket, so a candidate never runs across one. A
//! candidate starts where a word starts, which is always a place the reader may start a span
//! ([`capstan_reader::may_start`]). Every run of one to [`MAX_WORDS`] words of a clause that neither starts nor
//! ends with a function word is a candidate; so is the whole value of a "Key: value" line
//! (records of fields: metadata, a manual's front matter, a table) and each document's title.

use capstan_reader::{is_clause_break, CLOSERS, OPENERS};
use capstan_retriever::Hit;

use crate::words::NON_ANSWER_STARTS;

/// Quotation marks a value may stand in.
const QUOTES: &[char] = &['"', '\'', '“', '‘', '`', '«'];

/// The most words of a candidate inside a clause.
pub const MAX_WORDS: usize = 6;
/// The most words of a field's whole value kept as one candidate.
pub const MAX_VALUE_WORDS: usize = 16;
/// The longest key of a "Key: value" line, in bytes.
const MAX_KEY_BYTES: usize = 40;

/// A candidate answer: a byte range of a retrieved passage's text (or title).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Index of the passage among the hits.
    pub hit: usize,
    /// Byte range in the passage's text (or title, with `in_title`).
    pub start: usize,
    /// One past its end.
    pub end: usize,
    /// The span is the document's title.
    pub in_title: bool,
    /// Words in the span.
    pub words: usize,
    /// The key of the "Key: value" line the span is the value of, or part of.
    pub key: Option<(usize, usize)>,
    /// The span is the whole value of its line.
    pub whole_value: bool,
    /// The name of the `name=value` word the span is the value of (`sleep` of `sleep=0.25`).
    pub parameter: Option<(usize, usize)>,
    /// Which number of a range (`1879-1955`) the span is.
    pub range: Option<RangeEnd>,
    /// The word before the span, lower-cased, an article passed over ("" at a clause's start).
    pub previous: String,
}

/// The first or the last number of a range ("1879-1955": born 1879, died 1955).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeEnd {
    /// The range's first number.
    First,
    /// Its last.
    Last,
}

impl Candidate {
    /// The span's text.
    pub fn text<'a>(&self, hits: &'a [Hit]) -> &'a str {
        let hit = &hits[self.hit];
        if self.in_title {
            &hit.title[self.start..self.end]
        } else {
            &hit.text[self.start..self.end]
        }
    }
}

/// A word of a passage: its byte range without surrounding punctuation, and whether a clause
/// ends after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Word {
    pub start: usize,
    pub end: usize,
    pub clause_end: bool,
}

/// The words of `text` with their clause ends.
pub(crate) fn words(text: &str) -> Vec<Word> {
    let mut out: Vec<Word> = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // White space between words: a line break, a tab or two spaces end a clause.
        let ws_start = i;
        while i < bytes.len() && (bytes[i] as char).is_ascii_whitespace() {
            i += 1;
        }
        if (ws_start..i).any(|j| is_clause_break(bytes, j)) {
            if let Some(last) = out.last_mut() {
                last.clause_end = true;
            }
        }
        if i >= bytes.len() {
            break;
        }
        let raw_start = i;
        while i < bytes.len() && !(bytes[i] as char).is_ascii_whitespace() {
            i += 1;
        }
        let raw = &text[raw_start..i];
        let lead = raw.len() - raw.trim_start_matches(OPENERS).len();
        let core = &raw[lead..];
        let mut kept = core.trim_end_matches(CLOSERS);
        // "f()" and "Vec<T>" keep their closing bracket when the word opened it.
        for (open, close) in [('(', ')'), ('<', '>'), ('[', ']')] {
            let extra = &core[kept.len()..];
            if kept.contains(open)
                && extra.starts_with(close)
                && kept.matches(open).count() > kept.matches(close).count()
            {
                kept = &core[..kept.len() + close.len_utf8()];
            }
        }
        // An initial's or an honorific's period is part of a name ("George B. Dantzig",
        // "J.R. Bell", "Dr. Ames"), not a sentence's end, where a name goes on after it.
        if core[kept.len()..].starts_with('.')
            && is_abbreviation(kept)
            && next_word_is_capitalised(&text[raw_start + lead + kept.len() + 1..])
        {
            kept = &core[..kept.len() + 1];
        }
        let trailing = &core[kept.len()..];
        let trailing_at = raw_start + lead + kept.len();
        let clause_end = (trailing_at..i).any(|j| is_clause_break(bytes, j))
            || trailing.contains([')', ']', '}', '>'])
            || (lead > 0 && raw[..lead].contains('('));
        if kept.is_empty() {
            if let Some(last) = out.last_mut() {
                last.clause_end |= clause_end || !trailing.is_empty();
            }
            continue;
        }
        // An opening bracket or quote starts a new clause.
        if lead > 0 && raw[..lead].contains(['(', '[', '{']) {
            if let Some(last) = out.last_mut() {
                last.clause_end = true;
            }
        }
        out.push(Word {
            start: raw_start + lead,
            end: raw_start + lead + kept.len(),
            clause_end,
        });
    }
    if let Some(last) = out.last_mut() {
        last.clause_end = true;
    }
    out
}

/// Whether every round, square and curly bracket `span` opens it also closes, and the
/// other way round: a span cut inside a signature ("randbytes(self" of "randbytes(self, n)")
/// is half of something, never an answer (its name before the bracket is a candidate of its
/// own).
fn brackets_balance(span: &str) -> bool {
    [('(', ')'), ('[', ']'), ('{', '}')]
        .iter()
        .all(|&(open, close)| span.matches(open).count() == span.matches(close).count())
}

/// An initial or a run of initials ("B", "J.R") or an honorific that stands before a name.
pub(crate) fn is_abbreviation(word: &str) -> bool {
    let initials = word.split('.').all(|part| {
        let mut chars = part.chars();
        chars.next().is_some_and(|c| c.is_uppercase()) && chars.next().is_none()
    });
    initials || matches!(word, "Mr" | "Mrs" | "Ms" | "Dr" | "Prof" | "St" | "Mt")
}

/// The byte length of the outline number a heading begins with, with the space after it
/// ("A.4. " of "A.4. Knoppix", "2.2. " of "2.2. Master Plan", "Chapter 2. " of "Chapter 2.
/// Presenting the Case Study", "Appendix B. "), where a word follows it. A book's HTML pages
/// and a PDF's headings number their sections; the number says where a section stands, never
/// what it tells. A lone capital needs a number after it ("A.4.") or a word naming the
/// division before it ("Appendix B."), since "A. Smith" is a name.
pub(crate) fn outline_number_len(heading: &str) -> Option<usize> {
    let (named, rest) = ["Chapter ", "Appendix ", "Section ", "Part "]
        .iter()
        .find_map(|w| heading.strip_prefix(w))
        .map_or((false, heading), |r| (true, r));
    let token = rest.split(char::is_whitespace).next()?;
    let after = &rest[token.len()..];
    let number = token.strip_suffix('.').unwrap_or(token);
    let parts: Vec<&str> = number.split('.').collect();
    let digits = |p: &str| (1..=3).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit());
    let letter = |p: &str| p.len() == 1 && p.chars().all(|c| c.is_ascii_uppercase());
    let numbered = parts.iter().skip(1).all(|p| digits(p))
        && (digits(parts[0]) || (letter(parts[0]) && (parts.len() > 1 || named)))
        && (named || token.contains('.'));
    let next = after.trim_start();
    (numbered && next.starts_with(char::is_alphanumeric)).then(|| heading.len() - next.len())
}

/// The byte ranges of the outline numbers that lines of `text` begin with ("A.5. " of "A.5.
/// Aptosid and Siduction"), found once a passage: a span inside one is no answer.
fn outline_numbers(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if let Some(n) = outline_number_len(line) {
            out.push((at, at + n));
        }
        at += line.len();
    }
    out
}

/// Whether `rest` (what follows a period) is one space and a capitalised word.
fn next_word_is_capitalised(rest: &str) -> bool {
    rest.strip_prefix(' ')
        .and_then(|r| r.chars().next())
        .is_some_and(char::is_uppercase)
}

/// A `name=value` word's two sides (`--tpm2-device=PATH`, `sleep=0.25`), as byte offsets
/// within the word: an option or parameter name of letters, digits, `-`, `_` and `.`, and a
/// value that is not empty and is not a second `=` (`a==b`).
fn name_and_value(word: &str) -> Option<(usize, usize)> {
    let eq = word.find('=')?;
    let name = &word[..eq];
    let value = &word[eq + 1..];
    let name_ok = name.chars().any(char::is_alphanumeric)
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    (name_ok && !value.is_empty() && !value.starts_with('=')).then_some((eq, eq + 1))
}

/// A range of two numbers (`1879-1955`, `10–20`, `3.5-4`): the byte offsets within the word of
/// its dash and of the second number.
fn number_range(word: &str) -> Option<(usize, usize)> {
    let (dash, sign) = word
        .char_indices()
        .find(|&(i, c)| i > 0 && matches!(c, '-' | '–'))?;
    let number = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_digit())
            && s.ends_with(|c: char| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | ','))
    };
    let after = dash + sign.len_utf8();
    (number(&word[..dash]) && number(&word[after..])).then_some((dash, after))
}

fn is_function_word(word: &str) -> bool {
    let lower = word.to_lowercase();
    NON_ANSWER_STARTS.contains(&lower.as_str())
}

/// The word before a span, lower-cased, given the words of its clause before it; an article
/// is passed over ("worked as a glassblower": "as"), since the cue is the word that governs
/// the phrase. Empty at a clause's start.
fn previous_word(text: &str, before: &[Word]) -> String {
    let mut it = before
        .iter()
        .rev()
        .map(|w| text[w.start..w.end].to_lowercase());
    match it.next() {
        Some(w) if matches!(w.as_str(), "a" | "an" | "the") => it.next().unwrap_or_default(),
        Some(w) => w,
        None => String::new(),
    }
}

/// Every candidate of every hit (duplicates of the same text at other places included).
pub fn candidates(hits: &[Hit]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (h, hit) in hits.iter().enumerate() {
        let text = hit.text.as_str();
        let words = words(text);
        let fields = fields(text);
        let outlines = outline_numbers(text);
        let in_an_outline_number =
            |start: usize, end: usize| outlines.iter().any(|&(s, e)| s <= start && end <= e);
        let field_at = |pos: usize| {
            fields
                .iter()
                .find(|f| f.value.0 <= pos && pos < f.value.1)
                .map(|f| (f.key, f.value))
        };
        let mut clause_start = 0;
        for i in 0..words.len() {
            for n in 1..=MAX_WORDS.min(i + 1 - clause_start) {
                let first = &words[i + 1 - n];
                let last = &words[i];
                if is_function_word(&text[first.start..first.end])
                    || is_function_word(&text[last.start..last.end])
                    || !brackets_balance(&text[first.start..last.end])
                    || in_an_outline_number(first.start, last.end)
                {
                    continue;
                }
                let field = field_at(first.start);
                let previous = previous_word(text, &words[clause_start..i + 1 - n]);
                out.push(Candidate {
                    hit: h,
                    start: first.start,
                    end: last.end,
                    in_title: false,
                    words: n,
                    key: field.map(|f| f.0),
                    whole_value: field.is_some_and(|f| f.1 == (first.start, last.end)),
                    parameter: None,
                    range: None,
                    previous,
                });
            }
            // A call or signature ("startDocument(self)", "iglob(pathname)") names its
            // function too.
            let w = &words[i];
            // Part of one word: a call's function, a `name=value` word's name or value, a
            // range's numbers.
            let part = |start: usize, end: usize, key, parameter, previous| Candidate {
                hit: h,
                start,
                end,
                in_title: false,
                words: 1,
                key,
                whole_value: false,
                parameter,
                range: None,
                previous,
            };
            if let Some(paren) = text[w.start..w.end].find('(').filter(|&p| p > 0) {
                let key = field_at(w.start).map(|f| f.0);
                out.push(part(w.start, w.start + paren, key, None, String::new()));
            }
            // A `name=value` word holds two answers: the option or parameter's name
            // ("which option sets the device": `--tpm2-device`) and its value, with its name
            // ("the default of sleep": `0.25`).
            if let Some((name_end, value_start)) = name_and_value(&text[w.start..w.end]) {
                let name = (w.start, w.start + name_end);
                let key = field_at(w.start).map(|f| f.0);
                let previous = previous_word(text, &words[clause_start..i]);
                out.push(part(name.0, name.1, key, None, previous));
                // A quoted value (`stop_after='run'`) is read without its quotes, as a
                // quoted word is: the word lost its closing quote with its trailing
                // punctuation, and a span opening on a lone quote reads badly to the reader.
                let value = &text[w.start + value_start..w.end];
                let value_at = w.end - value.trim_start_matches(QUOTES).len();
                if value_at < w.end {
                    out.push(part(value_at, w.end, None, Some(name), String::new()));
                }
            }
            // A range of numbers holds two answers: a life's "1879-1955" says when its person
            // was born and when they died.
            if let Some(dash) = number_range(&text[w.start..w.end]) {
                let key = field_at(w.start).map(|f| f.0);
                let previous = previous_word(text, &words[clause_start..i]);
                let (first, last) = (w.start + dash.0, w.start + dash.1);
                out.push(Candidate {
                    range: Some(RangeEnd::First),
                    ..part(w.start, first, key, None, previous)
                });
                out.push(Candidate {
                    range: Some(RangeEnd::Last),
                    ..part(last, w.end, key, None, String::new())
                });
            }
            if words[i].clause_end {
                clause_start = i + 1;
            }
        }
        // A field's whole value, when it runs across clauses ("MIT OR Apache-2.0, or BSD").
        for f in &fields {
            let n = words
                .iter()
                .filter(|w| f.value.0 <= w.start && w.end <= f.value.1)
                .count();
            if n > 0
                && n <= MAX_VALUE_WORDS
                && !out
                    .iter()
                    .any(|c: &Candidate| c.hit == h && (c.start, c.end) == f.value)
            {
                out.push(Candidate {
                    hit: h,
                    start: f.value.0,
                    end: f.value.1,
                    in_title: false,
                    words: n,
                    key: Some(f.key),
                    whole_value: true,
                    parameter: None,
                    range: None,
                    previous: String::new(),
                });
            }
        }
        // A numbered heading's title answers with its words, not its number ("Knoppix" of
        // "A.4. Knoppix").
        let title = hit.title.trim();
        let title = &title[outline_number_len(title).unwrap_or(0)..];
        if !title.is_empty() && title.split_whitespace().count() <= MAX_VALUE_WORDS {
            let start = hit.title.find(title).unwrap_or(0);
            out.push(Candidate {
                hit: h,
                start,
                end: start + title.len(),
                in_title: true,
                words: title.split_whitespace().count(),
                key: None,
                whole_value: false,
                parameter: None,
                range: None,
                previous: String::new(),
            });
        }
    }
    // A rule or a table's bars ("-----", "|") answer nothing.
    out.retain(|c| c.text(hits).chars().any(char::is_alphanumeric));
    out
}

/// A "Key: value" line: the key's and the value's byte ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    pub key: (usize, usize),
    pub value: (usize, usize),
}

/// The "Key: value" lines of `text`: a key of at most a few words starting with a letter,
/// a colon, then a value on the same line.
pub(crate) fn fields(text: &str) -> Vec<Field> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let body = line.trim_end();
        let indent = body.len() - body.trim_start().len();
        let body_trimmed = &body[indent..];
        let Some(colon) = body_trimmed.find(':') else {
            continue;
        };
        let key = &body_trimmed[..colon];
        let after = &body_trimmed[colon + 1..];
        let ok_key = !key.is_empty()
            && key.len() <= MAX_KEY_BYTES
            && key.chars().next().is_some_and(char::is_alphabetic)
            && key.split_whitespace().count() <= 4
            && key
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.' | '/'));
        // "http://..." is not a key; a value follows after white space.
        if !ok_key || !after.starts_with([' ', '\t']) || after.trim().is_empty() {
            continue;
        }
        let value = after.trim();
        let value_start =
            line_start + indent + colon + 1 + (after.len() - after.trim_start().len());
        let key_start = line_start + indent;
        out.push(Field {
            key: (key_start, key_start + key.len()),
            value: (value_start, value_start + value.len()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(title: &str, text: &str) -> Hit {
        Hit {
            passage_id: "p#0".into(),
            doc_id: "p".into(),
            title: title.into(),
            text: text.into(),
            ..Default::default()
        }
    }

    fn texts(text: &str) -> Vec<String> {
        let hits = [hit("T", text)];
        candidates(&hits)
            .iter()
            .map(|c| c.text(&hits).to_string())
            .collect()
    }

    #[test]
    fn spans_stay_within_clauses_and_skip_function_word_edges() {
        let c = texts("He was born in Othtu, and worked as a glassblower (mostly).");
        assert!(c.contains(&"Othtu".to_string()), "{c:?}");
        assert!(c.contains(&"glassblower".to_string()));
        assert!(c.contains(&"worked as a glassblower".to_string()));
        assert!(c.contains(&"mostly".to_string()));
        assert!(!c.iter().any(|t| t.contains("Othtu, and")), "{c:?}");
        assert!(!c.iter().any(|t| t.starts_with("in ") || t.ends_with(" a")));
        assert!(c.contains(&"T".to_string()), "the title");
    }

    #[test]
    fn the_word_before_a_span_passes_over_an_article() {
        let text = "He was born in Othtu, and worked as a glassblower.";
        let hits = [hit("T", text)];
        let before = |span: &str| {
            candidates(&hits)
                .into_iter()
                .find(|c| !c.in_title && c.text(&hits) == span)
                .map(|c| c.previous)
        };
        assert_eq!(before("glassblower").as_deref(), Some("as"));
        assert_eq!(before("Othtu").as_deref(), Some("in"));
        assert_eq!(before("born").as_deref(), Some("was"));
    }

    #[test]
    fn field_values_are_candidates_with_their_keys() {
        let text = "Name: serde\nAuthors: Erick Tryzelaar <erick.tryzelaar@gmail.com>, David Tolnay\nLicense: MIT OR Apache-2.0\nsee http://x.org: here";
        let hits = [hit("serde", text)];
        let cands = candidates(&hits);
        let find = |t: &str| {
            cands
                .iter()
                .find(|c| c.text(&hits) == t)
                .unwrap_or_else(|| panic!("{t} not in {cands:?}"))
        };
        let lic = find("MIT OR Apache-2.0");
        assert!(lic.whole_value);
        assert_eq!(&text[lic.key.unwrap().0..lic.key.unwrap().1], "License");
        assert_eq!(
            find("Erick Tryzelaar").key.map(|k| &text[k.0..k.1]),
            Some("Authors")
        );
        find("erick.tryzelaar@gmail.com");
        find("David Tolnay");
        assert_eq!(fields(text).len(), 3, "a URL is not a key");
    }

    #[test]
    fn option_lists_end_clauses_at_two_spaces_and_keep_brackets_they_open() {
        let c = texts("-R, -r, --recursive  copy directories recursively\nuse f() and Vec<T>.");
        for want in [
            "--recursive",
            "-R",
            "copy directories recursively",
            "f()",
            "f",
            "Vec<T>",
        ] {
            assert!(c.contains(&want.to_string()), "{want}: {c:?}");
        }
        assert!(!c.iter().any(|t| t.contains("--recursive copy")), "{c:?}");
    }

    #[test]
    fn candidates_follow_the_readers_clause_rule() {
        let texts = [
            "He said.\u{201d} Then (so.) on, the town of Thalrau; 1878.",
            "Name: serde\nAuthor:  Erick \u{201c}Tolnay\u{201d}\t--out=FILE isabs(s).x",
            "Dulcorde's home, e.g. the old one (mostly) [1] \u{ab}Othtu\u{bb}.",
            "Made by George B. Dantzig in 1947. In group A. The end. J.R. Bell wrote it.",
            "United States poet (1879-1955); pages 10\u{2013}20.",
        ];
        for text in texts {
            let hits = [hit("T", text)];
            let p = text.as_bytes();
            for c in candidates(&hits).iter().filter(|c| !c.in_title) {
                // Where a candidate starts, the reader may start a span, but for a range's
                // last number (the reader's spans run on across a dash).
                assert!(
                    capstan_reader::may_start(p, c.start) || c.range == Some(RangeEnd::Last),
                    "{:?} in {text:?}",
                    c.text(&hits)
                );
                // No candidate crosses a clause break, but a field's whole value, which is
                // one answer however it is punctuated ("Authors: A, B"), and a name's
                // initial ("George B. Dantzig").
                let initial = |i: usize| {
                    p[i] == b'.' && text[..i].rsplit(' ').next().is_some_and(is_abbreviation)
                };
                assert!(
                    c.whole_value
                        || !(c.start..c.end).any(|i| is_clause_break(p, i) && !initial(i)),
                    "{:?} in {text:?}",
                    c.text(&hits)
                );
            }
        }
    }

    #[test]
    fn a_span_cut_inside_brackets_is_no_candidate() {
        let all = texts("    randbytes(self, n)\n        Generate n random bytes.");
        assert!(all.contains(&"randbytes".to_string()), "{all:?}");
        assert!(!all.iter().any(|t| t.contains("randbytes(")), "{all:?}");
        let all = texts("It reads maps[0] and calls isreadable(object) here.");
        assert!(all.contains(&"maps[0]".to_string()), "{all:?}");
        assert!(all.contains(&"isreadable(object)".to_string()), "{all:?}");
        assert!(!all.iter().any(|t| t.ends_with("(object")), "{all:?}");
    }

    #[test]
    fn a_name_runs_across_its_initials() {
        let c =
            texts("Simplex was made by George B. Dantzig in 1947. J.R. Bell and Dr. Ames. Plan B.");
        for want in ["George B. Dantzig", "J.R. Bell", "Dr. Ames"] {
            assert!(c.contains(&want.to_string()), "{want}: {c:?}");
        }
        assert!(c.contains(&"George B".to_string()) || c.contains(&"Dantzig".to_string()));
        assert!(
            !c.iter().any(|t| t.contains("1947. J")),
            "a year's period ends: {c:?}"
        );
        assert!(c.contains(&"Plan B".to_string()), "{c:?}");
    }

    #[test]
    fn a_name_value_word_gives_its_name_and_its_value_keyed_by_the_name() {
        let text = "--tpm2-device=PATH  use this device\nbackup(target, sleep=0.25) and a==b";
        let hits = [hit("T", text)];
        let cands = candidates(&hits);
        let find = |t: &str| cands.iter().find(|c| c.text(&hits) == t);
        assert!(find("--tpm2-device").is_some(), "{cands:?}");
        let value = find("0.25").expect("the value");
        assert_eq!(value.parameter.map(|k| &text[k.0..k.1]), Some("sleep"));
        assert!(find("sleep").is_some());
        assert!(find("=b").is_none() && find("a").is_none());
        assert!(texts("x\n---- | ----\ny")
            .iter()
            .all(|t| t != "----" && t != "|"));
    }

    #[test]
    fn a_quoted_value_is_read_without_its_quotes() {
        let text = "run_setup(script_name, stop_after='run')\nenable(display=1, format=\"html\")";
        let hits = [hit("T", text)];
        let cands = candidates(&hits);
        let value = cands
            .iter()
            .find(|c| c.text(&hits) == "run")
            .filter(|c| c.parameter.is_some())
            .unwrap_or_else(|| panic!("{cands:?}"));
        assert_eq!(value.parameter.map(|k| &text[k.0..k.1]), Some("stop_after"));
        let words: Vec<&str> = cands.iter().map(|c| c.text(&hits)).collect();
        assert!(words.contains(&"html"), "{words:?}");
        assert!(
            !words.iter().any(|w| w.starts_with(['\'', '"'])),
            "no span opens on a lone quote: {words:?}"
        );
    }

    #[test]
    fn a_heading_s_outline_number_is_no_answer_and_leaves_its_title() {
        assert_eq!(outline_number_len("A.4. Knoppix"), Some(5));
        assert_eq!(outline_number_len("2.2.\u{a0}Master Plan"), Some(6));
        assert_eq!(
            outline_number_len("Chapter 2. Presenting the Case Study"),
            Some(11)
        );
        assert_eq!(
            outline_number_len("Appendix B. Short Remedial Course"),
            Some(12)
        );
        assert_eq!(outline_number_len("1.6.5 The Oldstable Status"), Some(6));
        for not in [
            "A. Smith",
            "3 Musketeers",
            "2.2.",
            "Chapter",
            "v1.2 notes",
            "1.5.1.7.x y",
        ] {
            assert_eq!(outline_number_len(not), None, "{not}");
        }
        let hit = hit(
            "A.4. Knoppix",
            "Next\nA.5. Aptosid and Siduction\nAptosid was known as Sidux in 2.2 days.",
        );
        let all = candidates(std::slice::from_ref(&hit));
        let texts: Vec<&str> = all
            .iter()
            .map(|c| c.text(std::slice::from_ref(&hit)))
            .collect();
        assert!(!texts.contains(&"A.5"), "{texts:?}");
        assert!(texts.contains(&"Aptosid and Siduction"));
        assert!(texts.contains(&"2.2"), "a number inside a sentence stays");
        let title = all.iter().find(|c| c.in_title).unwrap();
        assert_eq!(title.text(std::slice::from_ref(&hit)), "Knoppix");
        assert_eq!(title.words, 1);
    }

    #[test]
    fn a_range_of_numbers_gives_its_first_and_its_last() {
        let text =
            "United States poet (1879-1955); pages 10\u{2013}20, 3.5-4 and Apache-2.0 or x-1.";
        let hits = [hit("T", text)];
        let cands = candidates(&hits);
        let side = |t: &str| {
            cands
                .iter()
                .find(|c| c.text(&hits) == t)
                .unwrap_or_else(|| panic!("{t}: {cands:?}"))
                .range
        };
        assert_eq!(side("1879"), Some(RangeEnd::First));
        assert_eq!(side("1955"), Some(RangeEnd::Last));
        assert_eq!(side("1879-1955"), None, "the whole range stays a candidate");
        assert_eq!(side("10"), Some(RangeEnd::First));
        assert_eq!(side("20"), Some(RangeEnd::Last));
        assert_eq!(side("4"), Some(RangeEnd::Last));
        let words: Vec<&str> = cands.iter().map(|c| c.text(&hits)).collect();
        assert!(
            !words.contains(&"2.0") && !words.contains(&"1"),
            "{words:?}"
        );
        assert_eq!(number_range("1879-1955"), Some((4, 5)));
        assert_eq!(number_range("-5"), None);
        assert_eq!(number_range("5-"), None);
        assert_eq!(number_range("1-2-3"), None);
    }
}
