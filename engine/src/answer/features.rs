//! What is known of a candidate answer, as numbers a linear ranker weighs: the retrieval of its
//! passage, the encoder's similarity of its sentence to the question, the question's words
//! around it, its own words, its shape against the kind of answer the question asks for, the
//! field it is the value of, and the reader's likelihood of it as the answer.
//!
//! Every cue is general English or general text shape (question words, capitals, digits,
//! paths, URLs); none comes from how an evaluation set was written.

use capstan_reader::ScoredSentence;
use capstan_retriever::Hit;

use super::asks::{
    asks_for_a_callable, asks_for_a_member, asks_for_a_program, asks_for_a_term,
    governing_preposition, Asks, TERM_CUES,
};
use super::candidates::{words, Candidate, RangeEnd};
use super::layout::{self, LineRole};
use super::shape::{Shape, SHAPES};
use super::span_text::{
    cuts_a_name, cuts_a_phrase, follows_default, holds_a_clause, inside_a_signature, is_agent_noun,
    is_call_with_arguments, is_option_with_argument, is_plural_of_a_word_in, names_a_file,
    signature_function, title_is_a_heading,
};
use crate::words::{IRREGULAR_FORMS, NON_ANSWER_STARTS};

/// Words of the question a candidate should be near: within this many words either side.
const WINDOW: usize = 10;

/// Stems of the content words of `text`: lower case, the Snowball (Porter 2) English stem
/// (so "worked" meets "work"), then its first five letters (so "maintains" meets
/// "maintainer", "licence" "license", "founded" "founder"), function words left out; an
/// irregular form is stemmed as the word it is read as ([`IRREGULAR_FORMS`]: "born" meets
/// "birth", "wrote" "write").
pub fn stems(text: &str) -> Vec<String> {
    static ENGLISH: std::sync::OnceLock<rust_stemmers::Stemmer> = std::sync::OnceLock::new();
    let stemmer =
        ENGLISH.get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !NON_ANSWER_STARTS.contains(&w.as_str()))
        .map(|w| {
            let read_as = IRREGULAR_FORMS
                .iter()
                .find(|(form, _)| *form == w)
                .map_or(w.as_str(), |(_, word)| word);
            stemmer.stem(read_as).chars().take(5).collect()
        })
        .collect()
}

