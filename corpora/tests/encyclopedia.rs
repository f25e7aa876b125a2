//! Properties of the generated encyclopedia and of the BEIR folder it writes.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use capstan_corpora::{generate, Encyclopedia, EncyclopediaConfig, EntityKind};
use serde_json::Value;

/// A fresh folder under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("capstan-corpora-test-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn default_encyclopedia() -> &'static Encyclopedia {
    static ENC: OnceLock<Encyclopedia> = OnceLock::new();
    ENC.get_or_init(|| generate(&EncyclopediaConfig::default()))
}

fn small(seed: u64) -> Encyclopedia {
    generate(&EncyclopediaConfig {
        seed,
        documents: 400,
        questions: 120,
    })
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    [
        "corpus.jsonl",
        "queries.jsonl",
        "qrels/test.tsv",
        "questions.jsonl",
        "README.md",
    ]
    .iter()
    .map(|f| {
        (
            f.to_string(),
            fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}")),
        )
    })
    .collect()
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// FNV-1a, to pin the exact output.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn defaults() {
    let cfg = EncyclopediaConfig::default();
    assert_eq!((cfg.documents, cfg.questions), (3000, 500));
    let enc = default_encyclopedia();
    assert_eq!(enc.documents.len(), 3000);
    assert_eq!(enc.questions.len(), 500);
    assert_eq!(enc.seed, cfg.seed);
}

#[test]
fn same_seed_same_bytes_different_seed_different_bytes() {
    let tmp = TempDir::new();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    small(11).write_beir(&a).unwrap();
    small(11).write_beir(&b).unwrap();
    small(12).write_beir(&c).unwrap();
    assert_eq!(files(&a), files(&b));
    for ((name, x), (_, z)) in files(&a).iter().zip(files(&c).iter()) {
        assert_ne!(x, z, "{name} is the same for seeds 11 and 12");
    }
    assert_eq!(small(11), small(11));
}

/// The exact output is pinned: a change of the generator, or of rand's `StdRng`, shows up
/// here. Update the constant only when changing the generator on purpose.
#[test]
fn output_is_pinned() {
    let enc = generate(&EncyclopediaConfig {
        seed: 42,
        documents: 300,
        questions: 50,
    });
    let tmp = TempDir::new();
    enc.write_beir(tmp.path()).unwrap();
    let all: Vec<u8> = files(tmp.path()).into_iter().flat_map(|(_, b)| b).collect();
    assert_eq!(
        fnv(&all),
        5_263_232_537_543_916_970,
        "fingerprint of seed 42 / 300 documents changed"
    );
}

#[test]
fn more_questions_keep_the_documents_and_extend_the_questions() {
    let few = generate(&EncyclopediaConfig {
        seed: 5,
        documents: 300,
        questions: 40,
    });
    let many = generate(&EncyclopediaConfig {
        seed: 5,
        documents: 300,
        questions: 400,
    });
    assert_eq!(few.documents, many.documents);
    assert_eq!(few.questions[..], many.questions[..40]);
}

#[test]
fn ids_are_sequential_and_titles_unique() {
    let enc = default_encyclopedia();
    for (i, d) in enc.documents.iter().enumerate() {
        assert_eq!(d.id, format!("doc-{:05}", i + 1));
    }
    for (i, q) in enc.questions.iter().enumerate() {
        assert_eq!(q.id, format!("q-{:04}", i + 1));
    }
    let titles: HashSet<&str> = enc.documents.iter().map(|d| d.title.as_str()).collect();
    assert_eq!(titles.len(), enc.documents.len(), "duplicate titles");
    let texts: HashSet<&str> = enc.questions.iter().map(|q| q.text.as_str()).collect();
    assert_eq!(texts.len(), enc.questions.len(), "duplicate questions");
}

#[test]
fn every_answer_is_in_its_document_which_is_about_the_asked_entity() {
    let enc = default_encyclopedia();
    let docs: HashMap<&str, _> = enc.documents.iter().map(|d| (d.id.as_str(), d)).collect();
    for q in &enc.questions {
        let d = docs[q.doc_id.as_str()];
        assert!(!q.answers.is_empty());
        for a in &q.answers {
            assert!(!a.is_empty());
            assert!(
                d.text.contains(a.as_str()),
                "{}: answer {a:?} not in {}",
                q.id,
                d.id
            );
        }
        assert!(
            q.text.contains(&d.title),
            "{}: {:?} does not name {:?}",
            q.id,
            q.text,
            d.title
        );
        assert!(q.text.ends_with('?'));
        let first = q.text.chars().next().unwrap();
        assert!(first.is_uppercase(), "{:?}", q.text);
    }
}

#[test]
fn questions_are_varied_and_some_are_paraphrased() {
    let enc = default_encyclopedia();
    let relations: HashSet<&str> = enc.questions.iter().map(|q| q.relation.as_str()).collect();
    assert!(relations.len() >= 15, "only {relations:?}");
    let paraphrased = enc.questions.iter().filter(|q| q.paraphrase).count();
    assert!(
        (100..=300).contains(&paraphrased),
        "{paraphrased} of 500 paraphrased"
    );
    // One question per document while there are documents enough.
    let docs: HashSet<&str> = enc.questions.iter().map(|q| q.doc_id.as_str()).collect();
    assert_eq!(docs.len(), enc.questions.len());
    let kinds: HashSet<EntityKind> = enc.documents.iter().map(|d| d.kind).collect();
    assert_eq!(kinds.len(), 6);
}

