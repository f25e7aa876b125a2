//! Seeded generator of a small synthetic encyclopedia with questions, for Capstan's demo
//! and tests.
//!
//! [`generate`] invents people, towns, provinces, rivers, organisations and inventions
//! (names built from syllables, unique across the corpus), writes one document per entity
//! (about 80–400 words, a few of about 1,500) with facts that link documents to each other
//! (a person's birthplace is another document's town), and asks questions of single facts
//! whose answers appear verbatim in the document. Some facts are stated in other words
//! than the question uses, so that lexical retrieval has to work for them. The output
//! depends only on the configuration: the same seed gives the same bytes on every run and
//! platform.
//!
//! ```
//! use capstan_corpora::{generate, EncyclopediaConfig};
//!
//! let enc = generate(&EncyclopediaConfig { seed: 7, documents: 200, questions: 20 });
//! assert_eq!(enc.documents.len(), 200);
//! let q = &enc.questions[0];
//! let doc = enc.documents.iter().find(|d| d.id == q.doc_id).unwrap();
//! assert!(doc.text.contains(&q.answers[0]));
//!
//! let dir = std::env::temp_dir().join(format!("capstan-corpora-doctest-{}", std::process::id()));
//! enc.write_beir(&dir).unwrap(); // corpus.jsonl, queries.jsonl, qrels/test.tsv, questions.jsonl
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::path::{Path, PathBuf};

use serde::Serialize;

mod beir;
pub(crate) mod names;
mod render;
mod rng;
mod text;
mod world;

use rng::{Dice, Stream};

/// Errors of this crate (only writing can fail).
#[derive(Debug, thiserror::Error)]
pub enum CorporaError {
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot serialise a line of {path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
}

pub type Result<T> = std::result::Result<T, CorporaError>;

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncyclopediaConfig {
    pub seed: u64,
    /// Number of documents (default 3000).
    pub documents: usize,
    /// Number of questions (default 500); fewer when the documents hold fewer facts.
    pub questions: usize,
}

impl Default for EncyclopediaConfig {
    fn default() -> Self {
        EncyclopediaConfig {
            seed: 42,
            documents: 3000,
            questions: 500,
        }
    }
}

/// What a document is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    Person,
    City,
    Province,
    River,
    Organisation,
    Invention,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Document {
    /// `doc-00001`, ...
    pub id: String,
    /// The entity's name; unique.
    pub title: String,
    pub kind: EntityKind,
    /// Sentences in paragraphs separated by blank lines.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Question {
    /// `q-0001`, ...
    pub id: String,
    pub text: String,
    /// The fact's value first, then shorter accepted forms ("Velna River", "Velna"); all
    /// appear verbatim in the relevant document.
    pub answers: Vec<String>,
    /// The document about the asked entity, which states the fact.
    pub doc_id: String,
    /// Which fact is asked ("birth year", "river", "founder", ...).
    pub relation: String,
    /// True when the document states the fact in other words than the question uses.
    pub paraphrase: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Encyclopedia {
    pub seed: u64,
    pub documents: Vec<Document>,
    pub questions: Vec<Question>,
}

/// Generates the encyclopedia of `cfg`; pure and deterministic. The documents depend only
/// on `seed` and `documents`, so asking for more questions keeps the same corpus.
pub fn generate(cfg: &EncyclopediaConfig) -> Encyclopedia {
    let (world, mut namer) =
        world::World::build(&mut Dice::new(cfg.seed, Stream::World), cfg.documents);
    let mut dice = Dice::new(cfg.seed, Stream::Text);
    let mut documents = Vec::with_capacity(cfg.documents);
    let mut facts = Vec::with_capacity(cfg.documents);
    for (i, &ent) in world.order.iter().enumerate() {
        let r = render::render(&world, ent, &mut dice, &mut namer);
        documents.push(Document {
            id: format!("doc-{:05}", i + 1),
            title: r.title,
            kind: r.kind,
            text: r.text,
        });
        facts.push(r.facts);
    }

    // Questions: documents in random order, one fact each; further rounds take further
    // facts of the same documents if more questions are wanted than there are documents.
    let mut dice = Dice::new(cfg.seed, Stream::Questions);
    let mut doc_order: Vec<usize> = (0..documents.len()).collect();
    dice.shuffle(&mut doc_order);
    let fact_orders: Vec<Vec<usize>> = facts
        .iter()
        .map(|f| {
            let mut o: Vec<usize> = (0..f.len()).collect();
            dice.shuffle(&mut o);
            o
        })
        .collect();
    let mut questions = Vec::with_capacity(cfg.questions);
    let rounds = facts.iter().map(Vec::len).max().unwrap_or(0);
    'rounds: for round in 0..rounds {
        for &d in &doc_order {
            if questions.len() == cfg.questions {
                break 'rounds;
            }
            let Some(&k) = fact_orders[d].get(round) else {
                continue;
            };
            let fact = &facts[d][k];
            questions.push(Question {
                id: format!("q-{:04}", questions.len() + 1),
                text: fact.question.clone(),
                answers: fact.answers.clone(),
                doc_id: documents[d].id.clone(),
                relation: fact.relation.to_string(),
                paraphrase: fact.paraphrase,
            });
        }
    }
    Encyclopedia {
        seed: cfg.seed,
        documents,
        questions,
    }
}

impl Encyclopedia {
    /// Writes a BEIR folder into `dir` (created if missing): `corpus.jsonl`,
    /// `queries.jsonl`, `qrels/test.tsv`, plus `questions.jsonl` (NQ-open style
    /// `{"question","answers"}`) and a `README.md` naming the seed.
    pub fn write_beir(&self, dir: &Path) -> Result<()> {
        beir::write(self, dir)
    }
}
