//! What a span's own words and the words right beside it say, read apart from the question:
//! an agent's noun, a stated default, a clause, a name or phrase cut short, an option with its
//! argument, a call. The answer ranker's features ([`super::features`]) weigh them.

use super::shape::Shape;
use crate::words::{NON_ANSWER_STARTS, NOT_AGENTS};

/// Bytes before a span within which "default" states it.
const DEFAULT_REACH: usize = 24;

/// Suffixes of English nouns of agents: -er, -or, -ist, -ian, -eer, -ant, -man, -smith, -wright.
const AGENT_SUFFIXES: &[&str] = &[
    "er", "or", "ist", "ian", "eer", "ant", "man", "smith", "wright",
];

/// Whether `text`'s last word (its last run of ASCII letters) is a small-letter word of five
/// letters or more with an agent's suffix ("glassblower", "zoologist"; not "Miller", a name,
/// nor "cheaper", a comparative).
pub(super) fn is_agent_noun(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .rfind(|w| !w.is_empty())
        .is_some_and(|w| {
            w.len() >= 5
                && w.bytes().all(|b| b.is_ascii_lowercase())
                && AGENT_SUFFIXES.iter().any(|s| w.ends_with(s))
                && !NOT_AGENTS.contains(&w)
        })
}

/// Whether "default" (or "defaults", "Default") stands within [`DEFAULT_REACH`] bytes before
/// byte `start` of `text`, with no sentence's end, line break or number between, and the span
/// is not one of the words that join a default to its value ([`DEFAULT_JOINERS`]) ("Default
/// is 48", "(default: 5)", "defaults to 1.0", "the default value is 2.0"; not "default. 5", a
/// default on the line above, "value" of "default value" nor "seconds" of "default is 60
/// seconds": the value came first).
pub(super) fn follows_default(text: &str, start: usize) -> bool {
    let mut from = start.saturating_sub(DEFAULT_REACH);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let before = text[from..start].to_lowercase();
    before.rfind("default").is_some_and(|at| {
        let between = &before[at + "default".len()..];
        let first_word = text[start..]
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("")
            .to_lowercase();
        !between.contains(['.', ';', '\n', '!', '?'])
            && !between.contains(|c: char| c.is_ascii_digit())
            && !DEFAULT_JOINERS.contains(&first_word.as_str())
    })
}

/// Words that join "default" to the value it states: "defaults to", "the default value is",
/// "default setting of", "default is set to".
const DEFAULT_JOINERS: &[&str] = &[
    "s", "is", "to", "value", "values", "setting", "settings", "of", "be", "will", "set", "are",
    "was", "it",
];

/// Whether `text` has a copula inside it, past its first word and before its last ("Brinve
/// was a celebrated painter", not "was" alone or "is_dir").
pub(super) fn holds_a_clause(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.len() >= 3
        && words[1..words.len() - 1]
            .iter()
            .any(|w| matches!(*w, "is" | "are" | "was" | "were"))
}

/// Whether the span `start..end` of `text` has a capitalised word right beside it, one space
/// away and not a function word ("In Othtu" is a whole name; "Martin Klapetek" is not
/// "Klapetek").
pub(super) fn cuts_a_name(text: &str, start: usize, end: usize) -> bool {
    let capitalised = |w: &str| {
        w.starts_with(|c: char| c.is_uppercase())
            && w.chars().all(char::is_alphanumeric)
            && !NON_ANSWER_STARTS.contains(&w.to_lowercase().as_str())
    };
    let before = text[..start]
        .strip_suffix(' ')
        .filter(|b| !b.ends_with(char::is_whitespace))
        .and_then(|b| b.rsplit(char::is_whitespace).next())
        .is_some_and(capitalised);
    before || next_word(text, end).is_some_and(capitalised)
}

/// The word one space after byte `end` of `text`, its closing punctuation left off ("mine" in
/// "lighting| mine galleries", "Project" in "GNOME| Project."); none past a line break, two
/// spaces or punctuation.
pub(super) fn next_word(text: &str, end: usize) -> Option<&str> {
    text[end..]
        .strip_prefix(' ')
        .and_then(|a| a.split(char::is_whitespace).next())
        .map(|w| w.trim_end_matches([',', '.', ';', ':', ')', '!', '?']))
}

/// Whether a small-letter content word follows byte `end` of `text`, one space away ("mine"
/// after "lighting" in "lighting mine galleries"; not "for" nor "Othtu", nor a word after a
/// comma).
pub(super) fn cuts_a_phrase(text: &str, end: usize) -> bool {
    let ends_in_a_letter = text[..end].ends_with(char::is_alphanumeric);
    let next = next_word(text, end).unwrap_or("");
    ends_in_a_letter
        && next.starts_with(|c: char| c.is_lowercase())
        && next.chars().all(|c| c.is_alphabetic() || c == '-')
        && !NON_ANSWER_STARTS.contains(&next)
}

