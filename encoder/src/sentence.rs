//! Sentence spans of a passage, for the extractive reader: the passage's
//! sentences are embedded at index time so answering costs one question
//! embedding and a few dot products.

/// The text a sentence is embedded as: prefixed with its document's title, so
/// that "He was born in 1843." still says whose birth it is.
pub fn sentence_embedding_text(title: &str, sentence: &str) -> String {
    if title.is_empty() {
        sentence.to_string()
    } else {
        format!("{title}. {sentence}")
    }
}

/// Byte spans `(start, end)` of the sentences of `text`, trimmed. A sentence
/// ends at `.`, `!` or `?` followed by whitespace and then an upper-case
/// letter, a digit or an opening quote/bracket, or at a blank line. Common
/// abbreviations ("e.g.", "Dr.", single initials) do not end a sentence.
pub fn sentence_spans(text: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut spans = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (pos, c) = chars[i];
        let end_here = match c {
            '.' | '!' | '?' => {
                let mut j = i + 1;
                while j < chars.len() && matches!(chars[j].1, '"' | '\'' | ')' | ']' | '”' | '’')
                {
                    j += 1;
                }
                let ws = j < chars.len() && chars[j].1.is_whitespace();
                let mut k = j;
                while k < chars.len() && chars[k].1.is_whitespace() {
                    k += 1;
                }
                let next_ok = k < chars.len()
                    && (chars[k].1.is_uppercase()
                        || chars[k].1.is_ascii_digit()
                        || matches!(chars[k].1, '"' | '(' | '[' | '“' | '‘'));
                let abbrev = c == '.' && is_abbreviation(&text[start..pos]);
                if ws && next_ok && !abbrev {
                    Some(chars.get(j).map_or(text.len(), |x| x.0))
                } else {
                    None
                }
            }
            '\n' => {
                let blank = chars[i + 1..]
                    .iter()
                    .take_while(|(_, c)| c.is_whitespace())
                    .any(|(_, c)| *c == '\n');
                blank.then_some(pos)
            }
            _ => None,
        };
        if let Some(end) = end_here {
            push_trimmed(text, start, end, &mut spans);
            start = end;
        }
        i += 1;
    }
    push_trimmed(text, start, text.len(), &mut spans);
    spans
}

fn push_trimmed(text: &str, start: usize, end: usize, spans: &mut Vec<(usize, usize)>) {
    let piece = &text[start..end];
    let lead = piece.len() - piece.trim_start().len();
    let trail = piece.len() - piece.trim_end().len();
    if lead + trail < piece.len() {
        spans.push((start + lead, end - trail));
    }
}

/// Whether the text before a period ends with an abbreviation.
fn is_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    const ABBREVIATIONS: &[&str] = &[
        "e.g", "i.e", "etc", "vs", "Dr", "Mr", "Mrs", "Ms", "St", "Prof", "Jr", "Sr", "No", "Fig",
        "cf", "approx",
    ];
    (word.chars().count() == 1 && word.chars().all(char::is_uppercase))
        || ABBREVIATIONS.iter().any(|a| word.eq_ignore_ascii_case(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        sentence_spans(text)
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect()
    }

    #[test]
    fn splits_at_sentence_ends_only() {
        assert_eq!(
            split("Dr. Smith lived in Oslo. He was born in 1843! Was he? \"Yes.\" He left e.g. early."),
            vec!["Dr. Smith lived in Oslo.", "He was born in 1843!", "Was he?", "\"Yes.\"", "He left e.g. early."]
        );
        assert_eq!(
            split("J. R. Tolkien wrote. version 1.2 is out."),
            vec!["J. R. Tolkien wrote. version 1.2 is out."]
        );
        assert_eq!(
            split("Title line\n\nBody text here. More"),
            vec!["Title line", "Body text here.", "More"]
        );
        assert!(split("   ").is_empty());
        assert_eq!(split("no end"), vec!["no end"]);
    }
}
