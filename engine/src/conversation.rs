//! Conversations: a follow-up question made standalone for retrieval and
//! the readers. "What did this person do for a living?" names nobody; the
//! previous user turn ("Where was Urgaud Aelri born?") names whom it is
//! about. By rules ([`Rewrite::Rules`]), Capstan resolves the follow-up's
//! referring phrase (this person, he, her, it, …) to the name the previous
//! user turn gives, and otherwise reads the previous user turn with the
//! follow-up. With [`Rewrite::Model`] the Llama reader's model rewrites the
//! follow-up for retrieval ([`rewrite_prompt`], [`parse_rewrite`]).

use serde::{Deserialize, Serialize};

/// Who said a turn of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user's question.
    User,
    /// Capstan's answer.
    Assistant,
}

/// An earlier turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

/// The question as it stands alone: `question` with its referring phrase
/// replaced by the name of the previous user turn; the previous user turn
/// and `question` together when there is no such phrase or name; `question`
/// itself without history.
pub fn standalone_question(history: &[Turn], question: &str) -> String {
    let Some(previous) = history.iter().rev().find(|t| t.role == Role::User) else {
        return question.to_string();
    };
    if let Some(name) = last_name(&previous.content) {
        if question.contains(&name) {
            return question.to_string();
        }
        if let Some(resolved) = resolve(question, &name) {
            return resolved;
        }
    }
    format!("{} {}", previous.content.trim(), question.trim())
}

/// How a conversation's follow-up is made to stand alone for retrieval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Rewrite {
    /// [`standalone_question`]: the referring phrase replaced by the previous user turn's name.
    #[default]
    Rules,
    /// The Llama reader's model rewrites the follow-up ([`rewrite_prompt`]); the rules where
    /// no Llama reader is loaded or its rewrite is unusable ([`parse_rewrite`]). Retrieval
    /// reads the rewrite; the readers read the rules' question with the conversation.
    Model,
}

/// Worked examples of a rewrite, before the case at hand: a small model copies the pattern.
const REWRITE_EXAMPLES: &str =
    "Rewrite each follow-up question so that it names who or what it is about.\n\n\
    Previous question: Where was Ilse Varnholt born?\n\
    Follow-up: What did this person do for a living?\n\
    Rewritten: What did Ilse Varnholt do for a living?\n\n\
    Previous question: Tell me about the Kestrel Mill.\n\
    Follow-up: When was it built?\n\
    Rewritten: When was the Kestrel Mill built?\n\n";

/// The user turn asking a chat model to rewrite `question` after the conversation's last user
/// turn (two worked examples, then the case, ending at "Rewritten:"); `None` without an
/// earlier user turn.
pub fn rewrite_prompt(history: &[Turn], question: &str) -> Option<String> {
    let previous = history.iter().rev().find(|t| t.role == Role::User)?;
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(format!(
        "{REWRITE_EXAMPLES}Previous question: {}\nFollow-up: {}\nRewritten:",
        one_line(&previous.content),
        one_line(question)
    ))
}

/// The question in a model's reply to [`rewrite_prompt`]: its first line, without a
/// "Rewritten:" label; `None` when that is not a question that stands alone. A small model
/// sometimes answers instead, copies a line of the examples, or leaves "this person" in.
pub fn parse_rewrite(reply: &str) -> Option<String> {
    let line = reply.trim().lines().next()?.trim();
    let line = line
        .strip_prefix("Rewritten:")
        .or_else(|| line.strip_prefix("Follow-up:"))
        .unwrap_or(line)
        .trim();
    let is_question = line.ends_with('?') && line.split_whitespace().count() >= 2;
    let copied = REWRITE_EXAMPLES.contains(line);
    let still_refers = referring_phrase(line).is_some();
    (is_question && !copied && !still_refers).then(|| line.to_string())
}

/// Words that open questions and sentences, capitalised but never a name.
const NOT_NAMES: &[&str] = &[
    "A", "An", "And", "Are", "But", "Can", "Could", "Did", "Do", "Does", "For", "From", "Give",
    "How", "I", "In", "Is", "It", "List", "Of", "On", "Please", "Show", "Tell", "That", "The",
    "Then", "This", "To", "Was", "Were", "What", "When", "Where", "Which", "Who", "Whom", "Whose",
    "Why", "Will", "With", "Would", "You",
];