/// Names of the features, in the order of a feature vector (the ranker's weights file lists
/// them, and is refused when they differ).
pub fn names() -> Vec<String> {
    let mut n: Vec<String> = [
        "bias",
        "sentence_similarity",
        "sentence_similarity_gap",
        "sentence_rank",
        "passage_rank",
        "first_passage",
        "passage_score_share",
        "question_words_near",
        "question_words_in_sentence",
        "words_from_question",
        "one_word",
        "words",
        "long",
        "field_value",
        "field_key_in_question",
        "field_key_similarity",
        "field_key_most_similar",
        "whole_field_value",
        "in_title",
        "after_by",
        "after_copula",
        "after_called",
        "repeats",
        "in_context",
        "lm_mean",
        "lm_first",
        "lm_end",
        "lm_mean_gap",
        "lm_rank",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let asks = [
        "who",
        "where",
        "year",
        "when",
        "number",
        "description",
        "other",
    ];
    let shapes = [
        "number", "url", "email", "path", "option", "code", "name", "words",
    ];
    for a in asks {
        for s in shapes {
            n.push(format!("asks_{a}_x_{s}"));
        }
    }
    n.push("cue_fits_question".into());
    n.push("relation_similarity".into());
    n.push("relation_similarity_gap".into());
    n.push("call_with_arguments".into());
    n.push("after_as".into());
    n.push("question_words_before".into());
    n.push("question_words_after".into());
    n.push("title_when_the_question_names_one".into());
    for a in asks {
        n.push(format!("question_words_before_x_asks_{a}"));
        n.push(format!("question_words_after_x_asks_{a}"));
    }
    n.push("parameter_value".into());
    n.push("parameter_named_in_question".into());
    n.push("range_first".into());
    n.push("range_last".into());
    n.push("range_last_when_the_question_asks_an_end".into());
    n.push("agent_noun".into());
    n.push("agent_noun_when_the_question_asks_description".into());
    n.push("cuts_a_name".into());
    n.push("option_with_its_argument".into());
    n.push("question_predicate_just_before".into());
    n.push("question_predicate_just_after".into());
    n.push("holds_a_clause".into());
    n.push("cuts_a_phrase".into());
    n.push("on_a_term_line".into());
    n.push("starts_a_term_line".into());
    n.push("question_words_in_definition".into());
    n.push("heads_a_list".into());
    n.push("title_when_the_question_asks_a_member".into());
    n.push("after_default_when_asked".into());
    n.push("in_the_definition_of_a_term_the_question_names".into());
    n.push("parameter_of_a_function_the_question_names".into());
    n.push("default_in_the_definition_of_a_term_the_question_names".into());
    n.push("title_names_a_file".into());
    n.push("plural_of_a_question_word".into());
    n.push("key_of_a_value_the_question_spells".into());
    n.push("member_of_a_container_the_question_names".into());
    n.push("inside_a_signature_when_a_callable_is_asked".into());
    n.push("title_phrase_sharing_a_question_word".into());
    n.push("title_is_a_heading".into());
    n
}

/// Index of `cue_fits_question`.
const CUE: usize = SHAPE_BASE + ASKS * SHAPES;
/// Index of the first of the relation features ([`super::relation`]; 0 until set, as the
/// likelihood features are).
pub const RELATION: usize = CUE + 1;
/// Index of `call_with_arguments`.
const CALL: usize = RELATION + 2;
/// Index of `after_as`: "as" before a span names a role ("worked as a glassblower") but as
/// often starts a comparison or a list ("such as", "as well as"), so it is weighed apart from
/// "called" and "named".
const AFTER_AS: usize = CALL + 1;
/// Index of `question_words_before`, then `question_words_after`: the question's words in the
/// window on one side of a span only. A term is described after it (an option and its help,
/// a field and its value, "X is used for …"); the side tells an option's own description from
/// the previous one's, which the window on both sides holds as well.
pub(crate) const SIDES: usize = AFTER_AS + 1;
/// Index of `title_when_the_question_names_one`: a document's title as the answer where the
/// question spells a retrieved title already. A question that names its document ("which
/// llvm-objdump option …", "where was Ada conceived") asks for something inside it, and
/// another document's name is seldom that; one that names none may ask for a document.
pub(crate) const NAMED_TITLE: usize = SIDES + 2;
/// Index of the first of the two sides again, per kind of question: where the question's words
/// stand against the answer depends on what it asks ("which option does X": the option
/// before its help; "where was X born": the place after the words the question repeats).
const SIDES_BY_ASKS: usize = NAMED_TITLE + 1;
/// Index of `parameter_value`, then `parameter_named_in_question`: the span is the value of a
/// `name=value` word (`0.25` of `sleep=0.25`), and the question names that parameter and
/// asks for no member by name ([`asks_for_a_member`]). A signature's `=None` answers nothing
/// unless its parameter is asked about.
const PARAMETER: usize = SIDES_BY_ASKS + 2 * ASKS;
/// Index of `range_first`, `range_last`, then `range_last_when_the_question_asks_an_end`: the
/// span is a range's first or last number ("1879-1955"), and the last where the question asks
/// when something ended ("when did she die", "until what year"). A life's range gives its
/// birth and its death; a run's, its start and its end.
const RANGE: usize = PARAMETER + 2;
/// Index of `agent_noun`, then `agent_noun_when_the_question_asks_description`: the span ends
/// in a noun of one who does something, by its English suffix ("painter", "navigator",
/// "zoologist", "historian", "engineer"), and the question asks what someone did. A trade is
/// such a noun; the words around a biography's trade ("pointillism", "virtuoso", "1877") are not.
const AGENT: usize = RANGE + 3;
/// Index of `cuts_a_name`: the span is a name (every word capitalised) and a capitalised word
/// goes on from it in its clause, one space away ("Klapetek" of "Martin Klapetek", "Purdue"
/// of "Purdue University"). A name is answered whole.
const CUT_NAME: usize = AGENT + 2;
/// Index of `option_with_its_argument`: the span is a command-line option with its argument
/// ("--context=N", "--port tcp-port", "-o output_file"). An option is named by its name; the
/// argument is what a user fills in.
const OPTION_ARGUMENT: usize = CUT_NAME + 1;
/// Index of `question_predicate_just_before`, then `question_predicate_just_after`: the
/// nearest content word on that side of the span, in its clause and within [`BESIDE_WORDS`]
/// words, is a small-letter word of the question ("worked for [the Gweketei Institute]",
/// "used for [weighing precious metals]", "[Kavi Fenrovu] founded", for "which organisation
/// did she work for", "what was it used for", "who was its founder"). The window of
/// `question_words_before` holds the question's name as well; the word right beside the
/// answer is the relation the question asks about, and a name is not one.
const BESIDE: usize = OPTION_ARGUMENT + 1;
/// Index of `holds_a_clause`: a copula inside the span ("Teipelsa Brinve was a little-known
/// historian"): a statement, where a short answer is the phrase it states.
const CLAUSE: usize = BESIDE + 2;
/// Index of `cuts_a_phrase`: a span of small-letter words that a small-letter content word
/// goes on from, one space away ("lighting" of "lighting mine galleries", "cheaper" of
/// "cheaper alternatives"): the phrase goes on past it, as a name does past a cut name.
const CUT_PHRASE: usize = CLAUSE + 1;
/// Index of `on_a_term_line`, `starts_a_term_line`, `question_words_in_definition`, then
/// `heads_a_list` ([`layout`]): the span's line is a term of a definition list (the lines
/// below it, indented deeper, define it), the span starts that line ("isreadable" of
/// "isreadable(object)", "-a" or "--all" of "-a, --all"), the share of the question's words
/// in the first [`DEFINITION_WORDS`] words of its definition ("Which function decides if
/// saferepr is readable by eval?"), and the line heads a list of terms instead ("FUNCTIONS",
/// "OPTIONS").
pub(crate) const DEFINITION: usize = CUT_PHRASE + 1;

/// Index of `title_when_the_question_asks_a_member`: a document's title as the answer to a
/// question asking for a part of a document ([`asks_for_a_member`]: "which method of the
/// Unpickler class", where the title is the module "pickle").
const MEMBER_TITLE: usize = DEFINITION + 4;

/// Index of `after_default_when_asked`: the question asks for a default ("what is the default
/// value of -g", "what does --interval default to") and the span follows "default" closely in
/// its sentence ("Default is 48.", "(default: 5)", "defaults to 1.0", "the default value is
/// 2.0"): documentation states a default in those words.
const DEFAULT: usize = MEMBER_TITLE + 1;

/// Index of `in_the_definition_of_a_term_the_question_names`: the span lies in the definition
/// of a term the question names ("What is the default value of the -error-threshold option?":
/// "2.0" under "-error-threshold=float"; "What does --interval default to?"): a question about
/// a named option or function is answered by what its definition says, not by the words on
/// its line.
pub(crate) const NAMED_TERM: usize = DEFAULT + 1;

/// Index of `parameter_of_a_function_the_question_names`: the span is the value of a
/// parameter the question names in the signature of a function it names ("What is the
/// default value of the prefix parameter of makeSuite?": `test` of "makeSuite(testCaseClass,
/// prefix='test')"). A page of signatures gives the same parameter to many functions, each
/// its own default.
pub(crate) const NAMED_FUNCTION: usize = NAMED_TERM + 1;

/// Index of `default_in_the_definition_of_a_term_the_question_names`: both
/// `after_default_when_asked` and `in_the_definition_of_a_term_the_question_names` hold ("What
/// does the --interval option default to?": "Default is 60." under "--interval=SECS"). Either
/// alone is common (every option's "Default is …" on a page; every word of the named
/// option's definition); the default the named option's definition states is the answer.
pub(crate) const NAMED_DEFAULT: usize = NAMED_FUNCTION + 1;

/// Index of `title_names_a_file`: the span is a document's title that is its file's name
/// ([`names_a_file`]: "python3-httplib2 README.md", "book/ch03-05-control-flow"). Where a
/// text was found answers nothing the text says; `in_title` is for a title that names what
/// its document is about ("http.client", "pngtopnm").
pub(crate) const FILE_TITLE: usize = NAMED_DEFAULT + 1;

/// Index of `plural_of_a_question_word`: the span is one word, the plural of a word of the
/// question ("Attributes" for "which attribute may …", "Expressions" for "what expression
/// evaluates …"): the kind the question asks for one of, as a heading or a title names it,
/// not the one it asks for.
pub(crate) const KIND_PLURAL: usize = FILE_TITLE + 1;

/// Index of `key_of_a_value_the_question_spells`: the span is the value of a field whose key
/// is that of a field whose whole value the question spells ("Package", where the question
/// names the package "dynamite" and a retrieved record holds "Package: dynamite"). The
/// question names its record by that field; the same field of another record ("Package:
/// dynamite-data") answers nothing it asks.
pub(crate) const TOPIC_KEY: usize = KIND_PLURAL + 1;

/// Index of `member_of_a_container_the_question_names`: the question asks for a member
/// ([`asks_for_a_member`]) and the span starts a term line in the body of a class (a struct,
/// a trait) the question names ([`layout::container_of`]: "seek" under "class
/// Blob(builtins.object)", for "which Blob method defines the access position?"; not a
/// wrapped signature's `object_hook=None` for "which module is an implementation of
/// JSONDecoder?"). A page lists many classes' methods, and a passage may begin inside a
/// class body, below the line naming it (the passage's section heading keeps that line).
pub(crate) const NAMED_CONTAINER: usize = TOPIC_KEY + 1;

/// Index of `inside_a_signature_when_a_callable_is_asked`: the span lies inside the brackets
/// of a signature or a call ([`inside_a_signature`]: `name` of "getProperty(self, name)",
/// `prefix=None` of "get_python_inc(plat_specific=0, prefix=None)") and the question asks for
/// a method, a function or a class ([`asks_for_a_callable`]). A signature's parameters are
/// what its function is given, never the function asked for.
pub(crate) const IN_SIGNATURE: usize = NAMED_CONTAINER + 1;

/// Index of `title_phrase_sharing_a_question_word`: the span is a document's title of two
/// words or more, and the question repeats one of them ("July 2002: Martin Butterweck died"
/// for "What illness did Martin Butterweck fight?", "Debian Releases" for "Which CD vendor
/// shipped a development release as Debian 1.0?"). A chapter's or an article's heading says
/// what its text is about, which a question that repeats it already knows; a title that
/// answers is the one-word name of what its document describes ("pngtopnm", "sigscheme"),
/// where a question's words are seen inside the name rather than beside it.
pub(crate) const TOPIC_TITLE: usize = IN_SIGNATURE + 1;

/// Index of `title_is_a_heading`: the span is a document's title that is a heading
/// ([`title_is_a_heading`]: "1.3. The Inner Workings of the Debian Project", "Preface" where
/// the passage begins in the section it heads), as the pages, PDFs and books users keep are
/// titled, where `in_title`'s weight was learnt from titles that name a record's or an
/// article's subject ("pngtopnm", "sigscheme").
pub(crate) const HEADING_TITLE: usize = TOPIC_TITLE + 1;

/// Lines above a span searched for the term whose definition holds it.
const TERM_REACH_LINES: usize = 40;

/// Words of a term's definition its question-word share reads: a definition's first
/// sentence or two says what the term does.
const DEFINITION_WORDS: usize = 30;

/// Words passed over to the nearest content word beside a span (function words: "worked for
/// the [X]" reaches "worked").
const BESIDE_WORDS: usize = 3;

/// Index of the first of the reader's likelihood features (they are 0 until scored).
pub const LM_FEATURES: std::ops::Range<usize> = 24..29;
/// Index of `after_copula`.
const AFTER_COPULA: usize = 20;
/// Index of `in_context`.
pub const IN_CONTEXT: usize = 23;
const SHAPE_BASE: usize = 29;
/// Kinds of question ([`Asks`]).
const ASKS: usize = 7;

/// Words of a question about an end: of a life, a run, a reign or a service ("pass away" is
/// two words, read apart: "pass" alone is an option's verb).
const ENDING_WORDS: &[&str] = &[
    "die", "died", "dies", "death", "end", "ended", "ends", "until", "till", "last", "closed",
    "finish", "finished", "retire", "retired", "stop", "stopped", "away", "expire", "expired",
];

/// The question as the features read it.
pub struct Question {
    text: String,
    stems: Vec<String>,
    asks: Asks,
    /// The question asks when or how something ended ("when did she die", "until when").
    asks_an_end: bool,
    /// It asks for a part of a document ([`asks_for_a_member`]).
    asks_a_member: bool,
    /// It asks for a method, a function or a class ([`asks_for_a_callable`]).
    asks_a_callable: bool,
    /// It asks for a program, not an option of one ([`asks_for_a_program`]).
    asks_a_program: bool,
    /// The words of the question that could name a term, as [`layout::term_names`] gives
    /// them: options ("-g", "--interval") and identifiers, punctuation around them dropped.
    names: Vec<String>,
    /// It asks for a default ("default", "defaults", "defaulted").
    asks_a_default: bool,
    /// The words that introduce its answer in a statement: the preposition its wh-phrase
    /// hangs from where it has one, else "called" and "named" where it asks for a term
    /// ([`asks_for_a_term`]), else its kind's ([`governing_preposition`], [`Asks::cues`]).
    cues: Vec<&'static str>,
}

impl Question {
    /// Analyses `question`.
    pub fn new(question: &str) -> Self {
        let mut stems = stems(question);
        stems.sort();
        stems.dedup();
        let asks = Asks::of(question);
        Self {
            text: question.to_string(),
            stems,
            asks,
            asks_a_member: asks_for_a_member(question),
            asks_a_program: asks_for_a_program(question),
            asks_a_callable: asks_for_a_callable(question),
            names: question
                .split_whitespace()
                .map(|w| w.trim_matches(|c: char| !(c.is_alphanumeric() || "-_.".contains(c))))
                .map(|w| w.trim_end_matches('.'))
                .filter(|w| w.len() >= 2)
                .map(str::to_string)
                .collect(),
            asks_a_default: question.to_lowercase().contains("default"),
            cues: match governing_preposition(question) {
                Some(p) => vec![p],
                None if asks_for_a_term(question) => TERM_CUES.to_vec(),
                None => asks.cues().to_vec(),
            },
            asks_an_end: question
                .to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| ENDING_WORDS.contains(&w)),
        }
    }

    /// What the question asks for.
    pub fn asks(&self) -> Asks {
        self.asks
    }

    /// Whether the nearest content word before the words `first..=last` of `view`, and the
    /// nearest after, is a small-letter word whose stem the question has ([`BESIDE`]).
    fn predicate_beside(&self, view: &PassageView, first: usize, last: usize) -> (bool, bool) {
        let asked =
            |w: &ViewWord| w.lower && self.stems.contains(&w.stem) && !view.title.contains(&w.stem);
        // Back from the span's first word: a word that ends its clause is another clause's.
        let before = view.words[..first]
            .iter()
            .rev()
            .take(BESIDE_WORDS)
            .take_while(|w| !w.clause_end)
            .find(|w| !w.stem.is_empty())
            .is_some_and(asked);
        // On from its last word, unless that ends its clause: a word that ends the clause is
        // the clause's last.
        let mut after = None;
        if !view.words[last].clause_end {
            for w in view.words[last + 1..].iter().take(BESIDE_WORDS) {
                if !w.stem.is_empty() {
                    after = Some(w);
                    break;
                }
                if w.clause_end {
                    break;
                }
            }
        }
        let after = after.is_some_and(asked);
        (before, after)
    }

    fn share_in(&self, have: &[String]) -> f32 {
        if self.stems.is_empty() {
            return 0.0;
        }
        let found = self.stems.iter().filter(|s| have.contains(s)).count();
        found as f32 / self.stems.len() as f32
    }
}

