//! Choosing a short answer as a ranking: every candidate span of the retrieved passages
//! ([`candidates`]) is described by features ([`features`]) and scored by a linear model whose
//! weights were fitted on the dev splits of real text (`bench/fit_answer_ranker.py`) and are
//! kept as data (`engine/data/answer_ranker.json`).
//!
//! Two weight vectors: `lexical` scores every candidate from retrieval, the sentence encoder
//! and the text alone (the extractive reader's answer, and the shortlist); `full` adds the
//! generative reader's likelihood of each shortlisted span as the answer.

pub mod asks;
pub mod candidates;
pub mod features;
pub mod layout;
pub mod relation;
mod shape;
mod span_text;

use std::sync::OnceLock;

use capstan_reader::ScoredSentence;
use capstan_retriever::Hit;
use serde::Deserialize;

pub use candidates::Candidate;
use features::{PassageView, Question};

/// Candidates whose likelihood the generative reader scores (the best by the lexical weights,
/// one per distinct text). On the dev dumps of 2026-11-27 (591 questions, full weights),
/// scoring the best 16 rather than 24 changed the top-1 answer of one prose question; 12 lost
/// five; each candidate is a branch of the candidates' pass (about 5 ms on 2 cores).
pub const SHORTLIST: usize = 16;

/// The weights of the answer ranker.
#[derive(Debug, Clone, Deserialize)]
pub struct Ranker {
    /// Feature names, in order; must equal [`features::names`].
    pub features: Vec<String>,
    /// Weights without the reader's likelihood.
    pub lexical: Vec<f32>,
    /// Weights with it.
    pub full: Vec<f32>,
}

impl Ranker {
    /// Parses a weights file, checking its features against the code's.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let r: Ranker =
            serde_json::from_str(text).map_err(|e| format!("answer ranker weights: {e}"))?;
        let names = features::names();
        if r.features != names {
            return Err(format!(
                "answer ranker weights: features {:?} differ from the code's {:?}",
                r.features, names
            ));
        }
        if r.lexical.len() != names.len() || r.full.len() != names.len() {
            return Err("answer ranker weights: a weight vector of the wrong length".into());
        }
        Ok(r)
    }

    /// The weights kept in the repository.
    pub fn builtin() -> &'static Ranker {
        static RANKER: OnceLock<Ranker> = OnceLock::new();
        RANKER.get_or_init(|| {
            Ranker::from_json(include_str!("../../data/answer_ranker.json"))
                .expect("engine/data/answer_ranker.json is checked by a test")
        })
    }
}

/// The texts to score for candidate answers, and for each candidate the indices of its own
/// texts among them: the span as the passage spells it and, where it starts with a small
/// letter, with a capital. A model starts its reply with a capital ("Glassblower"), so the
/// span as spelled mid-sentence would understate how likely it finds that answer.
pub fn scoring_texts(spans: &[String]) -> (Vec<String>, Vec<Vec<usize>>) {
    let mut texts = Vec::with_capacity(spans.len() * 2);
    let mut of = Vec::with_capacity(spans.len());
    for span in spans {
        let mut own = vec![texts.len()];
        texts.push(span.clone());
        let mut chars = span.chars();
        if let Some(first) = chars.next().filter(|c| c.is_lowercase()) {
            own.push(texts.len());
            texts.push(first.to_uppercase().chain(chars).collect());
        }
        of.push(own);
    }
    (texts, of)
}

/// Per candidate, the `(mean, first, end)` likelihood of its best-scored text (by mean).
pub fn best_of_texts(scores: &[(f32, f32, f32)], of: &[Vec<usize>]) -> Vec<(f32, f32, f32)> {
    of.iter()
        .map(|own| {
            own.iter()
                .map(|&i| scores[i])
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap_or((f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY))
        })
        .collect()
}

fn dot(w: &[f32], f: &[f32]) -> f32 {
    w.iter().zip(f).map(|(a, b)| a * b).sum()
}

