//! What kind of answer a question asks for, read from its question words and the noun
//! after them, as the coarse classes of question classification do (Li and Roth, 2002).

/// What a question asks for, from its question words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asks {
    /// A person or an organisation ("who", "whom", "whose").
    Who,
    /// A place, a location or an address ("where").
    Where,
    /// A year ("what year", "which year").
    Year,
    /// A time ("when", "what date").
    When,
    /// A quantity or a version ("how many", "how long", "what version", ...).
    Number,
    /// What someone or something is or does, in common words: an occupation ("what was her
    /// profession", "what did he do for a living") or a purpose ("what is it used for").
    Description,
    /// Anything else ("what", "which", "name the ...").
    Other,
}

impl Asks {
    /// The kind of answer `question` asks for.
    pub fn of(question: &str) -> Self {
        let q = question.to_lowercase();
        let words = words_of(&q);
        let has = |pair: &[&str]| words.windows(pair.len()).any(|w| w == pair);
        // The head noun after a question word, past a copula and an article ("what was the
        // birthplace of ...": "birthplace"), as question classifiers read it.
        let follows = |lead: &[&str], nouns: &[&str]| {
            words.iter().enumerate().any(|(i, w)| {
                lead.contains(w)
                    && words[i + 1..]
                        .iter()
                        .find(|n| {
                            !matches!(**n, "is" | "was" | "are" | "were" | "the" | "a" | "an")
                        })
                        .is_some_and(|n| nouns.contains(n))
            })
        };
        // Or the noun after a possessive in a question that starts with one ("What was Gore's
        // year of birth?", "What was Ada's birthplace?").
        let possessed = |nouns: &[&str]| {
            matches!(words.first(), Some(&"what" | &"which"))
                && words
                    .windows(2)
                    .any(|w| w[0] == "s" && nouns.contains(&w[1]))
        };
        let asked = |nouns: &[&str]| follows(&["what", "which"], nouns) || possessed(nouns);
        if asked(&["year"]) {
            return Asks::Year;
        }
        if asked(&["date", "day", "month", "century"]) {
            return Asks::When;
        }
        let quantities = [
            "many", "much", "long", "old", "big", "large", "high", "far", "often", "wide",
        ];
        if follows(&["how"], &quantities) || asked(QUANTITY_NOUNS) {
            return Asks::Number;
        }
        // An occupation or a purpose: the words that ask for one in any English question.
        if words.iter().any(|w| DESCRIPTION_NOUNS.contains(w))
            || has(&["for", "a", "living"])
            || has(&["line", "of", "work"])
            || has(&["kind", "of", "work"])
            || has(&["type", "of", "work"])
            // "What was her calling?", not "which calling convention".
            || words.last() == Some(&"calling")
            || words.ends_with(&["used", "for"])
        {
            return Asks::Description;
        }
        // "Which town ...", "at what place ...": the noun after the question word says the
        // answer's type, as in the coarse classes of question classification (Li and Roth,
        // 2002: HUMAN, LOCATION).
        // A nationality is a country's, named by it or by its adjective ("United States",
        // "Swedish"): the LOCATION class's country, not a person.
        if asked(PLACE_NOUNS) || words.contains(&"nationality") {
            return Asks::Where;
        }
        if has(&["who"]) || has(&["whom"]) || has(&["whose"]) || asked(AGENT_NOUNS) {
            return Asks::Who;
        }
        // "When" and "where" ask for a time or a place where they are the question's first
        // question word; after "what", "which" or "how" they open a clause of their own ("what
        // value does it use when none is given?").
        let first = words.iter().find(|w| QUESTION_WORDS.contains(w));
        if first == Some(&"when") {
            return Asks::When;
        }
        if first == Some(&"where") {
            return Asks::Where;
        }
        Asks::Other
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// Whether this kind of answer is a number (`Some(true)`: a quantity, a version or a
    /// year), is not one (`Some(false)`: a person, an organisation, a place, a trade or a
    /// purpose), or may be either (`None`: a time, anything else).
    pub fn is_a_number(self) -> Option<bool> {
        match self {
            Asks::Number | Asks::Year => Some(true),
            Asks::Who | Asks::Where | Asks::Description => Some(false),
            Asks::When | Asks::Other => None,
        }
    }

    /// Whether a span of `text` cannot be this kind of answer: a bare numeral ("1740",
    /// "1808-1879", "3.5") names no person, organisation, place or trade, and a span without
    /// a digit is no year (every one of the 71 year questions of the dev sets has digits in its
    /// answer). The features weigh a number's shape against the question already; this is the
    /// rule they only lean to, so that a year in "born in 1740" is not where someone was born,
    /// nor the place in "was born in Teiphailk" the year, however well its words fit.
    pub fn rules_out(self, text: &str) -> bool {
        let numeral = text.starts_with(|c: char| c.is_ascii_digit())
            && text
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | ':' | '/' | '-' | '–'));
        match self {
            Asks::Year => !text.chars().any(|c| c.is_ascii_digit()),
            _ => self.is_a_number() == Some(false) && numeral,
        }
    }

    /// Words that introduce this kind of answer in running text ("designed by N", "born in P",
    /// "worked as a T", "used for V-ing"): the word before a candidate (past an article) is
    /// one of them.
    pub(super) fn cues(self) -> &'static [&'static str] {
        match self {
            Asks::Who => &["by"],
            Asks::Where => &["in", "at", "from", "near"],
            Asks::Year | Asks::When => &["in", "on", "since", "until"],
            Asks::Number => &[],
            Asks::Description => &["as", "for", "is", "was", "are", "were"],
            Asks::Other => &[],
        }
    }
}

