//! Answer normalisation and the QA metrics of the open-domain QA literature
//! (SQuAD / NQ-open: lower-case, strip punctuation, drop a/an/the, collapse
//! white space; exact match and token F1, max over gold answers).

/// SQuAD's answer normalisation.
pub fn normalize_answer(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punct: String = lower
        .chars()
        .filter(|c| !c.is_ascii_punctuation() && !is_unicode_punct(*c))
        .collect();
    no_punct
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_unicode_punct(c: char) -> bool {
    matches!(
        c,
        '‘' | '’' | '“' | '”' | '–' | '—' | '…' | '«' | '»' | '¿' | '¡'
    )
}

/// 1.0 when the normalised prediction equals a normalised gold answer.
pub fn exact_match(prediction: &str, answers: &[String]) -> f64 {
    let p = normalize_answer(prediction);
    if answers.iter().any(|a| normalize_answer(a) == p) {
        1.0
    } else {
        0.0
    }
}

/// Token-level F1, max over gold answers.
pub fn f1(prediction: &str, answers: &[String]) -> f64 {
    let p = normalize_answer(prediction);
    let pt: Vec<&str> = p.split_whitespace().collect();
    answers
        .iter()
        .map(|a| {
            let g = normalize_answer(a);
            let gt: Vec<&str> = g.split_whitespace().collect();
            if pt.is_empty() || gt.is_empty() {
                return if pt == gt { 1.0 } else { 0.0 };
            }
            let mut counts = std::collections::HashMap::new();
            for t in &gt {
                *counts.entry(*t).or_insert(0i32) += 1;
            }
            let mut common = 0;
            for t in &pt {
                if let Some(c) = counts.get_mut(t) {
                    if *c > 0 {
                        *c -= 1;
                        common += 1;
                    }
                }
            }
            if common == 0 {
                return 0.0;
            }
            let precision = common as f64 / pt.len() as f64;
            let recall = common as f64 / gt.len() as f64;
            2.0 * precision * recall / (precision + recall)
        })
        .fold(0.0, f64::max)
}

/// Whether `text` contains a normalised gold answer as whole words (answer recall). SQuAD's
/// normalisation deletes punctuation, which glues code to its neighbours ("isabs(s)" becomes
/// "isabss", where the answer "isabs" is no word): an answer is also found in the text with
/// punctuation read as a space.
pub fn contains_answer(text: &str, answers: &[String]) -> bool {
    let squad = format!(" {} ", normalize_answer(text));
    let spaced = format!(" {} ", normalize_spaced(text));
    answers.iter().any(|a| {
        let (a, b) = (normalize_answer(a), normalize_spaced(a));
        (!a.is_empty() && squad.contains(&format!(" {a} ")))
            || (!b.is_empty() && spaced.contains(&format!(" {b} ")))
    })
}

/// [`normalize_answer`] with punctuation read as a space.
fn normalize_spaced(s: &str) -> String {
    let spaced: String = s
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_punctuation() || is_unicode_punct(c) {
                ' '
            } else {
                c
            }
        })
        .collect();
    normalize_answer(&spaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn normalisation_and_metrics() {
        assert_eq!(normalize_answer("The  Eiffel-Tower!"), "eiffeltower");
        assert_eq!(normalize_answer("An apple, a pear"), "apple pear");
        assert_eq!(
            exact_match("the Jokivha River.", &v(&["Jokivha River", "x"])),
            1.0
        );
        assert_eq!(exact_match("Jokivha", &v(&["Jokivha River"])), 0.0);
        assert!((f1("born in 1843", &v(&["1843"])) - 0.5).abs() < 1e-12);
        assert_eq!(f1("", &v(&["x"])), 0.0);
        assert!(contains_answer("He was born in 1843.", &v(&["1843"])));
        assert!(!contains_answer("He was born in 18431.", &v(&["1843"])));
        // Code glued by SQuAD's normalisation is still found, and only as whole words.
        assert!(contains_answer(
            "isabs(s)\n    Test whether",
            &v(&["isabs"])
        ));
        assert!(contains_answer(
            "see email.feedparser.",
            &v(&["email.feedparser"])
        ));
        assert!(!contains_answer("isabsolute(s)", &v(&["isabs"])));
        assert!(!contains_answer("the word", &v(&["..."])));
    }
}
