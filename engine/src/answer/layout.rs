//! Definition lists as plain text lays them out: a term on a line of its own and its
//! definition on the lines below, indented deeper (a manual page's options and environment
//! variables, pydoc's functions and methods, reStructuredText's and Markdown's definition
//! lists, a glossary). A question asking which term does something is answered by the term
//! whose definition says it, which may lie further from the term than the words around a span
//! reach; and a heading over such a list ("FUNCTIONS", "OPTIONS") is a term of none. Where a
//! converter flattened the margins away (a manual page as text, `--help` pasted into a README),
//! a line of command-line options alone is still a term: its definition runs to the next such
//! line or heading.

use std::ops::Range;

use capstan_indexer::extract::plain::is_container;

/// What a line is in a definition list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineRole {
    /// A term: the lines below it, indented deeper, define it.
    Term {
        /// The bytes of those lines.
        definition: Range<usize>,
    },
    /// A heading: a line of capitals at the margin ("NAME", "SEE ALSO"), or one over a list
    /// of terms (the line below it, indented deeper, is a term itself).
    Heading,
    /// Anything else.
    Plain,
}

/// The indentation of `line`: its leading spaces and tabs, and the bars some formats draw down
/// a margin (pydoc's `" |  "`), counted as columns.
fn indent(line: &str) -> usize {
    line.chars()
        .take_while(|c| matches!(c, ' ' | '\t' | '|'))
        .map(|c| if c == '\t' { 8 } else { 1 })
        .sum()
}

/// Whether `line` holds nothing but margin.
fn blank(line: &str) -> bool {
    line.chars().all(|c| matches!(c, ' ' | '\t' | '|' | '\r'))
}

/// Whether `line` is words of capital letters only ("NAME", "SEE ALSO"; not "LC_ALL", "I/O").
fn in_capitals(line: &str) -> bool {
    let line = line.trim_end();
    line.chars().filter(char::is_ascii_uppercase).count() >= 2
        && line.chars().all(|c| c.is_ascii_uppercase() || c == ' ')
}

/// Whether `word` is a command-line flag: one or two hyphens, then a letter or digit (`-u`,
/// `--user`, `-error-threshold=float`, `-1`; not `-` or `--`), a comma after it allowed.
fn is_flag(word: &str) -> bool {
    let word = word.trim_end_matches(',');
    let name = word.trim_start_matches('-');
    (1..=2).contains(&(word.len() - name.len()))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Whether `line` names command-line options and nothing else: alternatives separated by
/// commas, each a flag with at most an argument after it ("-u, --user LOGIN", "-d
/// destination"). A sentence that starts with a flag ends in a full stop or runs on for more
/// words.
fn names_options(line: &str) -> bool {
    /// Words on an options line at most: two flags, their arguments and a spare.
    const MAX_WORDS: usize = 6;
    let line = line.trim_matches([' ', '\t', '|', '\r']);
    !line.is_empty()
        && !line.ends_with(['.', ':', ';'])
        && line.split_whitespace().count() <= MAX_WORDS
        && line.split(", ").all(|alternative| {
            let mut words = alternative.split_whitespace();
            words.next().is_some_and(is_flag) && words.count() <= 1
        })
}

/// Where the words after the flag that leads `line` start, when a flag named by a letter leads
/// it and its definition follows on the same line ("-r Run recursively; …", as manual pages lay
/// out short options). A line naming options alone, or a number ("-1 is returned"), has none.
fn definition_after_flag(line: &str) -> Option<usize> {
    // Trimmed of every kind of space (a no-break or em space too), so that the first word
    // split off below starts where `body` does.
    let body = line.trim_start_matches(|c: char| c.is_whitespace() || c == '|');
    let word = body.split_whitespace().next()?;
    let named_by_a_letter = word
        .trim_start_matches('-')
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic());
    if !is_flag(word) || !named_by_a_letter || names_options(line) {
        return None;
    }
    let after = line.len() - body.len() + word.len();
    let rest = &line[after..];
    Some(after + (rest.len() - rest.trim_start().len()))
}

/// Whether a flag leads `line`: it names options, or an option and its definition, and so
/// starts a term of its own.
pub fn led_by_a_flag(line: &str) -> bool {
    line.split_whitespace().next().is_some_and(is_flag)
}