/// The last run of capitalised words of `text` that is not a question or
/// function word: the name a turn is about.
fn last_name(text: &str) -> Option<String> {
    let mut best: Option<String> = None;
    let mut run: Vec<&str> = Vec::new();
    for raw in text.split_whitespace() {
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric());
        let capitalised = word.chars().next().is_some_and(char::is_uppercase);
        // Punctuation after a word ends the name there ("Aelri, who…").
        let ends = raw.ends_with([',', '.', '?', '!', ';', ':']);
        if capitalised && !NOT_NAMES.contains(&word) {
            run.push(word);
        }
        if (!capitalised || NOT_NAMES.contains(&word) || ends) && !run.is_empty() {
            best = Some(run.join(" "));
            run.clear();
        }
    }
    if !run.is_empty() {
        best = Some(run.join(" "));
    }
    best
}

/// Phrases that refer back to the previous turn's subject, longest first:
/// (phrase, what replaces it given the name).
const REFERRING: &[(&str, Possessive)] = &[
    ("this person", Possessive::No),
    ("that person", Possessive::No),
    ("this one", Possessive::No),
    ("that one", Possessive::No),
    ("this place", Possessive::No),
    ("this city", Possessive::No),
    ("this town", Possessive::No),
    ("this company", Possessive::No),
    ("this organisation", Possessive::No),
    ("this organization", Possessive::No),
    ("this invention", Possessive::No),
    ("his", Possessive::Yes),
    ("her", Possessive::Yes),
    ("their", Possessive::Yes),
    ("its", Possessive::Yes),
    ("he", Possessive::No),
    ("she", Possessive::No),
    ("they", Possessive::No),
    ("him", Possessive::No),
    ("them", Possessive::No),
    ("it", Possessive::No),
];

#[derive(Clone, Copy)]
enum Possessive {
    Yes,
    No,
}

/// `question` with its first referring phrase (as whole words, any case)
/// replaced by `name`; `None` when it has none.
fn resolve(question: &str, name: &str) -> Option<String> {
    let (at, end, possessive) = referring_phrase(question)?;
    let replacement = match possessive {
        Possessive::Yes => format!("{name}'s"),
        Possessive::No => name.to_string(),
    };
    Some(format!(
        "{}{replacement}{}",
        &question[..at],
        &question[end..]
    ))
}