/// A word of a passage as the features read it.
struct ViewWord {
    start: usize,
    end: usize,
    /// Its stem ([`stems`]; empty for a function word).
    stem: String,
    /// It ends its clause (punctuation or a line break after it).
    clause_end: bool,
    /// It starts with a small letter (a predicate's word, not a name's).
    lower: bool,
}

impl ViewWord {
    fn all(text: &str) -> Vec<ViewWord> {
        words(text)
            .into_iter()
            .map(|w| {
                let word = &text[w.start..w.end];
                ViewWord {
                    start: w.start,
                    end: w.end,
                    stem: stems(word).into_iter().next().unwrap_or_default(),
                    clause_end: w.clause_end,
                    lower: word.starts_with(|c: char| c.is_lowercase()),
                }
            })
            .collect()
    }
}

/// Per passage, its words' stems and its sentences' scores, computed once for all its
/// candidates.
pub struct PassageView {
    words: Vec<ViewWord>,
    sentences: Vec<(usize, usize, f32, usize)>,
    /// The stems of its document's title: what every sentence of the passage is about, named
    /// in full or not ("Aelri came from Othtu", "He worked for …" in "Urgaud Aelri").
    title: Vec<String>,
}

impl PassageView {
    /// The views of `hits`, with the sentence ranking (best first) of the extractive reader.
    pub fn all(hits: &[Hit], ranked: &[ScoredSentence]) -> Vec<PassageView> {
        hits.iter()
            .enumerate()
            .map(|(h, hit)| {
                let words = ViewWord::all(&hit.text);
                let mut sentences: Vec<(usize, usize, f32, usize)> = ranked
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.passage == h)
                    .map(|(rank, s)| (s.start, s.end, s.score, rank))
                    .collect();
                sentences.sort_by_key(|s| s.0);
                PassageView {
                    words,
                    sentences,
                    title: stems(&hit.title),
                }
            })
            .collect()
    }

    /// The sentence a candidate is read in (its range, score and rank): the one holding it,
    /// and for a title the passage's best.
    pub fn sentence_of(&self, c: &Candidate) -> Option<(usize, usize, f32, usize)> {
        if c.in_title {
            self.sentences.iter().min_by_key(|s| s.3).copied()
        } else {
            self.sentence_at(c.start)
        }
    }

    /// The sentence holding byte `pos` (its range, score and rank), else the passage's best.
    pub fn sentence_at(&self, pos: usize) -> Option<(usize, usize, f32, usize)> {
        self.sentences
            .iter()
            .find(|s| s.0 <= pos && pos < s.1)
            .or_else(|| self.sentences.iter().min_by_key(|s| s.3))
            .copied()
    }
}