/// The candidates of a question with their features and lexical scores.
pub struct Shortlist {
    /// Every candidate.
    pub candidates: Vec<Candidate>,
    /// Their features.
    pub features: Vec<Vec<f32>>,
    /// Their lexical scores.
    pub lexical: Vec<f32>,
    /// Candidate indices, best lexical score first, one per distinct text.
    pub order: Vec<usize>,
    /// Per passage, its words and sentences.
    views: Vec<PassageView>,
}

impl Shortlist {
    /// Candidates of `hits` for `question`, with the sentence ranking of the extractive reader
    /// (`ranked`, best first); `in_context` tells the candidates the generative reader reads;
    /// `key_similarity` is the similarity of a field's key to the question.
    pub fn new(
        question: &str,
        hits: &[Hit],
        ranked: &[ScoredSentence],
        in_context: impl Fn(&Candidate) -> bool,
        key_similarity: &dyn Fn(&str) -> f32,
    ) -> Self {
        let ranker = Ranker::builtin();
        let q = Question::new(question);
        let views = PassageView::all(hits, ranked);
        let candidates = candidates::candidates(hits);
        let features =
            features::features(&q, hits, &views, &candidates, in_context, key_similarity);
        let lexical: Vec<f32> = features.iter().map(|f| dot(&ranker.lexical, f)).collect();
        let mut by_score: Vec<usize> = (0..candidates.len()).collect();
        by_score.sort_by(|&a, &b| lexical[b].total_cmp(&lexical[a]).then(a.cmp(&b)));
        // A span the question itself spells, as whole words, does not answer it ("Dulcorde"
        // for "What did Saquafen Dulcorde do?"). Only verbatim: "-new" for "which flag makes
        // a new session" or "gsettings" for "the GSettings tool" are answers. Chosen on the
        // dev dumps (top-1, records / man pages / prose): leaving out only these 0.780 /
        // 0.533 / 0.317; every span made of question words 0.773 / 0.447 / 0.261; none
        // 0.767 / 0.507 / 0.289.
        // A span that cannot be the kind of answer asked for ([`asks::Asks::rules_out`])
        // is left out too, unless nothing else is left.
        let fits = |i: &usize| !q.asks().rules_out(candidates[*i].text(hits));
        let typed = by_score.iter().any(fits);
        let mut seen = std::collections::HashSet::new();
        let order = by_score
            .into_iter()
            .filter(|&i| !spelled_in(question, candidates[i].text(hits)))
            .filter(|i| !typed || fits(i))
            .filter(|&i| seen.insert(candidates[i].text(hits)))
            .collect();
        Self {
            candidates,
            features,
            lexical,
            order,
            views,
        }
    }

    /// What the sentence encoder embeds for the relation features of `rows`
    /// ([`relation`]): the question without its topic first, then each distinct sentence of
    /// the rows without it; and per row the index of its sentence among those texts.
    pub fn relation_texts(
        &self,
        question: &str,
        hits: &[Hit],
        rows: &[usize],
    ) -> (Vec<String>, Vec<usize>) {
        let titles: Vec<&str> = hits.iter().map(|h| h.title.as_str()).collect();
        let topic = relation::topic_words(question, &titles);
        let mut texts = vec![relation::without_topic(question, &topic)];
        let mut seen: std::collections::HashMap<(usize, usize), usize> = Default::default();
        let of = rows
            .iter()
            .map(|&r| {
                let c = &self.candidates[r];
                let (start, end) = self.views[c.hit]
                    .sentence_of(c)
                    .map_or((0, hits[c.hit].text.len()), |s| (s.0, s.1));
                *seen.entry((c.hit, start)).or_insert_with(|| {
                    texts.push(relation::without_topic(
                        &hits[c.hit].text[start..end],
                        &topic,
                    ));
                    texts.len() - 1
                })
            })
            .collect();
        (texts, of)
    }

    /// Sets the relation features of `rows` from the unit vectors of
    /// [`Shortlist::relation_texts`]'s texts and its `of`.
    pub fn set_relation(&mut self, rows: &[usize], vectors: &[Vec<f32>], of: &[usize]) {
        let similarity: Vec<f32> = of.iter().map(|&i| dot(&vectors[0], &vectors[i])).collect();
        features::set_relation(&mut self.features, rows, &similarity);
    }

