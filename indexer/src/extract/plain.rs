//! The sections of a plain text (a `.txt` or `.md` file, a JSONL or BEIR record), read from
//! its lines, so that a passage that begins inside one is cited by its heading and keeps
//! what it belongs to: a method cut off from its class still knows the class.
//!
//! Three kinds of line begin a section:
//! - a Markdown ATX heading ("## Installing") after a blank line, outside a fenced block;
//! - a manual page's or pydoc's section heading: a line of capital words at the margin
//!   ("SYNOPSIS", "EXIT STATUS", "CLASSES");
//! - a code container's declaration whose body follows indented ("class Blob(object)" over
//!   "|  read(self, length=-1, /)" in pydoc; "struct Config {" over its fields).

use super::{Layout, Section};

/// Words that open a declaration of members.
const CONTAINER_WORDS: &[&str] = &["class", "struct", "trait", "interface", "impl", "enum"];

/// At most this many words in a heading of capitals: a longer line of capitals is shouted
/// prose or a list of names, not a heading.
const MAX_CAPITAL_WORDS: usize = 5;

/// The sections of `text`, in order, at character offsets.
pub fn sections(text: &str) -> Layout {
    let lines: Vec<(usize, &str)> = lines_with_offsets(text).collect();
    let mut sections = Vec::new();
    let mut fenced = false;
    let mut after_blank = true;
    // Characters before the current line, counted as lines pass (a document may hold
    // thousands of headings: counting from the start for each would be quadratic).
    let mut chars_before = 0;
    let mut counted_to = 0;
    for (i, &(byte, line)) in lines.iter().enumerate() {
        chars_before += text[counted_to..byte].chars().count();
        counted_to = byte;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            after_blank = true;
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            after_blank = false;
            continue;
        }
        let heading = if fenced {
            None
        } else if after_blank && is_atx_heading(line) {
            Some(
                trimmed
                    .trim_start_matches('#')
                    .trim()
                    .trim_end_matches('#')
                    .trim(),
            )
        } else if (line == trimmed && is_capitals_heading(trimmed))
            || (is_container(trimmed) && body_follows(line, &lines[i + 1..]))
        {
            Some(trimmed)
        } else {
            None
        };
        if let Some(heading) = heading.filter(|h| !h.is_empty()) {
            sections.push(Section {
                char_start: chars_before,
                heading: heading.to_string(),
            });
        }
        after_blank = false;
    }
    Layout {
        page_starts: Vec::new(),
        sections,
    }
}

/// Each line of `text` with the byte offset where it begins ("\r" kept off).
fn lines_with_offsets(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    text.split('\n').map(move |line| {
        let start = at;
        at += line.len() + 1;
        (start, line.strip_suffix('\r').unwrap_or(line))
    })
}

/// "# Title" to "###### Title": one to six hashes at the margin, a space, a word.
fn is_atx_heading(line: &str) -> bool {
    let hashes = line.len() - line.trim_start_matches('#').len();
    (1..=6).contains(&hashes)
        && line[hashes..].starts_with(' ')
        && !line[hashes..].trim().is_empty()
}

/// One to [`MAX_CAPITAL_WORDS`] words of capital letters (with "-", "/", "&" or "'"
/// inside), at least three letters in all: "NAME", "SEE ALSO", "EXIT STATUS".
fn is_capitals_heading(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let letters: usize = line.chars().filter(|c| c.is_alphabetic()).count();
    !words.is_empty()
        && words.len() <= MAX_CAPITAL_WORDS
        && letters >= 3
        && words.iter().all(|w| {
            w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || matches!(c, '-' | '/' | '&' | '\''))
        })
}

/// Whether a line (trimmed) declares a container of members: "class Blob(builtins.object)",
/// "pub struct Config {", "impl<T> Display for Wrapper<T> {".
pub fn is_container(trimmed: &str) -> bool {
    let mut words = trimmed
        .split_whitespace()
        .skip_while(|w| matches!(*w, "pub" | "export" | "public" | "abstract" | "final"));
    words.next().is_some_and(|w| {
        let w = w.split('<').next().unwrap_or(w);
        CONTAINER_WORDS.contains(&w)
    }) && words.next().is_some()
}

/// The indentation of a line: its leading blanks and pydoc's "|" rules.
fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t', '|']).len()
}

/// Whether the next line that is not blank is indented deeper than `line`: the
/// declaration has a body.
fn body_follows(line: &str, rest: &[(usize, &str)]) -> bool {
    rest.iter()
        .map(|(_, l)| *l)
        .find(|l| !l.trim().is_empty())
        .is_some_and(|next| indentation(next) > indentation(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headings(text: &str) -> Vec<(usize, String)> {
        sections(text)
            .sections
            .into_iter()
            .map(|s| (s.char_start, s.heading))
            .collect()
    }

    #[test]
    fn pydoc_classes_and_capitals_begin_sections() {
        let text = "NAME\n    sqlite3 - The sqlite3 extension module.\n\nCLASSES\n    \
                    builtins.object\n        Blob\n\n    class Blob(builtins.object)\n     |  \
                    Methods defined here:\n     |\n     |  seek(self, offset, origin=0, /)\n     \
                    |      Set the current access position to offset.\n\nFUNCTIONS\n    \
                    connect(database)\n";
        let found = headings(text);
        let names: Vec<&str> = found.iter().map(|(_, h)| h.as_str()).collect();
        assert_eq!(
            names,
            [
                "NAME",
                "CLASSES",
                "class Blob(builtins.object)",
                "FUNCTIONS"
            ]
        );
        let blob = found[2].0;
        let from_blob: String = text.chars().skip(blob).collect();
        assert!(
            from_blob.trim_start().starts_with("class Blob"),
            "{from_blob:?}"
        );
        let layout = sections(text);
        let seek = text.find("seek").unwrap();
        assert_eq!(
            layout.section_at(text[..seek].chars().count()),
            Some("class Blob(builtins.object)")
        );
    }

    #[test]
    fn markdown_headings_outside_fences_and_offsets_in_characters() {
        let text = "Café notes\n\n## Installing\nRun it.\n\n```sh\n# not a heading\n```\n\n\
                    # Usage #\nclass words in prose stay prose\n";
        let found = headings(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0], (12, "Installing".to_string()));
        assert_eq!(found[1].1, "Usage");
    }

    #[test]
    fn prose_and_records_have_no_sections() {
        for text in [
            "Package: dynamite\nVersion: 0.1\nSection: utils\n",
            "The class of 1912 met in June.\nIt was a class with a body.\n",
            "CVE-2019-1349, CVE-2019-1350\nNASA AND THE ESA AND THE JAXA AGREED TODAY\n",
            "class\n    indented\n",
            "    class Foo:\n    pass\n",
        ] {
            assert!(headings(text).is_empty(), "{text:?}: {:?}", headings(text));
        }
    }

    #[test]
    fn a_rust_struct_with_a_body_is_a_section() {
        let text = "pub struct Config {\n    pub name: String,\n}\n";
        assert_eq!(headings(text)[0].1, "pub struct Config {");
    }
}