/// The lines of `text` from byte `from` on, each with its byte offset.
fn lines_from(text: &str, from: usize) -> impl Iterator<Item = (usize, &str)> {
    text[from..].split('\n').scan(from, |at, line| {
        let start = *at;
        *at += line.len() + 1;
        Some((start, line))
    })
}

/// The byte range of the line of `text` holding byte `pos`, without its line break.
pub fn line_at(text: &str, pos: usize) -> Range<usize> {
    let start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
    start..end
}

/// The first line after the one ending at byte `line_end` that is not blank, with its offset.
fn next_filled(text: &str, line_end: usize) -> Option<(usize, &str)> {
    if line_end >= text.len() {
        return None;
    }
    lines_from(text, line_end + 1).find(|(_, l)| !blank(l))
}

/// What the line `line` (a byte range of `text`, as [`line_at`] gives) is.
pub fn role(text: &str, line: Range<usize>) -> LineRole {
    let here = &text[line.clone()];
    if blank(here) {
        return LineRole::Plain;
    }
    let depth = indent(here);
    if depth == 0 && in_capitals(here) {
        return LineRole::Heading;
    }
    if let Some(at) = definition_after_flag(here) {
        let end = definition_end(text, depth, line.end);
        return LineRole::Term {
            definition: line.start + at..end,
        };
    }
    let Some((first_start, first)) = next_filled(text, line.end) else {
        return LineRole::Plain;
    };
    let first_depth = indent(first);
    if first_depth == depth && names_options(here) && !led_by_a_flag(first) && !in_capitals(first) {
        return LineRole::Term {
            definition: first_start..definition_end(text, depth, first_start + first.len()),
        };
    }
    if first_depth <= depth {
        return LineRole::Plain;
    }
    // The first line below is itself a term when the line below it is deeper still.
    let first_end = first_start + first.len();
    if next_filled(text, first_end).is_some_and(|(_, l)| indent(l) > first_depth) {
        return LineRole::Heading;
    }
    // The definition runs on while its lines (or blank ones) are deeper than the term.
    LineRole::Term {
        definition: first_start..run_end(text, first_end, |l| indent(l) <= depth),
    }
}

/// The end of an option's definition whose first line ends at byte `from`: it runs on over the
/// lines below as deep as the option's `depth` or deeper (a converter may have flattened the
/// margins) until the next option, a heading or a shallower line.
fn definition_end(text: &str, depth: usize, from: usize) -> usize {
    run_end(text, from, |l| {
        indent(l) < depth || led_by_a_flag(l) || (indent(l) == 0 && in_capitals(l))
    })
}

/// The end of the last filled line of a run whose first line ends at byte `from`: the run
/// goes on over the lines below, blank ones passed over, until one that `stops` it.
fn run_end(text: &str, from: usize, stops: impl Fn(&str) -> bool) -> usize {
    let mut end = from;
    if from >= text.len() {
        return end;
    }
    for (start, l) in lines_from(text, from + 1) {
        if blank(l) {
            continue;
        }
        if stops(l) {
            break;
        }
        end = start + l.len();
    }
    end
}

/// The lines of `text` from the one holding byte `pos` upwards, each as a byte range.
pub fn lines_above(text: &str, pos: usize) -> impl Iterator<Item = Range<usize>> + '_ {
    let first = line_at(text, pos);
    std::iter::successors(Some(first), move |l| {
        (l.start > 0).then(|| line_at(text, l.start - 1))
    })
}

/// The declaration of the container (a class, a struct, a trait) whose body holds the line
/// at `pos` of the passage `text`: the nearest line above it that is indented less, where
/// that line declares one ("class Blob(builtins.object)" over "|  seek(self, offset)"); else,
/// where no line above is indented less (the passage begins inside the body), `section`,
/// the heading of the section the passage begins in, where it declares one. The passage's
/// first line is read for a declaration only: a passage may begin inside a line, whose
/// margin it lost. A declaration's own line has none: a class listed after another's body
/// is not its member.
pub fn container_of<'a>(text: &'a str, pos: usize, section: Option<&'a str>) -> Option<&'a str> {
    let own = &text[line_at(text, pos)];
    if is_container(own.trim()) {
        return None;
    }
    let depth = indent(own);
    for line in lines_above(text, pos).skip(1) {
        let this = &text[line.clone()];
        if blank(this) {
            continue;
        }
        let first = line.start == 0;
        if first && is_container(this.trim()) {
            return Some(this.trim());
        }
        if !first && indent(this) < depth {
            return is_container(this.trim()).then(|| this.trim());
        }
    }
    section.filter(|s| is_container(s))
}