/// Whether `text` is a command-line option followed by its argument ("--context=N",
/// "--port tcp-port", "-o output_file", "--signed-tags=(verbatim|warn)").
pub(super) fn is_option_with_argument(text: &str) -> bool {
    Shape::of(text) == Shape::Option && text.contains(['=', ' ', '<', '['])
}

/// Whether `text` is a call with its arguments, `name(args)` ("is_dir(self)"): a question
/// naming a function or method is answered by its name, which is a candidate of its own.
pub(super) fn is_call_with_arguments(text: &str) -> bool {
    let Some(inner) = text.strip_suffix(')') else {
        return false;
    };
    let Some((name, args)) = inner.split_once('(') else {
        return false;
    };
    !name.is_empty()
        && !args.trim().is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | ':'))
}

/// Bytes before a parameter searched for the opening bracket of its signature.
const SIGNATURE_REACH: usize = 400;

/// The function whose signature holds the parameter named at `start` of `text`: the name
/// before the innermost bracket left open before it ("run_setup" for `stop_after` in
/// "run_setup(script_name, stop_after='run')"), its last dotted part ("del_param" of
/// "Message.del_param("); none where no bracket opens on the lines before it within reach.
pub(super) fn signature_function(text: &str, start: usize) -> Option<&str> {
    name_before(text, bracket_open_before(text, start)?)
}

/// The innermost round bracket left open before `start` of `text`, on the lines of its
/// paragraph within [`SIGNATURE_REACH`].
fn bracket_open_before(text: &str, start: usize) -> Option<usize> {
    let floor = start.saturating_sub(SIGNATURE_REACH);
    let mut depth = 0usize;
    for (i, c) in text[..start].char_indices().rev() {
        if i < floor {
            break;
        }
        match c {
            ')' | ']' => depth += 1,
            '(' | '[' if depth > 0 => depth -= 1,
            '(' => return Some(i),
            '\n' if text[..i].ends_with('\n') => break,
            _ => {}
        }
    }
    None
}

/// The name right before the bracket at `open` of `text`, where one is ("del_param" of
/// "Message.del_param(", none of "value (").
fn name_before(text: &str, open: usize) -> Option<&str> {
    let before = &text[..open];
    let name_start = before
        .char_indices()
        .rev()
        .take_while(|&(_, c)| c.is_alphanumeric() || c == '_')
        .last()
        .map(|(i, _)| i)?;
    Some(&before[name_start..])
}

/// Whether the span `start..end` of `text` lies inside a signature's or a call's brackets: a
/// function's bracket is left open before it ([`signature_function`]; a bracket with no name
/// before it is an aside's, "(see below"), or, where the passage begins inside a signature
/// that runs over lines ("order=False, unsafe_hash=False, …)" with its "dataclass(" in the
/// passage before), a bracket it did not open closes after it, before a blank line and
/// within [`SIGNATURE_REACH`].
pub(super) fn inside_a_signature(text: &str, start: usize, end: usize) -> bool {
    if let Some(open) = bracket_open_before(text, start) {
        return name_before(text, open).is_some();
    }
    let mut reach = text.len().min(end + SIGNATURE_REACH);
    while !text.is_char_boundary(reach) {
        reach -= 1;
    }
    let mut depth = 0usize;
    for (i, c) in text[end..reach].char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' if depth > 0 => depth -= 1,
            ')' => return true,
            ']' => return false,
            '\n' if text[end + i + 1..].starts_with('\n') => return false,
            _ => {}
        }
    }
    false
}

/// Extensions of the files documentation is written in.
const DOCUMENT_EXTENSIONS: &[&str] = &[
    "md", "markdown", "rst", "txt", "adoc", "asciidoc", "html", "htm", "pod", "tex",
];

/// Whether a document's title is the name of its file, not what it is about: a word of it is
/// a documentation file's name ("python3-httplib2 README.md", "bash README.Debian", "dpkg
/// triggers.txt") or a relative path to one ("book/ch03-05-control-flow"). Such a title names
/// where the text was found, which answers no question about what the text says; a title
/// that is a name ("http.client", "Attributes", "pngtopnm") may be what a question asks for.
pub(super) fn names_a_file(title: &str) -> bool {
    title.split_whitespace().any(|word| {
        let is_doc_file = word.starts_with("README")
            || word.rsplit_once('.').is_some_and(|(stem, ext)| {
                !stem.is_empty() && DOCUMENT_EXTENSIONS.contains(&ext.to_lowercase().as_str())
            });
        // A path's parts are a file system's names: small letters, digits and "-_.", and
        // its last part a file's ("deprecated-and-removed"), not a word ("if/else").
        let parts: Vec<&str> = word.split('/').collect();
        let is_relative_path = parts.len() >= 2
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
            })
            && parts.last().is_some_and(|p| p.contains(['-', '_']));
        !word.contains("://") && (is_doc_file || is_relative_path)
    })
}