    /// The best candidate by the lexical weights.
    pub fn best_lexical(&self) -> Option<usize> {
        self.order.first().copied()
    }

    /// The first `n` candidates of the order.
    pub fn top(&self, n: usize) -> &[usize] {
        &self.order[..n.min(self.order.len())]
    }

    /// Adds the reader's likelihoods of `rows` (each `(mean, first, end)` log-probabilities)
    /// and returns the best of them by the full weights.
    pub fn best_with_likelihoods(
        &mut self,
        rows: &[usize],
        scored: &[(f32, f32, f32)],
    ) -> Option<usize> {
        features::set_likelihoods(&mut self.features, rows, scored);
        let w = &Ranker::builtin().full;
        rows.iter().copied().max_by(|&a, &b| {
            dot(w, &self.features[a])
                .total_cmp(&dot(w, &self.features[b]))
                .then(b.cmp(&a))
        })
    }

    /// One JSON line for fitting the weights (`CAPSTAN_DUMP_CANDIDATES`): the question and
    /// its first `n` candidates by lexical score plus every `scored` one, with their features.
    pub fn dump_line(&self, question: &str, hits: &[Hit], n: usize, scored: &[usize]) -> String {
        let mut rows: Vec<usize> = self.top(n).to_vec();
        for &s in scored {
            if !rows.contains(&s) {
                rows.push(s);
            }
        }
        let candidates: Vec<serde_json::Value> = rows
            .iter()
            .map(|&i| {
                serde_json::json!({
                    "text": self.candidates[i].text(hits),
                    "scored": scored.contains(&i),
                    "f": self.features[i],
                })
            })
            .collect();
        serde_json::json!({"question": question, "candidates": candidates}).to_string()
    }
}