/// Prepositions a question's wh-phrase can hang from ("for which organisation", "born in?").
const PREPOSITIONS: &[&str] = &[
    "about", "after", "among", "at", "before", "by", "during", "for", "from", "in", "inside",
    "into", "near", "of", "on", "since", "through", "to", "under", "until", "with", "within",
];

/// The preposition the question's wh-phrase hangs from, fronted with it ("For which
/// organisation did she work?", "In what town …") or left at the end ("Which organisation did
/// she work for?", "What is it used for?"). English keeps that preposition before the answer
/// in a statement ("she worked for the Mozilla Foundation"), so it is the cue the question
/// itself gives, a sharper one than its kind's ([`Asks::cues`]: "by" for who, which fits a
/// person who did something, not the organisation someone worked for).
pub fn governing_preposition(question: &str) -> Option<&'static str> {
    let q = question.to_lowercase();
    let words = words_of(&q);
    let preposition = |w: &str| PREPOSITIONS.iter().copied().find(|p| *p == w);
    let wh = |w: &str| matches!(w, "what" | "which" | "who" | "whom" | "whose" | "where");
    match words.as_slice() {
        [first, second, ..] if wh(second) => preposition(first),
        [first, .., last] if wh(first) => preposition(last),
        _ => None,
    }
}

/// Nouns that make "which/what N" ask for a quantity (the NUMERIC class of question
/// classification).
const QUANTITY_NOUNS: &[&str] = &[
    "version",
    "number",
    "size",
    "percentage",
    "amount",
    "port",
    "length",
    "height",
    "depth",
    "width",
    "distance",
    "population",
    "elevation",
    "area",
    "weight",
    "price",
    "cost",
    "age",
];

/// Nouns that ask what someone does or what something is for.
const DESCRIPTION_NOUNS: &[&str] = &["profession", "occupation", "trade", "vocation", "purpose"];

/// Nouns that make "which/what N" ask for a place.
const PLACE_NOUNS: &[&str] = &[
    "place",
    "birthplace",
    "hometown",
    "headquarters",
    "town",
    "city",
    "country",
    "village",
    "location",
    "region",
    "county",
    "province",
    "continent",
    "island",
    "capital",
];

/// Nouns that make "which/what N" ask for a person or an organisation.
const AGENT_NOUNS: &[&str] = &[
    "person",
    "people",
    "man",
    "woman",
    "author",
    "organisation",
    "organization",
    "company",
    "firm",
    "team",
    "institution",
    "inventor",
    "founder",
    "designer",
    "developer",
];