/// Words that declare what a code term line names next ("class Popen(…)", "def run(…)",
/// "async def main()", "pub fn new()").
const DECLARING_WORDS: &[&str] = &[
    "pub",
    "class",
    "def",
    "async",
    "fn",
    "struct",
    "enum",
    "trait",
    "function",
    "interface",
];

/// The names a term line gives its term: its first word past the words declaring it
/// ("isreadable" of "isreadable(object)", "-error-threshold" of "-error-threshold=float",
/// "Unpickler" of "class Unpickler(builtins.object)") and each further flag ("--user" of "-u,
/// --user LOGIN"), each cut before an argument or parameter list.
pub fn term_names(line: &str) -> Vec<&str> {
    fn cut(word: &str) -> &str {
        let word = word.trim_end_matches(',');
        word.split(['=', '(', '[', '<']).next().unwrap_or(word)
    }
    let all: Vec<&str> = line.split_whitespace().filter(|w| *w != "|").collect();
    let declared = all
        .iter()
        .take_while(|w| DECLARING_WORDS.contains(w))
        .count();
    // A line of declaring words only ("class") is named by the last of them.
    let first = declared.min(all.len().saturating_sub(1));
    let mut words = all[first..].iter().copied();
    let mut names: Vec<&str> = words.next().map(cut).into_iter().collect();
    names.extend(words.filter(|w| is_flag(w)).map(cut));
    names.retain(|n| n.len() >= 2);
    names
}