/// The feature vector of every candidate (the likelihood features left at 0).
pub fn features(
    question: &Question,
    hits: &[Hit],
    views: &[PassageView],
    candidates: &[Candidate],
    in_context: impl Fn(&Candidate) -> bool,
    key_similarity: &dyn Fn(&str) -> f32,
) -> Vec<Vec<f32>> {
    // Each field key's similarity to the question (the encoder's, so "Developer" meets "who
    // created"), and the best of each passage's keys.
    let mut key_sims: std::collections::HashMap<(usize, usize, usize), f32> = Default::default();
    let mut best_key: Vec<f32> = vec![f32::NEG_INFINITY; hits.len()];
    for c in candidates {
        if let Some(k) = c.key {
            let sim = *key_sims
                .entry((c.hit, k.0, k.1))
                .or_insert_with(|| key_similarity(&hits[c.hit].text[k.0..k.1]));
            best_key[c.hit] = best_key[c.hit].max(sim);
        }
    }
    let best_sentence = views
        .iter()
        .flat_map(|v| v.sentences.iter().map(|s| s.2))
        .fold(f32::NEG_INFINITY, f32::max);
    let top_score = hits.first().map_or(0.0, |h| h.score);
    let texts: Vec<String> = candidates
        .iter()
        .map(|c| crate::text::normalize_answer(c.text(hits)))
        .collect();
    let mut counts: std::collections::HashMap<&str, usize> = Default::default();
    for t in &texts {
        *counts.entry(t.as_str()).or_default() += 1;
    }
    let names_a_title = hits
        .iter()
        .any(|h| super::spelled_in(&question.text, &h.title));
    let key_text = |c: &Candidate| {
        c.key
            .map(|(ks, ke)| hits[c.hit].text[ks..ke].to_lowercase())
    };
    let topic_keys: std::collections::HashSet<String> = candidates
        .iter()
        .filter(|c| c.whole_value && super::spelled_in(&question.text, c.text(hits)))
        .filter_map(key_text)
        .collect();
    let heading_titles: Vec<bool> = hits
        .iter()
        .map(|h| title_is_a_heading(&h.title, h.location.section.as_deref()))
        .collect();
    let n = names().len();
    // Each candidate's line's role, computed once a line.
    let mut roles: std::collections::HashMap<(usize, usize), (LineRole, f32)> = Default::default();
    candidates
        .iter()
        .zip(&texts)
        .map(|(c, norm)| {
            let mut f = vec![0f32; n];
            let view = &views[c.hit];
            let hit = &hits[c.hit];
            f[0] = 1.0;
            let sentence = view.sentence_of(c);
            if let Some((s_start, s_end, score, rank)) = sentence {
                f[1] = score;
                f[2] = score - best_sentence;
                f[3] = 1.0 / (1.0 + rank as f32);
                let in_sentence: Vec<String> = view
                    .words
                    .iter()
                    .filter(|w| s_start <= w.start && w.end <= s_end)
                    .map(|w| w.stem.clone())
                    .chain(view.title.iter().cloned())
                    .collect();
                f[8] = question.share_in(&in_sentence);
            }
            f[4] = 1.0 / (1.0 + c.hit as f32);
            f[5] = (c.hit == 0) as u8 as f32;
            f[6] = if top_score > 0.0 {
                (hit.score / top_score).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let own = stems(c.text(hits));
            if !c.in_title {
                let first = view.words.iter().position(|w| w.start >= c.start);
                let last = view.words.iter().rposition(|w| w.end <= c.end);
                if let (Some(first), Some(last)) = (first, last) {
                    let lo = first.saturating_sub(WINDOW);
                    let hi = (last + 1 + WINDOW).min(view.words.len());
                    let stems_of = |ws: &[ViewWord]| -> Vec<String> {
                        ws.iter().map(|w| w.stem.clone()).collect()
                    };
                    let before = stems_of(&view.words[lo..first]);
                    let after = stems_of(&view.words[last + 1..hi]);
                    f[SIDES] = question.share_in(&before);
                    f[SIDES + 1] = question.share_in(&after);
                    let by_asks = SIDES_BY_ASKS + 2 * question.asks.index();
                    f[by_asks] = f[SIDES];
                    f[by_asks + 1] = f[SIDES + 1];
                    let near: Vec<String> = before
                        .into_iter()
                        .chain(after)
                        .chain(view.title.iter().cloned())
                        .collect();
                    f[7] = question.share_in(&near);
                    let (before, after) = question.predicate_beside(view, first, last);
                    f[BESIDE] = before as u8 as f32;
                    f[BESIDE + 1] = after as u8 as f32;
                }
            }
            if !own.is_empty() {
                let from_q = own.iter().filter(|s| question.stems.contains(s)).count();
                f[9] = from_q as f32 / own.len() as f32;
            }
            f[10] = (c.words == 1) as u8 as f32;
            f[11] = (c.words as f32).ln_1p();
            f[12] = (c.words >= 4) as u8 as f32;
            if let Some((ks, ke)) = c.key {
                f[13] = 1.0;
                let key = stems(&hit.text[ks..ke]);
                f[14] = key.iter().any(|k| question.stems.contains(k)) as u8 as f32;
                let sim = key_sims[&(c.hit, ks, ke)];
                f[15] = sim;
                f[16] = (sim >= best_key[c.hit]) as u8 as f32;
            }
            f[17] = c.whole_value as u8 as f32;
            f[18] = c.in_title as u8 as f32;
            f[19] = (c.previous == "by") as u8 as f32;
            f[AFTER_COPULA] =
                matches!(c.previous.as_str(), "is" | "are" | "was" | "were") as u8 as f32;
            f[21] = matches!(c.previous.as_str(), "called" | "named") as u8 as f32;
            f[22] = (counts[norm.as_str()] as f32).ln();
            f[IN_CONTEXT] = in_context(c) as u8 as f32;
            let shape = Shape::of(c.text(hits)) as usize;
            f[SHAPE_BASE + question.asks.index() * SHAPES + shape] = 1.0;
            f[CUE] = question.cues.contains(&c.previous.as_str()) as u8 as f32;
            f[CALL] = is_call_with_arguments(c.text(hits)) as u8 as f32;
            f[AFTER_AS] = (c.previous == "as") as u8 as f32;
            f[NAMED_TITLE] = (c.in_title && names_a_title) as u8 as f32;
            // An option's `=VALUE` names what to give (a synopsis' "[-error-threshold=float]",
            // a term line's "--depth=<n>"); a parameter's default is written `name=value` in
            // a signature, whose names take no hyphen.
            let placeholder = c
                .parameter
                .is_some_and(|(ps, _)| hit.text[ps..].starts_with('-'));
            if let Some((ps, pe)) = c.parameter.filter(|_| !placeholder) {
                f[PARAMETER] = 1.0;
                let name = &hit.text[ps..pe];
                // A question asking for a method or a function by what it does ("which
                // Chunk method returns the size") may share a word with a parameter
                // (`size=-1`) but asks for a name, which a parameter's value never is.
                let named = !question.asks_a_member
                    && (super::spelled_in(&question.text, name)
                        || question.share_in(&stems(name)) > 0.0);
                f[PARAMETER + 1] = named as u8 as f32;
                f[NAMED_FUNCTION] = (named
                    && signature_function(&hit.text, ps)
                        .is_some_and(|function| super::spelled_in(&question.text, function)))
                    as u8 as f32;
            }
            match c.range {
                Some(RangeEnd::First) => f[RANGE] = 1.0,
                Some(RangeEnd::Last) => {
                    f[RANGE + 1] = 1.0;
                    f[RANGE + 2] = question.asks_an_end as u8 as f32;
                }
                None => {}
            }
            if is_agent_noun(c.text(hits)) {
                f[AGENT] = 1.0;
                f[AGENT + 1] = (question.asks == Asks::Description) as u8 as f32;
            }
            let source = if c.in_title { &hit.title } else { &hit.text };
            f[CUT_NAME] =
                (shape == Shape::Name as usize && cuts_a_name(source, c.start, c.end)) as u8 as f32;
            f[OPTION_ARGUMENT] = is_option_with_argument(c.text(hits)) as u8 as f32;
            f[CLAUSE] = holds_a_clause(c.text(hits)) as u8 as f32;
            f[CUT_PHRASE] =
                (shape == Shape::Words as usize && cuts_a_phrase(source, c.end)) as u8 as f32;
            if !c.in_title {
                let line = layout::line_at(&hit.text, c.start);
                let mut role_of = |line: std::ops::Range<usize>| {
                    roles
                        .entry((c.hit, line.start))
                        .or_insert_with(|| line_role(question, view, &hit.text, line))
                        .clone()
                };
                f[NAMED_TERM] = (!question.names.is_empty()
                    && layout::lines_above(&hit.text, c.start)
                        .take(TERM_REACH_LINES)
                        .find_map(|l| match role_of(l.clone()).0 {
                            LineRole::Term { definition } if definition.contains(&c.start) => {
                                Some(l)
                            }
                            _ => None,
                        })
                        .is_some_and(|l| {
                            layout::term_names(&hit.text[l])
                                .iter()
                                .any(|n| question.names.iter().any(|q| q == n))
                        })) as u8 as f32;
                let (role, share) = role_of(line.clone());
                if let LineRole::Term { .. } = role {
                    f[DEFINITION] = 1.0;
                    let starts = layout::starts_the_line(&hit.text, line, c.start);
                    f[DEFINITION + 1] = starts as u8 as f32;
                    f[DEFINITION + 2] = share;
                    f[NAMED_CONTAINER] = (starts
                        && question.asks_a_member
                        && layout::container_of(
                            &hit.text,
                            c.start,
                            hit.location.section.as_deref(),
                        )
                        .is_some_and(|container| {
                            layout::term_names(container)
                                .iter()
                                .any(|n| question.names.iter().any(|q| q == n))
                        })) as u8 as f32;
                }
                f[DEFINITION + 3] = (role == LineRole::Heading) as u8 as f32;
            }
            f[MEMBER_TITLE] = (c.in_title && question.asks_a_member) as u8 as f32;
            f[DEFAULT] = (question.asks_a_default
                && !c.in_title
                && follows_default(&hit.text, c.start)) as u8 as f32;
            if f[DEFAULT] == 1.0 {
                // "Default is 2.0" states a value; the copula's weight is for a predicate
                // that describes ("was a celebrated engineer").
                f[AFTER_COPULA] = 0.0;
                f[NAMED_DEFAULT] = f[NAMED_TERM];
            }
            f[FILE_TITLE] = (c.in_title && names_a_file(&hit.title)) as u8 as f32;
            f[KIND_PLURAL] = is_plural_of_a_word_in(c.text(hits), &question.text) as u8 as f32;
            f[TOPIC_KEY] = key_text(c).is_some_and(|k| topic_keys.contains(&k)) as u8 as f32;
            f[IN_SIGNATURE] = (question.asks_a_callable
                && !c.in_title
                && inside_a_signature(&hit.text, c.start, c.end))
                as u8 as f32;
            f[TOPIC_TITLE] = (c.in_title && c.words >= 2 && f[9] > 0.0) as u8 as f32;
            f[HEADING_TITLE] = (c.in_title && heading_titles[c.hit]) as u8 as f32;
            debug_assert_eq!(HEADING_TITLE + 1, n);
            f
        })
        .collect()
}

/// What `line` of `text` is in a definition list, read for `question`, with the share of the
/// question's words in the first words of its definition where it is a term.
fn line_role(
    question: &Question,
    view: &PassageView,
    text: &str,
    line: std::ops::Range<usize>,
) -> (LineRole, f32) {
    let role = match layout::role(text, line.clone()) {
        // An option is no answer to which program does something.
        LineRole::Term { .. }
            if question.asks_a_program && layout::led_by_a_flag(&text[line.clone()]) =>
        {
            LineRole::Plain
        }
        role => role,
    };
    let share = match &role {
        LineRole::Term { definition } => {
            let words: Vec<String> = view
                .words
                .iter()
                .filter(|w| definition.start <= w.start && w.end <= definition.end)
                .take(DEFINITION_WORDS)
                .map(|w| w.stem.clone())
                .collect();
            question.share_in(&words)
        }
        _ => 0.0,
    };
    (role, share)
}

/// Sets the likelihood features of the scored candidates: `scored[i]` is candidate `rows[i]`'s
/// (mean log-probability per token, first token's, end's).
pub fn set_likelihoods(features: &mut [Vec<f32>], rows: &[usize], scored: &[(f32, f32, f32)]) {
    let best = scored.iter().map(|s| s.0).fold(f32::NEG_INFINITY, f32::max);
    let mut order: Vec<usize> = (0..scored.len()).collect();
    order.sort_by(|&a, &b| scored[b].0.total_cmp(&scored[a].0));
    for (rank, &i) in order.iter().enumerate() {
        let f = &mut features[rows[i]];
        let (mean, first, end) = scored[i];
        let floor = |x: f32| if x.is_finite() { x.max(-30.0) } else { -30.0 };
        f[LM_FEATURES.start] = floor(mean);
        f[LM_FEATURES.start + 1] = floor(first);
        f[LM_FEATURES.start + 2] = floor(end);
        f[LM_FEATURES.start + 3] = floor(mean) - floor(best);
        f[LM_FEATURES.start + 4] = 1.0 / (1.0 + rank as f32);
    }
}

/// Sets the relation features of `rows`: `similarity[i]` is row `rows[i]`'s.
pub fn set_relation(features: &mut [Vec<f32>], rows: &[usize], similarity: &[f32]) {
    let best = similarity.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for (&row, &s) in rows.iter().zip(similarity) {
        features[row][RELATION] = s;
        features[row][RELATION + 1] = s - best;
    }
}

#[cfg(test)]
#[path = "features_tests.rs"]
mod tests;