/// Whether `question` asks for a part of a document rather than a document: the noun its
/// "which"/"what" (or an opening "name the") asks about, among the next three words, is one
/// of [`MEMBER_NOUNS`] ("which method of the Future class", "in the math module, which
/// function", "name the lint that", "what flag adds"). A program has options, a module
/// functions, a class methods: a document's title names the whole, not the part asked for.
pub fn asks_for_a_member(question: &str) -> bool {
    asks_about_one_of(&words_of(&question.to_lowercase()), MEMBER_NOUNS)
}

/// Whether `question` asks for something called by name, with arguments: a method, a
/// function or a class ("which Blob method …", "what function in shutil …"), and not about
/// one of its parameters ("the prefix parameter of makeSuite", "what value does getpass use
/// for prompt when none is given", "the default of …"). What a signature's brackets hold
/// answers no such question.
pub fn asks_for_a_callable(question: &str) -> bool {
    let q = question.to_lowercase();
    let words = words_of(&q);
    asks_about_one_of(&words, CALLABLE_NOUNS)
        && !words.iter().any(|w| {
            matches!(
                *w,
                "parameter" | "parameters" | "argument" | "arguments" | "default"
            )
        })
}

/// Whether the noun a question's "which"/"what" (or an opening "name the") asks about, among
/// the next three of its `words` (lower-case), is one of `nouns`.
fn asks_about_one_of(words: &[&str], nouns: &[&str]) -> bool {
    words.iter().enumerate().any(|(i, w)| {
        (matches!(*w, "which" | "what") || (i == 0 && *w == "name"))
            && words[i + 1..].iter().take(3).any(|n| nouns.contains(n))
    })
}

/// Nouns of what is called with arguments.
const CALLABLE_NOUNS: &[&str] = &["method", "function", "class", "constructor", "coroutine"];

/// Whether `question` asks for a program ("which command converts…", "the name of the program
/// that…", "which tool can I use…") and not for one of its options: a program's options then
/// answer it no better than any other words of its page.
pub fn asks_for_a_program(question: &str) -> bool {
    let q = question.to_lowercase();
    let words = words_of(&q);
    words.iter().any(|w| PROGRAM_NOUNS.contains(w))
        && !words
            .iter()
            .any(|w| matches!(*w, "option" | "options" | "flag" | "flags" | "switch"))
}

/// Whether `question` asks for the term something goes by ("What term is used for a tuple
/// with n fields?", "What is the name for …?", "What is a tuple with n fields called?"):
/// English states the answer after "called" or "named" ("is called an n-ary tuple"), as a
/// place after "in".
pub fn asks_for_a_term(question: &str) -> bool {
    let q = question.to_lowercase();
    let words = words_of(&q);
    let wh = |w: &str| matches!(w, "what" | "which");
    words.windows(2).any(|pair| match pair {
        [first, noun] if wh(first) => matches!(*noun, "term" | "word"),
        ["name", "for"] => true,
        _ => false,
    }) || (words.first().is_some_and(|w| wh(w))
        && words.last().is_some_and(|w| TERM_CUES.contains(w)))
}

/// Words that state a term in running text ("is called an n-ary tuple", "named the
/// implementing type").
pub(super) const TERM_CUES: &[&str] = &["called", "named", "termed"];

/// Nouns a question names a program by.
const PROGRAM_NOUNS: &[&str] = &[
    "command",
    "program",
    "tool",
    "utility",
    "daemon",
    "executable",
];

/// Nouns of the parts of a document a question asks for by kind: a program's options and
/// flags, a module's functions, classes and constants, a type's methods and fields, a
/// configuration's keys and settings.
const MEMBER_NOUNS: &[&str] = &[
    "method",
    "function",
    "class",
    "attribute",
    "field",
    "option",
    "flag",
    "switch",
    "lint",
    "keyword",
    "variable",
    "parameter",
    "argument",
    "property",
    "constant",
    "exception",
    "macro",
    "key",
    "setting",
    "subcommand",
];