#[test]
fn linked_facts_name_other_documents() {
    let enc = generate(&EncyclopediaConfig {
        seed: 3,
        documents: 3000,
        questions: 3000,
    });
    let titles: HashSet<&str> = enc.documents.iter().map(|d| d.title.as_str()).collect();
    let linking = [
        "birthplace",
        "employer",
        "river",
        "province",
        "capital",
        "founder",
        "headquarters",
        "inventor",
        "first demonstration",
    ];
    let mut seen = HashSet::new();
    for q in &enc.questions {
        if linking.contains(&q.relation.as_str()) {
            seen.insert(q.relation.as_str());
            assert!(
                titles.contains(q.answers[0].as_str()),
                "{}: {:?} is no document",
                q.id,
                q.answers[0]
            );
        }
    }
    assert_eq!(seen.len(), linking.len());
}

#[test]
fn word_counts_are_in_range_and_some_documents_are_long() {
    let enc = default_encyclopedia();
    let mut long = 0;
    for d in &enc.documents {
        let n = words(&d.text);
        assert!((80..=1800).contains(&n), "{}: {n} words", d.id);
        if n > 400 {
            assert!(n >= 1000, "{}: {n} words: neither short nor long", d.id);
            long += 1;
        }
        assert!(
            !d.text.contains('{') && !d.text.contains('}'),
            "{}: unfilled slot",
            d.id
        );
        assert!(!d.text.contains("  "), "{}: double space", d.id);
    }
    assert!((20..=120).contains(&long), "{long} long documents");
}

#[test]
fn small_and_empty_configurations_work() {
    for documents in [0, 1, 2, 5, 10, 33] {
        let enc = generate(&EncyclopediaConfig {
            seed: 1,
            documents,
            questions: 1000,
        });
        assert_eq!(enc.documents.len(), documents);
        assert!(enc.questions.len() >= documents && enc.questions.len() <= 1000);
        let pairs: HashSet<(&str, &str)> = enc
            .questions
            .iter()
            .map(|q| (q.doc_id.as_str(), q.relation.as_str()))
            .collect();
        assert_eq!(pairs.len(), enc.questions.len(), "a fact asked twice");
        for q in &enc.questions {
            let d = enc.documents.iter().find(|d| d.id == q.doc_id).unwrap();
            assert!(d.text.contains(&q.answers[0]));
        }
    }
}

#[test]
fn written_files_parse_and_agree() {
    let enc = small(9);
    let tmp = TempDir::new();
    let dir = tmp.path().join("nested/out");
    enc.write_beir(&dir).unwrap();

    let lines = |f: &str| -> Vec<Value> {
        fs::read_to_string(dir.join(f))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{f}: {e}: {l}")))
            .collect()
    };
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };

    let corpus = lines("corpus.jsonl");
    assert_eq!(corpus.len(), enc.documents.len());
    let mut doc_ids = HashSet::new();
    for (v, d) in corpus.iter().zip(&enc.documents) {
        assert_eq!(keys(v), ["_id", "text", "title"]);
        assert_eq!(
            (v["_id"].as_str(), v["title"].as_str(), v["text"].as_str()),
            (Some(&*d.id), Some(&*d.title), Some(&*d.text))
        );
        doc_ids.insert(d.id.clone());
    }

    let queries = lines("queries.jsonl");
    let questions = lines("questions.jsonl");
    assert_eq!(queries.len(), enc.questions.len());
    assert_eq!(questions.len(), enc.questions.len());
    let mut query_ids = HashSet::new();
    for ((qv, nv), q) in queries.iter().zip(&questions).zip(&enc.questions) {
        assert_eq!(keys(qv), ["_id", "text"]);
        assert_eq!(keys(nv), ["answers", "question"]);
        assert_eq!(qv["_id"], q.id.as_str());
        assert_eq!(qv["text"], q.text.as_str());
        assert_eq!(nv["question"], q.text.as_str());
        assert_eq!(nv["answers"], serde_json::json!(q.answers));
        query_ids.insert(q.id.clone());
    }

    let qrels = fs::read_to_string(dir.join("qrels/test.tsv")).unwrap();
    let mut rows = qrels.lines();
    assert_eq!(rows.next(), Some("query-id\tcorpus-id\tscore"));
    let mut n = 0;
    for (row, q) in rows.zip(&enc.questions) {
        let cols: Vec<&str> = row.split('\t').collect();
        assert_eq!(cols, [q.id.as_str(), q.doc_id.as_str(), "1"]);
        assert!(
            query_ids.contains(cols[0]) && doc_ids.contains(cols[1]),
            "{row}"
        );
        n += 1;
    }
    assert_eq!(n, enc.questions.len());

    let readme = fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("seed 9"), "{readme}");
}

#[test]
fn generating_the_default_corpus_is_fast() {
    let start = std::time::Instant::now();
    let enc = generate(&EncyclopediaConfig {
        seed: 77,
        ..Default::default()
    });
    let took = start.elapsed();
    assert_eq!(enc.documents.len(), 3000);
    // Well under a second in release builds; the bound leaves room for a loaded machine.
    assert!(took.as_secs_f64() < 5.0, "took {took:?}");
}
