//! The shape of a candidate answer's text: a number, an address, a path, an option, code, a
//! name or ordinary words; the ranker weighs it against what the question asks for.

use super::candidates::is_abbreviation;

/// English numbers spelled out ("Rust has four primary scalar types").
const NUMBER_WORDS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "twenty", "hundred", "thousand", "dozen",
];

/// The shape of a candidate's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Starts with a digit.
    Number,
    /// A web address.
    Url,
    /// An e-mail address.
    Email,
    /// A file path.
    Path,
    /// A command-line option.
    Option,
    /// Code or an identifier: inner punctuation (`a_b`, `a::b`, `f()`, `x.y`).
    Code,
    /// Every word capitalised (a name).
    Name,
    /// Ordinary words.
    Words,
}

/// Shapes, the variants of [`Shape`].
pub const SHAPES: usize = 8;

impl Shape {
    /// The shape of `text`.
    pub fn of(text: &str) -> Self {
        let lower = text.to_lowercase();
        let first = lower.split_whitespace().next().unwrap_or("");
        if text.starts_with(|c: char| c.is_ascii_digit()) || NUMBER_WORDS.contains(&first) {
            Shape::Number
        } else if lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("www.")
        {
            Shape::Url
        } else if text.contains('@') && !text.contains(' ') {
            Shape::Email
        } else if text.starts_with('/') || text.starts_with("~/") {
            Shape::Path
        } else if text.starts_with('-') {
            Shape::Option
        } else if text
            .split_whitespace()
            // A name's initials ("B.", "J.R.") are not code's dots.
            .filter(|w| !w.strip_suffix('.').is_some_and(is_abbreviation))
            .any(|w| {
                w.chars()
                    .any(|c| matches!(c, '_' | ':' | '(' | '<' | '=' | '/' | '.' | '$'))
            })
        {
            Shape::Code
        } else if text
            .split_whitespace()
            .all(|w| w.starts_with(|c: char| c.is_uppercase()))
        {
            Shape::Name
        } else {
            Shape::Words
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_of_answers() {
        assert_eq!(Shape::of("1856"), Shape::Number);
        assert_eq!(Shape::of("four"), Shape::Number);
        assert_eq!(Shape::of("https://serde.rs"), Shape::Url);
        assert_eq!(Shape::of("--recursive"), Shape::Option);
        assert_eq!(Shape::of("/etc/passwd"), Shape::Path);
        assert_eq!(Shape::of("David Tolnay"), Shape::Name);
        assert_eq!(Shape::of("George B. Dantzig"), Shape::Name);
        assert_eq!(Shape::of("J.R. Bell"), Shape::Name);
        assert_eq!(Shape::of("Vec::new"), Shape::Code);
        assert_eq!(Shape::of("glassblower"), Shape::Words);
    }
}