/// Whether a document's `title` is a heading rather than the name of what it describes: a
/// numbered heading ("1.3. The Inner Workings of the Debian Project"), or the heading of the
/// section the passage begins in ("Preface" over the preface's paragraphs). A page, a PDF or
/// a chapter of a book is titled by its first heading, which says what its text tells; a
/// record's or an article's title ("xsane", "Ada Lovelace") names its subject. A title that
/// is merely a line of the text is no heading: a manual's synopsis may be its command alone.
pub(super) fn title_is_a_heading(title: &str, section: Option<&str>) -> bool {
    let title = title.trim();
    !title.is_empty()
        && (super::candidates::outline_number_len(title).is_some()
            || section.is_some_and(|s| s.trim() == title))
}

/// Whether `span` is one plain word, the plural of a word of `question` that the question
/// does not spell in the plural itself ("Attributes" for "Which attribute …", "Classes" for
/// "which class …"). A plain word is letters, capitalised or not, without the inner capitals
/// of an identifier ("ExpatBuilderNS" is no plural of "ExpatBuilder").
pub(super) fn is_plural_of_a_word_in(span: &str, question: &str) -> bool {
    let mut letters = span.chars();
    let plain = letters.next().is_some_and(char::is_alphabetic)
        && letters.all(|c| c.is_lowercase() && c.is_alphabetic());
    let word = span.to_lowercase();
    if !plain || !word.ends_with('s') {
        return false;
    }
    let question_words: Vec<String> = question
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let singulars = [word.strip_suffix("es"), word.strip_suffix('s')];
    !question_words.contains(&word)
        && singulars
            .into_iter()
            .flatten()
            .any(|s| s.len() >= 3 && question_words.iter().any(|w| w == s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_inside_a_signature_is_told_from_one_beside_or_in_an_aside() {
        let inside = |text: &str, span: &str| {
            let at = text.find(span).unwrap();
            inside_a_signature(text, at, at + span.len())
        };
        let cut = "order=False, unsafe_hash=False, frozen=False)\n    Returns a dataclass.";
        assert!(
            inside(cut, "unsafe_hash=False"),
            "the passage begins inside it"
        );
        assert!(!inside(cut, "Returns"));
        let whole = "    getProperty(self, name)\n        Looks up the value (see setProperty).";
        assert!(inside(whole, "name"));
        assert!(!inside(whole, "getProperty"));
        assert!(
            !inside(whole, "setProperty"),
            "an aside's bracket has no name before it"
        );
        assert!(
            !inside("run it\n\nthen stop)", "run"),
            "a blank line ends the reach"
        );
        // The reach ends inside no character, on either side.
        for pad in 0..4 {
            let text = format!("{}x{}", "’".repeat(200 + pad), "’".repeat(200));
            let at = text.find('x').unwrap();
            for start in [at, at + 1] {
                let _ = inside_a_signature(&text, start, start);
            }
        }
    }

    #[test]
    fn a_parameter_is_found_in_its_function_signature() {
        let text = "    run_setup(script_name, script_args=None, stop_after='run')\n\
                    Message.del_param(self, param, header='content-type', f=g(1, 2), x=3)\n\
                    (bare=1)\n\nlater=2";
        let at = |name: &str| signature_function(text, text.find(name).unwrap());
        assert_eq!(at("stop_after"), Some("run_setup"));
        assert_eq!(at("script_args"), Some("run_setup"));
        assert_eq!(at("header"), Some("del_param"));
        assert_eq!(
            at("x=3"),
            Some("del_param"),
            "a call among the defaults is passed over"
        );
        assert_eq!(at("bare"), None, "a bracket with no name before it");
        assert_eq!(at("later"), None, "a blank line ends the search");
    }

    #[test]
    fn a_plural_of_a_question_word_is_the_kind_asked_about() {
        let q = "Which attribute may be applied to an implementation of a class?";
        assert!(is_plural_of_a_word_in("Attributes", q));
        assert!(is_plural_of_a_word_in("classes", q));
        assert!(
            !is_plural_of_a_word_in("attribute", q),
            "the singular itself"
        );
        assert!(!is_plural_of_a_word_in(
            "ExpatBuilderNS",
            "Which ExpatBuilder class?"
        ));
        assert!(!is_plural_of_a_word_in(
            "Attributes",
            "Which attributes may be applied?"
        ));
        assert!(
            !is_plural_of_a_word_in("as", "What is a class?"),
            "too short a stem"
        );
        assert!(!is_plural_of_a_word_in("derives", q));
    }

    #[test]
    fn a_title_naming_a_file_is_told_from_a_name() {
        for file in [
            "python3-httplib2 README.md",
            "bash README.Debian",
            "dpkg triggers.txt",
            "python3-pip configuration-files.rst",
            "book/ch03-05-control-flow",
            "cargo/commands/deprecated-and-removed",
            "README",
        ] {
            assert!(names_a_file(file), "{file}");
        }
        for name in [
            "http.client",
            "Attributes",
            "if/else",
            "Debian GNU/Linux",
            "access.conf",
            "/etc/adduser.conf",
            "Node.js",
            "(http://example.org/faq.html)}.",
        ] {
            assert!(!names_a_file(name), "{name}");
        }
    }
}