/// Whether `text` occurs in `question` as whole words (not inside a longer word).
fn spelled_in(question: &str, text: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    !text.is_empty()
        && question.match_indices(text).any(|(at, _)| {
            !word(question[..at].chars().next_back())
                && !word(question[at + text.len()..].chars().next())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_letter_span_is_scored_capitalised_too_and_the_better_kept() {
        let spans = ["glassblower".to_string(), "Othtu".into(), "1941".into()];
        let (texts, of) = scoring_texts(&spans);
        assert_eq!(texts, ["glassblower", "Glassblower", "Othtu", "1941"]);
        assert_eq!(of, [vec![0, 1], vec![2], vec![3]]);
        let scores = [
            (-5.0, -9.0, -1.0),
            (-2.0, -3.0, -1.5),
            (-1.0, -1.0, -1.0),
            (-4.0, -4.0, -4.0),
        ];
        assert_eq!(
            best_of_texts(&scores, &of),
            [(-2.0, -3.0, -1.5), (-1.0, -1.0, -1.0), (-4.0, -4.0, -4.0)]
        );
    }

    #[test]
    fn a_span_the_question_spells_is_left_out_and_only_that() {
        let q =
            "What did Saquafen Dulcorde do? Which flag makes a new session? The GSettings tool?";
        assert!(spelled_in(q, "Dulcorde"));
        assert!(spelled_in(q, "Saquafen Dulcorde"));
        assert!(!spelled_in(q, "Dulcor"), "inside a word");
        assert!(!spelled_in(q, "-new"));
        assert!(!spelled_in(q, "gsettings"));
        assert!(!spelled_in(q, ""));
    }

    #[test]
    fn builtin_weights_match_the_features() {
        let r = Ranker::builtin();
        assert_eq!(r.features, features::names());
        assert!(Ranker::from_json(r#"{"features":["bias"],"lexical":[1],"full":[1]}"#).is_err());
    }

    fn hit(id: &str, title: &str, text: &str, score: f32) -> Hit {
        Hit {
            passage_id: format!("{id}#0"),
            doc_id: id.into(),
            title: title.into(),
            text: text.into(),
            score,
            ..Default::default()
        }
    }

    /// The index of the first candidate of `s` spelled `t`, whether or not the order keeps it.
    fn candidate(s: &Shortlist, hits: &[Hit], t: &str) -> usize {
        (0..s.candidates.len())
            .find(|&i| s.candidates[i].text(hits) == t)
            .unwrap_or_else(|| panic!("no candidate {t}"))
    }

    /// The extractive reader's ranking of each passage read as one sentence, all alike.
    fn whole_passages(hits: &[Hit]) -> Vec<ScoredSentence> {
        hits.iter()
            .enumerate()
            .map(|(passage, h)| ScoredSentence {
                passage,
                start: 0,
                end: h.text.len(),
                score: 0.5,
            })
            .collect()
    }

    /// The extractive reader's ranking of a first passage read as one sentence.
    fn one_sentence(text: &str) -> Vec<ScoredSentence> {
        vec![ScoredSentence {
            passage: 0,
            start: 0,
            end: text.len(),
            score: 0.5,
        }]
    }

    /// With the built-in weights, the value of the field the question names wins over the
    /// question's own words and the field's name.
    #[test]
    fn the_named_field_value_wins() {
        let hits = [hit(
            "serde",
            "serde",
            "Name: serde\nVersion: 1.0.210\nLicense: MIT OR Apache-2.0\nRepository: https://github.com/serde-rs/serde\nDescription: A generic serialization framework",
            10.0,
        )];
        let ranked = one_sentence(&hits[0].text);
        let s = Shortlist::new(
            "What license does serde use?",
            &hits,
            &ranked,
            |_| true,
            // What the sentence encoder gives these keys (all-MiniLM-L6-v2 against "What
            // license does serde use?": License 0.588, Version 0.172, Repository 0.220).
            &|key| match key {
                "License" => 0.588,
                "Version" => 0.172,
                "Repository" => 0.220,
                _ => 0.1,
            },
        );
        let best = s.best_lexical().unwrap();
        assert_eq!(s.candidates[best].text(&hits), "MIT OR Apache-2.0");
    }

    /// A bare year is never where someone was born, however near the question's words it
    /// stands; where a passage has nothing but numbers, they stay.
    #[test]
    fn a_numeral_is_left_out_where_the_question_asks_a_place() {
        let text = "Aelri was born in 1740 into a family of millers. Aelri came from Othtu.";
        let hits = [hit("aelri", "Urgaud Aelri", text, 10.0)];
        let ranked = one_sentence(text);
        let texts = |q: &str, hits: &[Hit]| {
            let s = Shortlist::new(q, hits, &ranked, |_| true, &|_| 0.0);
            s.order
                .iter()
                .map(|&i| s.candidates[i].text(hits).to_string())
                .collect::<Vec<_>>()
        };
        let place = texts("Where was Urgaud Aelri born?", &hits);
        assert!(!place.iter().any(|t| t == "1740"), "{place:?}");
        assert!(place.iter().any(|t| t == "Othtu"), "{place:?}");
        let year = texts("In what year was Urgaud Aelri born?", &hits);
        assert!(year.iter().any(|t| t == "1740"), "{year:?}");
        let only_numbers = [hit("n", "1799", "1740", 1.0)];
        let left = texts("Where was Urgaud Aelri born?", &only_numbers);
        assert!(left.iter().any(|t| t == "1740"), "{left:?}");
    }

    /// An option's own help follows it: the question's words after a span tell it from the
    /// option before, whose help the window on both sides holds too.
    #[test]
    fn the_question_words_after_a_span_are_counted_apart() {
        let text = "-c, --class class Specify the name of the scheduling class. \
                    -n, --classdata level Specify the scheduling class data.";
        let hits = [hit("ionice", "ionice", text, 10.0)];
        let ranked = one_sentence(text);
        let s = Shortlist::new(
            "Which ionice flag sets the scheduling class data?",
            &hits,
            &ranked,
            |_| true,
            &|_| 0.0,
        );
        let sides = |t: &str| {
            let i = s
                .order
                .iter()
                .copied()
                .find(|&i| s.candidates[i].text(&hits) == t)
                .unwrap_or_else(|| panic!("no candidate {t}"));
            let f = &s.features[i];
            (f[features::SIDES], f[features::SIDES + 1])
        };
        let (c_before, c_after) = sides("-c");
        let (n_before, n_after) = sides("-n");
        assert!(n_after > c_after, "-n {n_after} against -c {c_after}");
        // Before "-n" stands "-c"'s help, which shares the question's words too.
        assert!(n_before > c_before, "{n_before} {c_before}");
    }

    /// A term of a definition list is read with its definition, however far below it the
    /// question's words stand, and the heading over the list is told apart.
    #[test]
    fn a_term_is_read_with_its_definition() {
        let text = "FUNCTIONS\n    isreadable(object)\n        Determine if saferepr(object) is \
                    readable by eval().\n\n    isrecursive(object)\n        Determine if object \
                    requires a recursive representation.\n";
        let hits = [hit("pydoc:pprint", "pprint", text, 10.0)];
        let ranked = one_sentence(text);
        let s = Shortlist::new(
            "Which function of pprint decides if saferepr is readable by eval?",
            &hits,
            &ranked,
            |_| true,
            &|_| 0.0,
        );
        let d = features::DEFINITION;
        let of = |t: &str| {
            let i = candidate(&s, &hits, t);
            s.features[i][d..d + 4].to_vec()
        };
        let readable = of("isreadable");
        let recursive = of("isrecursive");
        assert_eq!(readable[..2], [1.0, 1.0], "a term, first on its line");
        assert_eq!(recursive[..2], [1.0, 1.0]);
        assert!(readable[2] > recursive[2], "{readable:?} {recursive:?}");
        assert_eq!(of("FUNCTIONS"), [0.0, 0.0, 0.0, 1.0], "a heading");
        assert_eq!(of("object")[1], 0.0, "not first on its line");
        // With the built-in weights, the term the definition describes wins.
        let best = s.best_lexical().unwrap();
        assert_eq!(s.candidates[best].text(&hits), "isreadable");
    }

    /// A manual page whose margins were flattened still lays out its options as terms: the
    /// option whose definition the question paraphrases wins, and a question asking for a
    /// program reads its options as plain words.
    #[test]
    fn an_option_is_read_with_its_definition_in_a_flattened_page() {
        let text = "OPTIONS\n-C, --clear\nClear the entry of one account.\n-u, --user \
                    LOGIN\nPrint the lastlog record of the specified user.\n-t Print the \
                    records more recent than DAYS.\nNOTE\nThe lastlog file is a database.\n";
        let hits = [hit("lastlog.8", "lastlog", text, 10.0)];
        let ranked = one_sentence(text);
        let features_of = |question: &str, t: &str| {
            let s = Shortlist::new(question, &hits, &ranked, |_| true, &|_| 0.0);
            let i = candidate(&s, &hits, t);
            let d = features::DEFINITION;
            let best = s
                .best_lexical()
                .map(|b| s.candidates[b].text(&hits).to_string());
            (s.features[i][d..d + 3].to_vec(), best)
        };
        let asked = "Which option prints the lastlog record of the given user?";
        let (user, best) = features_of(asked, "-u");
        let (clear, _) = features_of(asked, "-C");
        assert_eq!(user[..2], [1.0, 1.0], "a term, first on its line");
        assert!(user[2] > clear[2], "{user:?} {clear:?}");
        assert!(matches!(best.as_deref(), Some("-u" | "--user")), "{best:?}");
        let (inline, _) = features_of(asked, "-t");
        assert_eq!(
            inline[..2],
            [1.0, 1.0],
            "a definition on the option's own line"
        );
        let (program, _) = features_of("Which command prints the lastlog record of a user?", "-u");
        assert_eq!(
            program,
            [0.0, 0.0, 0.0],
            "no term where a program is asked for"
        );
    }

    /// A question naming an option is answered from that option's definition.
    #[test]
    fn a_named_option_is_answered_from_its_definition() {
        let text = "OPTIONS\n-error-threshold=float\nSubdivide fitted curves. Default is \
                    2.0.\n-filter-iterations=integer\nSmooth the curve. Default is 4.\n";
        let hits = [hit("pamtosvg.1", "pamtosvg", text, 10.0)];
        let ranked = one_sentence(text);
        let feature = |question: &str, t: &str, f: usize| {
            let s = Shortlist::new(question, &hits, &ranked, |_| true, &|_| 0.0);
            let i = candidate(&s, &hits, t);
            s.features[i][f]
        };
        let named = |question: &str, t: &str| feature(question, t, features::NAMED_TERM);
        let asked = "What is the default value of the -error-threshold option of pamtosvg?";
        // The option's argument on its term line is a placeholder, not a parameter's value.
        let names = features::names();
        let parameter = names.iter().position(|n| n == "parameter_value").unwrap();
        assert_eq!(feature(asked, "float", parameter), 0.0);
        assert_eq!(feature(asked, "float", parameter + 1), 0.0);
        // "Default is 2.0" states the default: no copula's predicate.
        let copula = names.iter().position(|n| n == "after_copula").unwrap();
        assert_eq!(feature(asked, "2.0", copula), 0.0);
        assert_eq!(feature("What is the smoothing?", "2.0", copula), 1.0);
        assert_eq!(named(asked, "2.0"), 1.0);
        assert_eq!(named(asked, "4"), 0.0, "another option's definition");
        let named_default = |question: &str, t: &str| feature(question, t, features::NAMED_DEFAULT);
        assert_eq!(named_default(asked, "2.0"), 1.0);
        assert_eq!(named_default(asked, "4"), 0.0, "another option's default");
        assert_eq!(named_default(asked, "Subdivide"), 0.0, "no default");
        assert_eq!(
            named_default("Which option subdivides fitted curves?", "2.0"),
            0.0,
            "no default asked for"
        );
        assert_eq!(named(asked, "float"), 0.0, "the term's own line");
        assert_eq!(named("What is the default of the smoothing?", "2.0"), 0.0);
        assert_eq!(named("What does -filter-iterations default to?", "4"), 1.0);
    }

    /// A question naming a record by one of its fields asks about that record: the same
    /// field of another retrieved record is marked.
    #[test]
    fn the_key_a_question_names_its_record_by_is_marked() {
        let asked = "Which category of the archive lists the package dynamite?";
        let hits = [
            hit(
                "deb:dynamite",
                "dynamite",
                "Package: dynamite\nSection: utils\n",
                10.0,
            ),
            hit(
                "deb:dynamite-data",
                "dynamite-data",
                "Package: dynamite-data\nSection: games\n",
                9.0,
            ),
        ];
        let ranked = whole_passages(&hits);
        let s = Shortlist::new(asked, &hits, &ranked, |_| true, &|_| 0.0);
        let marked = |t: &str| s.features[candidate(&s, &hits, t)][features::TOPIC_KEY];
        assert_eq!(marked("dynamite-data"), 1.0);
        assert_eq!(marked("utils"), 0.0);
        assert_eq!(marked("games"), 0.0);
        let s = Shortlist::new("Which section is games?", &hits, &ranked, |_| true, &|_| {
            0.0
        });
        let marked = |t: &str| s.features[candidate(&s, &hits, t)][features::TOPIC_KEY];
        assert_eq!(marked("utils"), 1.0, "the question spells a section");
        assert_eq!(marked("dynamite"), 0.0);
    }

    /// A method is marked where its class is the one the question names, whether the class
    /// line is in the passage or the passage begins inside the class's body (its section).
    #[test]
    fn a_member_of_the_class_the_question_names_is_marked() {
        let asked = "Which Blob method defines the access position?";
        let whole = "    class Blob(builtins.object)\n     |  seek(self, offset)\n     |      Set \
                     the access position.\n\n    class Cursor(builtins.object)\n     |  \
                     setinputsizes(self, sizes)\n     |      Defines the sizes.\n";
        let inside = "the blob.\n     |\n     |  tell(self, /)\n     |      Return the access \
                      position.\n";
        let mut cut = hit("pydoc:sqlite3", "sqlite3", inside, 9.0);
        cut.location.section = Some("class Blob(builtins.object)".into());
        let hits = [hit("pydoc:sqlite3", "sqlite3", whole, 10.0), cut];
        let ranked = whole_passages(&hits);
        let marked = |question: &str, t: &str| {
            let s = Shortlist::new(question, &hits, &ranked, |_| true, &|_| 0.0);
            s.features[candidate(&s, &hits, t)][features::NAMED_CONTAINER]
        };
        assert_eq!(marked(asked, "seek"), 1.0);
        assert_eq!(marked(asked, "tell"), 1.0, "the section names the class");
        assert_eq!(
            marked(asked, "setinputsizes"),
            0.0,
            "another class's method"
        );
        let unnamed = "Which method defines the access position?";
        assert_eq!(marked(unnamed, "seek"), 0.0, "no class is named");
        let module = "Which module is an implementation of Blob?";
        assert_eq!(
            marked(module, "seek"),
            0.0,
            "a module is asked for, not a member"
        );
    }

    /// What a signature's brackets hold is marked where a method or a function is asked for.
    #[test]
    fn a_signature_s_parameters_are_marked_where_a_callable_is_asked() {
        let text = "    getProperty(self, name)\n        Looks up and returns the value of a SAX2 \
                    property.\n\n    get_python_inc(plat_specific=0, prefix=None)\n        \
                    Return the directory of header files.\n";
        let hits = [hit("xml.sax.saxutils", "xml.sax.saxutils", text, 10.0)];
        let ranked = one_sentence(text);
        let marked = |question: &str, t: &str| {
            let s = Shortlist::new(question, &hits, &ranked, |_| true, &|_| 0.0);
            s.features[candidate(&s, &hits, t)][features::IN_SIGNATURE]
        };
        let method = "Which method looks up the value of a SAX2 property?";
        assert_eq!(marked(method, "name"), 1.0);
        assert_eq!(marked(method, "prefix=None"), 1.0);
        assert_eq!(marked(method, "getProperty"), 0.0);
        assert_eq!(marked(method, "Looks"), 0.0);
        let default = "What is the default of the prefix parameter of get_python_inc?";
        assert_eq!(marked(default, "prefix=None"), 0.0);
    }

    /// A parameter's default is read from the signature of the function the question names,
    /// where a page gives the same parameter to several functions.
    #[test]
    fn a_default_is_read_from_the_named_function_signature() {
        let text = "FUNCTIONS\n    findTestCases(module, prefix='check', sortUsing=cmp)\n\n    \
                    makeSuite(testCaseClass, prefix='test', sortUsing=cmp)\n";
        let hits = [hit("unittest.loader", "unittest.loader", text, 10.0)];
        let ranked = one_sentence(text);
        let asked = "What is the default value of the prefix parameter of makeSuite?";
        let s = Shortlist::new(asked, &hits, &ranked, |_| true, &|_| 0.0);
        let named = |t: &str| s.features[candidate(&s, &hits, t)][features::NAMED_FUNCTION];
        assert_eq!(named("test"), 1.0);
        assert_eq!(named("check"), 0.0, "another function's default");
        assert_eq!(named("cmp"), 0.0, "another parameter of the named function");
        let at = |t: &str| {
            s.order
                .iter()
                .position(|&i| s.candidates[i].text(&hits) == t)
        };
        assert!(
            at("test") < at("check"),
            "{:?} {:?}",
            at("test"),
            at("check")
        );
        // A question asking for a function by what it does names no parameter by a shared word.
        let member = "Which function makes a suite of tests with a prefix?";
        let s = Shortlist::new(member, &hits, &ranked, |_| true, &|_| 0.0);
        let i = candidate(&s, &hits, "test");
        let parameter = features::names()
            .iter()
            .position(|n| n == "parameter_named_in_question")
            .unwrap();
        assert_eq!(s.features[i][parameter], 0.0);
    }

    /// Another document's title is flagged as the answer only where the question names a
    /// retrieved title itself.
    #[test]
    fn a_title_is_flagged_where_the_question_names_a_title() {
        let hits = [
            hit(
                "send",
                "git-send-pack",
                "Usage: git-send-pack --verbose",
                10.0,
            ),
            hit("receive", "git-receive-pack", "Receive what is pushed", 9.0),
        ];
        let ranked = one_sentence(&hits[0].text);
        let flag = |question: &str| {
            let s = Shortlist::new(question, &hits, &ranked, |_| true, &|_| 0.0);
            let i = s
                .order
                .iter()
                .copied()
                .find(|&i| s.candidates[i].in_title && s.candidates[i].hit == 1)
                .expect("the second title is a candidate");
            s.features[i][features::NAMED_TITLE]
        };
        assert_eq!(flag("What flag makes git-send-pack run verbosely?"), 1.0);
        assert_eq!(flag("Which command receives what is pushed?"), 0.0);
    }

    /// A heading of several words that repeats the question is marked as the topic it names;
    /// a one-word name, or a heading the question does not repeat, is not.
    #[test]
    fn a_title_phrase_the_question_repeats_is_marked_as_its_topic() {
        let hits = [
            hit(
                "butterweck",
                "July 2002: Martin Butterweck died",
                "Martin Butterweck died after a long fight against leukemia.",
                10.0,
            ),
            hit(
                "sigscheme",
                "sigscheme",
                "Scheme interpreter to be embedded",
                9.0,
            ),
            hit("pools", "Package Pools", "The archive moved to pools.", 8.0),
        ];
        let ranked = whole_passages(&hits);
        let marked = |question: &str, hit: usize| {
            let s = Shortlist::new(question, &hits, &ranked, |_| true, &|_| 0.0);
            let i = (0..s.candidates.len())
                .find(|&i| s.candidates[i].in_title && s.candidates[i].hit == hit)
                .expect("the title is a candidate");
            s.features[i][features::TOPIC_TITLE]
        };
        assert_eq!(marked("What illness did Martin Butterweck fight?", 0), 1.0);
        assert_eq!(
            marked("Which package provides a Scheme interpreter?", 1),
            0.0,
            "one word"
        );
        assert_eq!(
            marked("What illness did Martin Butterweck fight?", 2),
            0.0,
            "the question repeats none of its words"
        );
    }

    /// Each shortlisted candidate is compared through its own sentence with the topic taken
    /// out, and the similarity (and its gap to the best) lands in its features.
    #[test]
    fn relation_features_compare_each_candidate_sentence_without_the_topic() {
        let text = "In a difficult period, Urgaud Aelri took lodgings in Brinriqua. Aelri came from Othtu.";
        let hits = [hit("aelri", "Urgaud Aelri", text, 10.0)];
        let split = text.find(" Aelri came").unwrap();
        let ranked = vec![
            ScoredSentence {
                passage: 0,
                start: 0,
                end: split,
                score: 0.6,
            },
            ScoredSentence {
                passage: 0,
                start: split + 1,
                end: text.len(),
                score: 0.5,
            },
        ];
        let mut s = Shortlist::new(
            "Where was Urgaud Aelri born?",
            &hits,
            &ranked,
            |_| true,
            &|_| 0.0,
        );
        let at = |s: &Shortlist, t: &str| {
            s.order
                .iter()
                .copied()
                .find(|&i| s.candidates[i].text(&hits) == t)
                .unwrap()
        };
        let rows = vec![at(&s, "Brinriqua"), at(&s, "Othtu"), at(&s, "lodgings")];
        let (texts, of) = s.relation_texts("Where was Urgaud Aelri born?", &hits, &rows);
        assert_eq!(
            texts,
            [
                "Where was born?",
                "In a difficult period, took lodgings in Brinriqua.",
                "came from Othtu."
            ]
        );
        assert_eq!(of, [1, 2, 1]);
        // Unit vectors standing in for the encoder's: the second sentence is the closer.
        let vectors = vec![vec![1.0, 0.0], vec![0.2, 0.98], vec![0.6, 0.8]];
        s.set_relation(&rows, &vectors, &of);
        let r = features::RELATION;
        let f = |t: &str| {
            let row = &s.features[at(&s, t)];
            (row[r], row[r + 1])
        };
        assert_eq!(f("Othtu"), (0.6, 0.0));
        assert!((f("Brinriqua").0 - 0.2).abs() < 1e-6 && (f("Brinriqua").1 + 0.4).abs() < 1e-6);
        // A candidate not shortlisted keeps zeros.
        let other = at(&s, "difficult period");
        assert_eq!(s.features[other][r], 0.0);
    }
}