/// Where `question`'s first referring phrase (as whole words, any case) lies (byte offsets in
/// `question`), and whether it is possessive; `None` when it has none.
///
/// The phrases are found in a lower-cased copy whose offsets map back to the question's own
/// characters: lower-casing changes the length of some ("İ" becomes two characters, the Kelvin
/// sign three bytes to one), so offsets of the copy are not offsets of the question.
fn referring_phrase(question: &str) -> Option<(usize, usize, Possessive)> {
    let mut lower = String::with_capacity(question.len());
    // For each byte of `lower`, the offset in `question` of the character it starts the lower
    // case of, or `usize::MAX` inside one; one more entry for the end.
    let mut to_question: Vec<usize> = Vec::with_capacity(question.len() + 1);
    for (i, c) in question.char_indices() {
        let before = lower.len();
        lower.extend(c.to_lowercase());
        to_question.push(i);
        to_question.extend(std::iter::repeat_n(usize::MAX, lower.len() - before - 1));
    }
    to_question.push(question.len());
    let is_word_edge = |at: usize| {
        at == 0
            || !lower[..at]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric)
    };
    let is_word_end = |at: usize| {
        at >= lower.len()
            || !lower[at..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '\'')
    };
    // "her" owns what follows it ("her brother") or is an object ("who taught her?").
    let followed_by_word = |at: usize| {
        lower[at..]
            .trim_start()
            .chars()
            .next()
            .is_some_and(char::is_alphanumeric)
            && lower[at..].starts_with(char::is_whitespace)
    };
    let mut found: Option<(usize, usize, Possessive)> = None;
    for &(phrase, possessive) in REFERRING {
        let mut from = 0;
        while let Some(i) = lower[from..].find(phrase) {
            let at = from + i;
            let end = at + phrase.len();
            let (q_at, q_end) = (to_question[at], to_question[end]);
            if is_word_edge(at) && is_word_end(end) && q_at != usize::MAX && q_end != usize::MAX {
                let possessive = match (phrase, possessive) {
                    ("her", Possessive::Yes) if !followed_by_word(end) => Possessive::No,
                    (_, p) => p,
                };
                if found.is_none_or(|(a, _, _)| q_at < a) {
                    found = Some((q_at, q_end, possessive));
                }
                break;
            }
            from = end;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Turn {
        Turn {
            role: Role::User,
            content: text.into(),
        }
    }

    fn assistant(text: &str) -> Turn {
        Turn {
            role: Role::Assistant,
            content: text.into(),
        }
    }

    #[test]
    fn a_follow_up_names_whom_the_previous_turn_was_about() {
        let history = [user("Where was Urgaud Aelri born?"), assistant("In Othtu.")];
        let cases = [
            (
                "What did this person do for a living?",
                "What did Urgaud Aelri do for a living?",
            ),
            ("When did he die?", "When did Urgaud Aelri die?"),
            ("What was his trade?", "What was Urgaud Aelri's trade?"),
            ("Who taught them?", "Who taught Urgaud Aelri?"),
        ];
        for (follow_up, want) in cases {
            assert_eq!(standalone_question(&history, follow_up), want);
        }
        // The user's own words, a whole-word match only ("the" holds "he").
        assert_eq!(
            standalone_question(
                &[user("Tell me about the Lemurzel telescope.")],
                "Where was it first shown?"
            ),
            "Where was Lemurzel first shown?"
        );
        assert_eq!(
            standalone_question(&history, "Where is the theatre?"),
            "Where was Urgaud Aelri born? Where is the theatre?"
        );
    }

    #[test]
    fn a_rewrite_prompt_ends_with_the_case_and_its_reply_is_checked() {
        let history = [user("Tell me about\nGaphalin."), assistant("A town.")];
        let prompt = rewrite_prompt(&history, "When was it founded?").unwrap();
        assert!(
            prompt.ends_with(
                "Previous question: Tell me about Gaphalin.\nFollow-up: When was it founded?\nRewritten:"
            ),
            "{prompt}"
        );
        assert_eq!(rewrite_prompt(&[assistant("Hello.")], "Why?"), None);
        assert_eq!(
            parse_rewrite(" Rewritten: When was Gaphalin founded?\nPrevious question: x")
                .as_deref(),
            Some("When was Gaphalin founded?")
        );
        assert_eq!(
            parse_rewrite("When was Gaphalin founded?").as_deref(),
            Some("When was Gaphalin founded?")
        );
        // An answer, a line of the examples, a question still about "this person", or
        // nothing: the rules decide instead.
        assert_eq!(parse_rewrite("Gaphalin was founded in 1820."), None);
        assert_eq!(
            parse_rewrite("Rewritten: When was the Kestrel Mill built?"),
            None
        );
        assert_eq!(parse_rewrite("In which town was this person born?"), None);
        assert_eq!(parse_rewrite("   "), None);
    }

    #[test]
    fn without_a_name_or_history_the_question_stays_or_joins_the_previous_turn() {
        assert_eq!(standalone_question(&[], "Who was he?"), "Who was he?");
        let history = [user("what about the old glassworks?")];
        assert_eq!(
            standalone_question(&history, "who founded it?"),
            "what about the old glassworks? who founded it?"
        );
        // A follow-up that names its subject needs nothing.
        let history = [user("Where was Urgaud Aelri born?")];
        assert_eq!(
            standalone_question(&history, "When did Urgaud Aelri die?"),
            "When did Urgaud Aelri die?"
        );
        assert_eq!(
            last_name("Where was Urgaud Aelri, the smith, born?").as_deref(),
            Some("Urgaud Aelri")
        );
        assert_eq!(
            last_name("What did Saquafen Dulcorde do?").as_deref(),
            Some("Saquafen Dulcorde")
        );
    }

    /// Case mappings that change a character's length shift no offset: nothing panics, and
    /// the rewrite changes only the referring phrase.
    #[test]
    fn referring_phrases_are_found_whatever_lower_casing_does_to_lengths() {
        let name = "Ekmarud Brekes";
        assert_eq!(
            resolve("Where was İ her— born? ẞ", name).as_deref(),
            Some("Where was İ Ekmarud Brekes— born? ẞ")
        );
        assert_eq!(
            resolve("Was İzmir her home? ẞ", name).as_deref(),
            Some("Was İzmir Ekmarud Brekes's home? ẞ")
        );
        assert_eq!(
            resolve("Who taught her?", name).as_deref(),
            Some("Who taught Ekmarud Brekes?")
        );
        // Random questions over letters whose case mappings change length.
        let alphabet: Vec<char> = "İıẞßKÅΣσςﬁŉǰΐ aehirstwo?'—".chars().collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (state % 24) as usize;
            let mut q = String::new();
            for _ in 0..len {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                q.push(alphabet[(state % alphabet.len() as u64) as usize]);
            }
            for insert in ["her ", "it", "this person"] {
                let q = format!("{q} {insert} {q}");
                if let Some(r) = resolve(&q, name) {
                    let (at, end, _) = referring_phrase(&q).unwrap();
                    assert!(
                        r.starts_with(&q[..at]) && r.ends_with(&q[end..]),
                        "{q:?} -> {r:?}"
                    );
                }
            }
        }
    }
}