/// The words that open an English question (or a clause of one).
const QUESTION_WORDS: &[&str] = &[
    "what", "which", "who", "whom", "whose", "when", "where", "how", "why",
];

/// The words of a question already in lower case, punctuation dropped ("Gore's" as "gore",
/// "s"): what the question's analyses match their word lists against.
fn words_of(lowered: &str) -> Vec<&str> {
    lowered
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether the question asks for a number (`Some(true)`: a quantity, a version or a year,
/// [`Asks`]), for something that is not one (`Some(false)`: who,
/// where), or cannot be told (`None`). A copied answer then starts with a digit or not.
pub fn wants_number(question: &str) -> Option<bool> {
    Asks::of(question).is_a_number()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numeral_is_no_person_place_or_trade_and_a_year_has_digits() {
        for asks in [Asks::Who, Asks::Where, Asks::Description] {
            for numeral in ["1740", "1808-1879", "3.5", "10–20", "12:30"] {
                assert!(asks.rules_out(numeral), "{asks:?} {numeral}");
            }
            for answer in ["Othtu", "1740s", "10 Downing Street", "painter", "3M"] {
                assert!(!asks.rules_out(answer), "{asks:?} {answer}");
            }
        }
        for asks in [Asks::Year, Asks::When, Asks::Number, Asks::Other] {
            assert!(!asks.rules_out("1740"), "{asks:?}");
        }
        for year in ["1740", "44 BC", "the 1740s", "c. 1700"] {
            assert!(!Asks::Year.rules_out(year), "{year}");
        }
        for word in ["Teiphailk", "never", "the following spring"] {
            assert!(Asks::Year.rules_out(word), "{word}");
            assert!(!Asks::When.rules_out(word), "{word}");
        }
    }

    #[test]
    fn questions_say_what_they_ask_for() {
        assert_eq!(Asks::of("Who wrote serde?"), Asks::Who);
        assert_eq!(Asks::of("In what year was it founded?"), Asks::Year);
        assert_eq!(Asks::of("When was it founded?"), Asks::When);
        assert_eq!(Asks::of("How many pages does it have?"), Asks::Number);
        assert_eq!(
            Asks::of("Which version of Rust does it need?"),
            Asks::Number
        );
        assert_eq!(Asks::of("Where can I find it on the web?"), Asks::Where);
        assert_eq!(Asks::of("Which option copies recursively?"), Asks::Other);
        assert_eq!(Asks::of("In which town was she born?"), Asks::Where);
        assert_eq!(Asks::of("At what place was it built?"), Asks::Where);
        assert_eq!(Asks::of("For which company did he work?"), Asks::Who);
        assert_eq!(Asks::of("Which person or organisation made it?"), Asks::Who);
        // Words with a technical sense ("which state", "which group") stay open.
        assert_eq!(Asks::of("Which group owns the socket?"), Asks::Other);
        // The head noun past a copula and an article.
        assert_eq!(Asks::of("What was the birthplace of Ada?"), Asks::Where);
        assert_eq!(Asks::of("What is the length of the Rhine?"), Asks::Number);
        assert_eq!(
            Asks::of("What did Knuth do for a living?"),
            Asks::Description
        );
        assert_eq!(Asks::of("What was Zuse's profession?"), Asks::Description);
        assert_eq!(Asks::of("What is a buffer used for?"), Asks::Description);
        assert_eq!(Asks::of("What was Blok's calling?"), Asks::Description);
        assert_eq!(
            Asks::of("What kind of work did Seurat do?"),
            Asks::Description
        );
        assert_eq!(Asks::of("Which calling convention is it?"), Asks::Other);
        assert_eq!(Asks::of("What nationality was Tito?"), Asks::Where);
        assert_eq!(Asks::of("What was Gore's nationality?"), Asks::Where);
        assert_eq!(Asks::of("What was Gore's year of birth?"), Asks::Year);
        assert_eq!(Asks::of("What was Ada's birthplace?"), Asks::Where);
        assert_eq!(Asks::of("What is serde's version?"), Asks::Number);
        assert_eq!(Asks::of("Who is the crate's author?"), Asks::Who);
        // A term asked for by what it is used for is not a purpose.
        assert_eq!(Asks::of("What term is used for the fn type?"), Asks::Other);
        // "When" or "where" after another question word opens a clause of its own.
        assert_eq!(
            Asks::of("What value does register use for mask when none is given?"),
            Asks::Other
        );
        assert_eq!(
            Asks::of("Which file holds the paths where it looks?"),
            Asks::Other
        );
        assert_eq!(Asks::of("Where did it start when it began?"), Asks::Where);
        for member in [
            "Which method of the Future class would I call to return True?",
            "In Python's math module, which function returns the arc sine of x?",
            "Name the lint that warns by default.",
            "What flag adds the SPARC V8 instructions?",
            "Which hmac function would I call to make a hashing object?",
        ] {
            assert!(asks_for_a_member(member), "{member}");
        }
        for whole in [
            "Which standard Python module reads resources?",
            "What is the name of the program that modifies the depth?",
            "Which application manages disks?",
            "Who wrote the function library?",
        ] {
            assert!(!asks_for_a_member(whole), "{whole}");
        }
        assert_eq!(
            governing_preposition("For which company did Grace Hopper work?"),
            Some("for")
        );
        assert_eq!(
            governing_preposition("Which company did Grace Hopper work for?"),
            Some("for")
        );
        assert_eq!(
            governing_preposition("In which town was she born?"),
            Some("in")
        );
        assert_eq!(
            governing_preposition("Where did the family come from?"),
            Some("from")
        );
        assert_eq!(governing_preposition("By whom was it written?"), Some("by"));
        assert_eq!(governing_preposition("Who wrote serde?"), None);
        assert_eq!(
            governing_preposition("When running ls, which option sorts?"),
            None
        );
        assert_eq!(governing_preposition("Sort it by what?"), None);
        assert_eq!(
            Asks::Description.cues(),
            ["as", "for", "is", "was", "are", "were"]
        );
    }

    #[test]
    fn a_program_is_asked_for_by_its_noun_unless_an_option_is() {
        assert!(asks_for_a_program(
            "Which command converts a GRAP diagram into a cropped image?"
        ));
        assert!(asks_for_a_program(
            "What is the name of the program that reverses lines?"
        ));
        assert!(asks_for_a_program(
            "Which tool can I use to show process capabilities?"
        ));
        assert!(!asks_for_a_program(
            "Which command-line option turns off padding?"
        ));
        assert!(!asks_for_a_program("What flag makes the tool quiet?"));
        assert!(asks_for_a_callable(
            "Which method of the NNTP class would I call to get the welcome message?"
        ));
        assert!(asks_for_a_callable(
            "What function in dataclasses returns a fresh dynamically created dataclass?"
        ));
        assert!(!asks_for_a_callable(
            "What is the default value of the prefix parameter of makeSuite?"
        ));
        assert!(!asks_for_a_callable(
            "In Python's getpass module, what value does getpass use for prompt when none is given?"
        ));
        assert!(!asks_for_a_callable("Which field is an optional key?"));
        assert!(asks_for_a_callable(
            "Which method of the ExpatParser class would I call to define the value of some SAX2 \
             property?"
        ));
        assert!(!asks_for_a_program(
            "Which function returns the line number?"
        ));
    }

    #[test]
    fn a_term_is_asked_for_by_its_noun_or_by_called() {
        for asks in [
            "What term is used for a tuple with n fields?",
            "What is the name for the server's default mechanism?",
            "What is a tuple with n fields called?",
            "Which word describes a function with no name?",
        ] {
            assert!(asks_for_a_term(asks), "{asks}");
        }
        for not in [
            "What is the name of the application that plays music?",
            "Under what terms is LibreOffice distributed?",
            "Who called the meeting?",
            "What terminates the comment at the initial */?",
        ] {
            assert!(!asks_for_a_term(not), "{not}");
        }
    }
}
