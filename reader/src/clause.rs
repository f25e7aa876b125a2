//! Where a short answer may start and where it must stop, written once: the reader's copying
//! constraint ([`crate::SpanSource`]) and the engine's candidate spans both take these rules.
//!
//! A short answer stays within one clause. A clause ends at a line break, a tab, a second space
//! in a row (the columns of a table or of a manual's option list), or at `.,;:!?` followed by
//! white space or the end of the text, closing brackets and quotes between them passed over
//! (`said.”` ends a clause as `said.` does).

/// Characters that may open a word and are not part of it (`(1856)`, `“Othtu”`).
pub const OPENERS: &[char] = &['(', '[', '{', '"', '\'', '“', '‘', '<', '*', '`', '«'];
/// Characters that may close a word and are not part of it: clause punctuation, closing
/// brackets and quotes.
pub const CLOSERS: &[char] = &[
    '.', ',', ';', ':', '!', '?', ')', ']', '}', '"', '\'', '”', '’', '>', '*', '`', '»',
];
/// Besides white space and [`OPENERS`], what a span may start right after inside a run of
/// text: a path separator, an option's `=`, a key's `:` and list separators
/// (`--output=FILE`, `/usr/share/doc`, `a,b`).
const SEPARATORS: &[u8] = b"/=:,;";

/// Letters, digits and every byte of a multi-byte character.
pub(crate) fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b >= 0x80
}

/// A byte inside a multi-byte character, after its first.
pub(crate) fn is_continuation(b: u8) -> bool {
    (0x80..0xC0).contains(&b)
}

/// The length of the [`CLOSERS`] character `text` starts with, if it starts with one.
fn closer_len(text: &[u8]) -> Option<usize> {
    CLOSERS
        .iter()
        .find(|c| text.starts_with(c.encode_utf8(&mut [0; 4]).as_bytes()))
        .map(|c| c.len_utf8())
}

/// Whether the text before `s` ends with one of [`OPENERS`].
fn after_opener(text: &[u8], s: usize) -> bool {
    OPENERS.iter().any(|c| {
        let mut buf = [0; 4];
        text[..s].ends_with(c.encode_utf8(&mut buf).as_bytes())
    })
}

/// Whether a clause ends at byte `i` of `text`: a span must stop before it.
pub fn is_clause_break(text: &[u8], i: usize) -> bool {
    match text[i] {
        b'\n' | b'\t' => true,
        b' ' => i > 0 && text[i - 1] == b' ',
        b'.' | b',' | b';' | b':' | b'!' | b'?' => {
            let mut j = i + 1;
            while let Some(n) = closer_len(&text[j..]) {
                j += n;
            }
            text.get(j).is_none_or(|b| b.is_ascii_whitespace())
        }
        _ => false,
    }
}

/// Whether a span may start at byte `s` of `text`: at its start, after white space, after one
/// of [`OPENERS`], or after a separator (`/`, `=`, `:`, `,`, `;`). Not inside a word or a
/// hyphenated name (`profgen` of `llvm-profgen`, the second `-` of `--verify`), nor at the `s`
/// of `Dulcorde's`.
pub fn may_start(text: &[u8], s: usize) -> bool {
    let b = text[s];
    if b.is_ascii_whitespace() || is_continuation(b) {
        return false;
    }
    if s == 0 {
        return true;
    }
    let prev = text[s - 1];
    if prev == b'\'' && s >= 2 && is_word(text[s - 2]) {
        return false;
    }
    prev.is_ascii_whitespace() || SEPARATORS.contains(&prev) || after_opener(text, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaks(text: &str) -> Vec<usize> {
        (0..text.len())
            .filter(|&i| is_clause_break(text.as_bytes(), i))
            .collect()
    }

    #[test]
    fn clauses_end_at_punctuation_before_space_and_at_columns() {
        assert_eq!(breaks("Born in 1878, in Thalrau."), vec![12, 24]);
        assert_eq!(breaks("e.g. this"), vec![3]);
        assert_eq!(breaks("-v  verbose\tx\ny"), vec![3, 11, 13]);
        // Closing quotes and brackets between the stop and the space are passed over.
        assert_eq!(breaks("he said.\u{201d} Then (so.) on"), vec![7, 20]);
        assert_eq!(breaks("isabs(s).x"), Vec::<usize>::new());
    }

    #[test]
    fn spans_start_after_space_openers_and_separators_only() {
        let text = "llvm-profgen (“Othtu”) --out=FILE Dulcorde's /usr/doc";
        let starts: Vec<&str> = (0..text.len())
            .filter(|&s| text.is_char_boundary(s) && may_start(text.as_bytes(), s))
            .map(|s| &text[s..])
            .map(|rest| rest.split([' ', '”', ')', '=', '\'', '/']).next().unwrap())
            .collect();
        assert_eq!(
            starts,
            [
                "llvm-profgen",
                "(“Othtu",
                "“Othtu",
                "Othtu",
                "--out",
                "FILE",
                "Dulcorde",
                "",
                "usr",
                "doc"
            ]
        );
    }
}
