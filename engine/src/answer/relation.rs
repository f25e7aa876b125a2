//! What a sentence says about the question's topic, compared with what the question asks of
//! it: the sentence encoder's similarity of the two with the topic's words taken out of both.
//!
//! A question and the sentences of its passages share the topic's name ("Where was Urgaud
//! Aelri born?"), and the encoder's similarity of whole sentences is then mostly that name:
//! "Urgaud Aelri took lodgings in Brinriqua" scores about as high as "Aelri came from Othtu".
//! With the name gone, what is left is the relation each states ("Where was born?" against
//! "came from Othtu" or "took lodgings in Brinriqua"), and the encoder tells those apart.
//!
//! The topic is the question's own words, read without knowing the corpus: its capitalised
//! words past the first (names), and its content words that a retrieved passage's title
//! holds (a command's or a package's name is often written in small letters).

use std::collections::HashSet;

use crate::words::NON_ANSWER_STARTS;

/// The question's topic words, lower case.
pub fn topic_words(question: &str, titles: &[&str]) -> HashSet<String> {
    let title_words: HashSet<String> = titles
        .iter()
        .flat_map(|t| word_spans(t).map(|(a, b)| t[a..b].to_lowercase()))
        .collect();
    let mut topic = HashSet::new();
    for (i, (a, b)) in word_spans(question).enumerate() {
        let word = &question[a..b];
        let lower = word.to_lowercase();
        if NON_ANSWER_STARTS.contains(&lower.as_str()) {
            continue;
        }
        let capitalised = word.chars().next().is_some_and(char::is_uppercase);
        if (i > 0 && capitalised) || title_words.contains(&lower) {
            topic.insert(lower);
        }
    }
    topic
}

/// `text` without the words of `topic` (a possessive "'s" goes with its word), spaces closed
/// up.
pub fn without_topic(text: &str, topic: &HashSet<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (a, b) in word_spans(text) {
        // A word inside a possessive already taken out ("s" of "Udlo's") is gone with it.
        if a < at || !topic.contains(&text[a..b].to_lowercase()) {
            continue;
        }
        out.push_str(&text[at..a]);
        let rest = &text[b..];
        at = b + ["'s", "’s", "'", "’"]
            .iter()
            .find(|p| rest.starts_with(*p))
            .map_or(0, |p| p.len());
    }
    out.push_str(&text[at..]);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Byte ranges of the words of `text`: runs of letters and digits, as [`super::features::stems`]
/// splits them.
fn word_spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(move |w| {
            // `w` is a slice of `text`: its offset is the distance between their starts.
            let start = w.as_ptr() as usize - text.as_ptr() as usize;
            (start, start + w.len())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(words: &[&str]) -> HashSet<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_topic_is_the_names_and_the_title_words_of_the_question() {
        assert_eq!(
            topic_words("Where was Urgaud Aelri born?", &[]),
            set(&["urgaud", "aelri"])
        );
        // The first word is capitalised as any question's is; function words never count.
        assert_eq!(
            topic_words(
                "Who maintains the ripgrep package?",
                &["ripgrep", "The Book"]
            ),
            set(&["ripgrep"])
        );
        assert!(topic_words("What is it used for?", &["It"]).is_empty());
    }

    #[test]
    fn taking_out_any_topic_never_splits_a_character() {
        let texts = [
            "Udlo's S code: İstanbul’s ẞ K café (x) 's ' s' O'Brien's",
            "'s's's",
            "ÅÅ's Å",
            "",
        ];
        let words = [
            "udlo",
            "s",
            "i̇stanbul",
            "k",
            "café",
            "x",
            "o",
            "brien",
            "åå",
            "å",
        ];
        for text in texts {
            for mask in 0..(1u32 << words.len()) {
                let topic: HashSet<String> = words
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, w)| w.to_string())
                    .collect();
                let out = without_topic(text, &topic);
                assert!(out.len() <= text.len());
            }
        }
    }

    #[test]
    fn the_topic_is_taken_out_with_its_possessive() {
        let topic = set(&["baurvu", "udlo"]);
        assert_eq!(
            without_topic(
                "Parish records give 1903 as the year of Baurvu Udlo's birth.",
                &topic
            ),
            "Parish records give 1903 as the year of birth."
        );
        assert_eq!(
            without_topic("What year was Baurvu Udlo born in?", &topic),
            "What year was born in?"
        );
        assert_eq!(without_topic("Udlo", &topic), "");
        assert_eq!(without_topic("Café Udlo’s", &topic), "Café");
        // A topic word that is also a possessive's "s" (a language called "S").
        let topic = set(&["udlo", "s"]);
        assert_eq!(without_topic("Udlo's S code", &topic), "code");
        assert_eq!(without_topic("Udlo' s", &topic), "");
    }
}