/// Whether the span starting at byte `start` of `line` (a byte range of `text`) starts the
/// line's text or follows one word only ("class Popen(…)", "def run(…)"): a term line names its
/// term first.
pub fn starts_the_line(text: &str, line: Range<usize>, start: usize) -> bool {
    let before = text[line.start..start.max(line.start)].trim_start_matches([' ', '\t', '|']);
    before.is_empty() || (before.ends_with(' ') && before.split_whitespace().count() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYDOC: &str = "FUNCTIONS\n    isreadable(object)\n        Determine if saferepr(object) \
                         is readable by eval().\n\n    isrecursive(object)\n        Determine if \
                         object requires\n        a recursive representation.\n\nDATA\n    \
                         __all__ = ['pprint']\n";
    const CLASS: &str = "    class Filter(builtins.object)\n     |  Filter(name='')\n     |\n     \
                         |  Filter instances filter records.\n     |\n     |  Methods defined \
                         here:\n     |\n     |  filter(self, record)\n     |      Determine if \
                         the record is logged.\n     |\n";
    const MANPAGE: &str = "OPTIONS\n       -a, --all\n              do not ignore entries \
                           starting with .\n\n       -A, --almost-all\n              do not \
                           list implied . and ..\n";

    /// A manual page whose margins a converter flattened.
    const FLAT: &str =
        "OPTIONS\nThe options which apply to the lastlog command are:\n-b, --before \
                        DAYS\nPrint only lastlog records older than DAYS.\n-C, --clear\nClear \
                        lastlog record of a user.\nThis option can be used only with -u.\n-u, \
                        --user LOGIN|RANGE\nPrint the lastlog record of the specified \
                        user(s).\n-d destination_dir\nPut the files beneath destination_dir.\n\
                        -r Run recursively; if any are directories,\nrun on all files in them.\n\
                        -a Run automagically.\nNOTE\n-5 degrees is cold\nand so on.\n";

    fn role_of(text: &str, needle: &str) -> LineRole {
        role(text, line_at(text, text.find(needle).unwrap()))
    }

    fn definition_of<'a>(text: &'a str, needle: &str) -> &'a str {
        match role_of(text, needle) {
            LineRole::Term { definition } => &text[definition],
            other => panic!("{needle}: {other:?}"),
        }
    }

    #[test]
    fn a_term_is_defined_by_the_deeper_lines_below_it() {
        assert_eq!(
            definition_of(PYDOC, "isreadable"),
            "        Determine if saferepr(object) is readable by eval()."
        );
        assert_eq!(
            definition_of(PYDOC, "isrecursive"),
            "        Determine if object requires\n        a recursive representation."
        );
        assert_eq!(
            definition_of(MANPAGE, "--all"),
            "              do not ignore entries starting with ."
        );
        // Across a margin's bars and blank lines of bars.
        assert_eq!(
            definition_of(CLASS, "filter(self"),
            "     |      Determine if the record is logged."
        );
        assert!(definition_of(CLASS, "class Filter").contains("Filter instances filter"));
    }

    #[test]
    fn a_line_of_options_is_a_term_where_the_margins_were_flattened() {
        assert_eq!(
            definition_of(FLAT, "-b, --before"),
            "Print only lastlog records older than DAYS."
        );
        assert_eq!(
            definition_of(FLAT, "-C, --clear"),
            "Clear lastlog record of a user.\nThis option can be used only with -u."
        );
        // The definition stops at the next option, whose own definition may follow it on its
        // line, and at a heading.
        assert_eq!(
            definition_of(FLAT, "-u, --user"),
            "Print the lastlog record of the specified user(s)."
        );
        assert_eq!(
            definition_of(FLAT, "-d destination_dir"),
            "Put the files beneath destination_dir."
        );
        assert_eq!(
            definition_of(FLAT, "-r Run"),
            "Run recursively; if any are directories,\nrun on all files in them."
        );
        assert_eq!(definition_of(FLAT, "-a Run"), "Run automagically.");
        // Sentences that start with a flag or a number are no options lines.
        assert_eq!(role_of(FLAT, "-5 degrees"), LineRole::Plain);
        assert_eq!(role_of(FLAT, "The options which"), LineRole::Plain);
        assert_eq!(role_of(FLAT, "Print only"), LineRole::Plain);
        assert!(names_options("-e, --errors=seconds"));
        assert!(names_options("-error-threshold=float"));
        assert!(names_options("-d destination"));
        assert!(!names_options("--"));
        assert!(!names_options("-v verbose mode on"));
        assert!(!names_options("-u."));
        assert!(!names_options("[-v | --verbose]"));
        // Spaces past ASCII before a flag: found, and no byte offset inside a character.
        let wide = "\u{2003}-r Run recursively\u{2003}now.\n\u{a0}-a Run again.\n";
        assert_eq!(definition_of(wide, "-r"), "Run recursively\u{2003}now.");
        assert_eq!(definition_of(wide, "-a"), "Run again.");
        // A short option's definition on its own line, as `man` lays it out.
        let man = "       -r     Run recursively; if any\n              are directories.\n       -a     Run automagically.\n";
        assert_eq!(
            definition_of(man, "-r"),
            "Run recursively; if any\n              are directories."
        );
    }

    /// Every line of text mixing spaces, margins, flags and characters of several bytes is
    /// read without a panic.
    #[test]
    fn any_line_is_read_without_a_panic() {
        let text =
            "\u{2003}-é Été\u{a0}—\n |  -ü, --über=ß\n\u{3000}ß\n-\n--\n\t-x\u{2003}y z w.\n\u{a0}";
        for (pos, _) in text.char_indices() {
            let line = line_at(text, pos);
            let _ = role(text, line.clone());
            let _ = term_names(&text[line.clone()]);
            let _ = starts_the_line(text, line, pos);
            assert!(lines_above(text, pos).count() >= 1);
        }
    }

    #[test]
    fn a_term_line_names_its_term_and_its_flags() {
        assert_eq!(term_names("    isreadable(object)"), ["isreadable"]);
        assert_eq!(term_names("-u, --user LOGIN|RANGE"), ["-u", "--user"]);
        assert_eq!(term_names("-error-threshold=float"), ["-error-threshold"]);
        assert_eq!(term_names("     |  filter(self, record)"), ["filter"]);
        assert_eq!(term_names("--depth=<n>"), ["--depth"]);
        assert_eq!(
            term_names("    class Unpickler(builtins.object)"),
            ["Unpickler"]
        );
        assert_eq!(term_names("async def main()"), ["main"]);
        assert_eq!(term_names("class"), ["class"]);
        let text = "one\ntwo\nthree";
        let above: Vec<&str> = lines_above(text, text.find("three").unwrap())
            .map(|l| &text[l])
            .collect();
        assert_eq!(above, ["three", "two", "one"]);
    }

    #[test]
    fn a_heading_over_terms_is_no_term_and_plain_lines_are_neither() {
        assert_eq!(role_of(PYDOC, "FUNCTIONS"), LineRole::Heading);
        assert_eq!(role_of(MANPAGE, "OPTIONS"), LineRole::Heading);
        // Capitals at the margin head a section, over a list or not.
        let section = "NAME\n    pyclbr - Parse a Python module.\n\nSEE ALSO\n    pydoc\n\nLC_ALL\n    The locale.\n";
        assert_eq!(role_of(section, "NAME"), LineRole::Heading);
        assert_eq!(role_of(section, "SEE ALSO"), LineRole::Heading);
        assert_ne!(role_of(section, "LC_ALL"), LineRole::Heading);
        // A definition's own lines, a line followed by one no deeper, the last line.
        assert_eq!(role_of(PYDOC, "Determine if saferepr"), LineRole::Plain);
        assert_eq!(role_of(PYDOC, "__all__"), LineRole::Plain);
        assert_eq!(role_of(CLASS, "Methods defined"), LineRole::Plain);
        let prose = "A paragraph of prose\nwraps at the margin\nand goes on.";
        assert_eq!(role_of(prose, "wraps"), LineRole::Plain);
        assert_eq!(role_of("one line", "line"), LineRole::Plain);
    }

    #[test]
    fn a_member_s_container_is_the_declaration_it_is_indented_under() {
        let text = "CLASSES\n    class Blob(builtins.object)\n     |  Methods defined here:\n     \
                    |\n     |  seek(self, offset)\n     |      Set the position.\n\nFUNCTIONS\n    \
                    connect(database)\n";
        let at = |needle: &str, section| container_of(text, text.find(needle).unwrap(), section);
        assert_eq!(at("seek", None), Some("class Blob(builtins.object)"));
        assert_eq!(
            at("Set the", None),
            None,
            "a definition's line is under its term"
        );
        assert_eq!(at("connect", Some("class Blob(builtins.object)")), None);
        assert_eq!(at("Blob", None), None, "the class line itself");
        // A passage that begins inside the body: the section heading names the class, and
        // the first line, cut, says nothing by its margin.
        let inside = "the blob.\n     |\n     |  tell(self, /)\n";
        let tell = inside.find("tell").unwrap();
        assert_eq!(
            container_of(inside, tell, Some("class Blob(builtins.object)")),
            Some("class Blob(builtins.object)")
        );
        assert_eq!(container_of(inside, tell, Some("CLASSES")), None);
        assert_eq!(container_of(inside, tell, None), None);
        let next =
            "the blob.\n     |\n    class Connection(builtins.object)\n     |  close(self)\n";
        let section = Some("class Blob(builtins.object)");
        assert_eq!(
            container_of(next, next.find("Connection").unwrap(), section),
            None
        );
        assert_eq!(
            container_of(next, next.find("close").unwrap(), section),
            Some("class Connection(builtins.object)")
        );
        let rust = "pub struct Config {\n    pub name: String,\n}\n";
        let name = container_of(rust, rust.find("name").unwrap(), None).unwrap();
        assert_eq!(term_names(name), ["Config"]);
    }

    #[test]
    fn a_term_line_names_its_term_first() {
        let at = |text: &str, line: &str, span: &str| {
            let l = line_at(text, text.find(line).unwrap());
            starts_the_line(text, l.clone(), l.start + text[l].find(span).unwrap())
        };
        assert!(at(PYDOC, "isreadable", "isreadable"));
        assert!(!at(PYDOC, "isreadable", "object"));
        assert!(at(CLASS, "class Filter", "Filter"));
        assert!(at(CLASS, "filter(self", "filter"));
        assert!(at(MANPAGE, "--all", "-a"));
        assert!(at(MANPAGE, "--all", "--all"), "after one word");
        assert!(!at(CLASS, "Filter instances", "filter records"));
    }
}
