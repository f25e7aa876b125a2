//! The Qdrant store against a real 3-node cluster on loopback (no mock):
//! equality with the embedded store, idempotent and partitioned writes,
//! deletes, a node killed during queries, and refusals.

mod harness;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_indexer::{read_corpus, Corpus, DenseStrategy, Encoder, IndexSettings, NoProgress};
use capstan_qdrant::{
    delete_documents, write_corpus, Cluster, CollectionOptions, Error, Part, QdrantLocation,
    QdrantStore, WriteSettings,
};
use capstan_retriever::{
    EmbeddedStore, Filter, Fusion, Hit, Mode, Retriever, SearchOptions, Store, Unit,
};
use harness::TestCluster;

fn encoder_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_ENCODER") {
        return dir.into();
    }
    let home = std::env::var_os("CAPSTAN_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/capstan"));
    home.join("models/all-MiniLM-L6-v2")
}

fn encoder() -> Arc<Encoder> {
    Arc::new(Encoder::load(&encoder_dir()).expect("the default encoder (scripts/setup.sh)"))
}

/// A generated encyclopedia of `documents` as a JSONL corpus whose lines
/// carry metadata (`kind`, and `shelf` = i mod 3), and its questions.
fn corpus(dir: &Path, documents: usize) -> (Corpus, Vec<String>) {
    let enc = capstan_corpora::generate(&capstan_corpora::EncyclopediaConfig {
        documents,
        questions: 40,
        seed: 7,
    });
    let path = dir.join("corpus.jsonl");
    let lines: Vec<String> = enc
        .documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            serde_json::json!({
                "_id": d.id, "title": d.title, "text": d.text,
                "metadata": {"kind": format!("{:?}", d.kind).to_lowercase(), "shelf": i % 3},
            })
            .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let questions = enc.questions.into_iter().map(|q| q.text).collect();
    (read_corpus(&path, false).unwrap(), questions)
}

fn cluster_of(location: &str) -> Arc<Cluster> {
    Arc::new(Cluster::new(QdrantLocation::parse(location).unwrap()).unwrap())
}

fn settings(collection: CollectionOptions) -> WriteSettings {
    WriteSettings {
        collection,
        batch_passages: 64,
        ..Default::default()
    }
}

fn options(mode: Mode) -> SearchOptions {
    SearchOptions {
        mode,
        k: 10,
        dense: DenseStrategy::Exact,
        ..Default::default()
    }
}

/// The same ranking up to ties: scores agree within `tol` (relative) at
/// every rank; where the passages differ, the two tie (equal scores may come
/// in another order, and which of the passages tied with the last one make
/// the cut is each engine's choice).
fn assert_same_ranking(what: &str, expected: &[Hit], got: &[Hit], tol: f32) {
    assert_eq!(expected.len(), got.len(), "{what}: lengths");
    let close = |a: f32, b: f32| (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-6);
    let last = expected.last().map_or(0.0, |h| h.score);
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        assert!(
            close(e.score, g.score),
            "{what}: rank {i}: {} vs {}",
            e.score,
            g.score
        );
        let same = expected
            .iter()
            .find(|o| o.passage_id == g.passage_id && close(o.score, e.score));
        let Some(same) = same else {
            assert!(
                close(g.score, last),
                "{what}: rank {i}: {} vs {}",
                e.passage_id,
                g.passage_id
            );
            continue;
        };
        assert_eq!(
            (&same.title, &same.text, &same.doc_id),
            (&g.title, &g.text, &g.doc_id),
            "{what}: rank {i}: the passage itself"
        );
    }
}

#[test]
fn one_shard_ranks_as_the_embedded_store_in_every_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, questions) = corpus(tmp.path(), 120);
    let encoder = encoder();
    let dir = tmp.path().join("index");
    let embedded_settings = IndexSettings {
        sentence_vectors: false,
        ..Default::default()
    };
    capstan_indexer::build(&dir, &corpus, &encoder, embedded_settings, &NoProgress).unwrap();
    let embedded = Retriever::new(
        Arc::new(EmbeddedStore::open(&dir).unwrap()),
        encoder.clone(),
    )
    .unwrap();

    let cluster = TestCluster::start(3);
    let location = cluster.location("same", &[0, 1, 2], "");
    let one_shard = CollectionOptions {
        shards: Some(1),
        replication_factor: Some(2),
        ..Default::default()
    };
    let summary = write_corpus(
        &cluster_of(&location),
        &corpus,
        &encoder,
        &settings(one_shard),
        &NoProgress,
    )
    .unwrap();
    assert!(summary.created);
    assert_eq!(summary.written_documents, 120);
    let store = Arc::new(QdrantStore::open(QdrantLocation::parse(&location).unwrap()).unwrap());
    let counts = embedded.store().counts().unwrap();
    assert_eq!(store.counts().unwrap(), counts);
    assert_eq!(summary.written_passages, counts.passages);
    let qdrant = Retriever::new(store, encoder.clone()).unwrap();

    let weighted = SearchOptions {
        fusion: Fusion::Weighted { bm25_weight: 0.3 },
        ..options(Mode::Hybrid)
    };
    let documents = SearchOptions {
        unit: Unit::Documents,
        ..options(Mode::Hybrid)
    };
    for q in &questions {
        for (name, opts) in [
            ("bm25", options(Mode::Bm25)),
            ("dense", options(Mode::Dense)),
            ("hybrid", options(Mode::Hybrid)),
            ("weighted", weighted),
            ("documents", documents),
        ] {
            let e = embedded.search(q, &opts).unwrap();
            let g = qdrant.search(q, &opts).unwrap();
            assert_same_ranking(&format!("{name} `{q}`"), &e, &g, 1e-4);
        }
    }
    // Metadata filters go to Qdrant's filters and mean the same in both stores.
    let filter = Filter {
        equals: [("shelf".to_string(), serde_json::json!(1))].into(),
    };
    for q in questions.iter().take(10) {
        let e = embedded
            .search_with(q, None, &options(Mode::Hybrid), Some(&filter))
            .unwrap();
        let g = qdrant
            .search_with(q, None, &options(Mode::Hybrid), Some(&filter))
            .unwrap();
        assert_eq!(e.len(), 10);
        assert_same_ranking(&format!("filtered `{q}`"), &e, &g, 1e-4);
        for hit in &g {
            let n: usize = hit.doc_id["doc-".len()..].parse().unwrap();
            assert_eq!((n - 1) % 3, 1, "{} is on shelf 1", hit.doc_id);
        }
    }
}

#[test]
fn parts_fill_one_collection_and_rewrites_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, questions) = corpus(tmp.path(), 90);
    let encoder = encoder();
    let cluster = TestCluster::start(3);
    let location = cluster.location("parts", &[0, 1, 2], "");
    let layout = CollectionOptions {
        shards: Some(3),
        replication_factor: Some(2),
        ..Default::default()
    };
    let expected_passages: u64 = {
        let chunker = capstan_indexer::Chunker::for_encoder(&encoder, Default::default()).unwrap();
        corpus
            .documents
            .iter()
            .map(|d| chunker.chunk(d).len() as u64)
            .sum()
    };
    let mut documents = 0;
    for i in 1..=2 {
        let s = WriteSettings {
            part: Part { index: i, count: 2 },
            ..settings(layout)
        };
        let summary =
            write_corpus(&cluster_of(&location), &corpus, &encoder, &s, &NoProgress).unwrap();
        assert_eq!(summary.created, i == 1);
        assert_eq!(summary.written_documents, summary.documents);
        documents += summary.documents;
    }
    assert_eq!(documents, 90);
    let open = || QdrantStore::open(QdrantLocation::parse(&location).unwrap()).unwrap();
    let counts = open().exact_counts().unwrap();
    assert_eq!((counts.documents, counts.passages), (90, expected_passages));

    // Running a part again (an interrupted run resumed) writes nothing new.
    let again = WriteSettings {
        part: Part { index: 1, count: 2 },
        ..settings(layout)
    };
    let summary = write_corpus(
        &cluster_of(&location),
        &corpus,
        &encoder,
        &again,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(summary.written_documents, 0);
    assert_eq!(summary.skipped_documents, summary.documents);
    assert_eq!(open().exact_counts().unwrap(), counts);

    // Appending a shorter version of a document and a new one: the old
    // version's extra passages go, the new document is searchable.
    let mut changed = Corpus::default();
    let mut short = corpus.documents[0].clone();
    let old_passages = capstan_indexer::Chunker::for_encoder(&encoder, Default::default())
        .unwrap()
        .chunk(&short)
        .len() as u64;
    assert!(old_passages > 1, "the first document spans passages");
    short.text = short.text.split("\n\n").next().unwrap().to_string();
    let mut fresh = corpus.documents[1].clone();
    fresh.id = "doc-new".into();
    fresh.title = "Zyxwvut Quellomare".into();
    fresh.text = "Zyxwvut Quellomare is a lighthouse keeper on the island of Brenn.".into();
    changed.documents = vec![short.clone(), fresh];
    let append = WriteSettings {
        append: true,
        ..settings(CollectionOptions::default())
    };
    let summary = write_corpus(
        &cluster_of(&location),
        &changed,
        &encoder,
        &append,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(summary.written_documents, 2);
    let after = open().exact_counts().unwrap();
    assert_eq!(after.documents, 91);
    assert_eq!(after.passages, expected_passages - old_passages + 1 + 1);
    let retriever = Retriever::new(Arc::new(open()), encoder.clone()).unwrap();
    let hits = retriever
        .search("who keeps the lighthouse of Brenn?", &options(Mode::Hybrid))
        .unwrap();
    assert_eq!(hits[0].doc_id, "doc-new");
    assert_eq!(hits[0].passage_id, "doc-new#0");

    // Deleting documents removes every passage of theirs.
    let deleted = delete_documents(
        &cluster_of(&location),
        &[short.id.clone(), "doc-new".into(), "no-such-doc".into()],
    )
    .unwrap();
    assert_eq!(
        (deleted.deleted_documents, deleted.deleted_passages),
        (2, 2)
    );
    let left = open().exact_counts().unwrap();
    assert_eq!(left.documents, 89);
    assert_eq!(left.passages, expected_passages - old_passages);
    for q in questions.iter().take(5) {
        let hits = retriever.search(q, &options(Mode::Hybrid)).unwrap();
        assert!(hits
            .iter()
            .all(|h| h.doc_id != short.id && h.doc_id != "doc-new"));
    }
}

#[test]
fn a_node_killed_during_a_stream_of_queries_fails_none_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, questions) = corpus(tmp.path(), 90);
    let encoder = encoder();
    let mut cluster = TestCluster::start(3);
    let location = cluster.location("ha", &[0, 1, 2], "?retry=10");
    let layout = CollectionOptions {
        shards: Some(3),
        replication_factor: Some(2),
        ..Default::default()
    };
    write_corpus(
        &cluster_of(&location),
        &corpus,
        &encoder,
        &settings(layout),
        &NoProgress,
    )
    .unwrap();
    let store = QdrantStore::open(QdrantLocation::parse(&location).unwrap()).unwrap();
    let retriever = Retriever::new(Arc::new(store), encoder).unwrap();
    let opts = options(Mode::Hybrid);
    let before: Vec<Vec<String>> = questions
        .iter()
        .map(|q| {
            let hits = retriever.search(q, &opts).unwrap();
            hits.into_iter().map(|h| h.passage_id).collect()
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for round in 0..3 {
        for (i, q) in questions.iter().enumerate() {
            if round == 0 && i == questions.len() / 2 {
                // Node 0 is the one the client talks to: it fails over.
                cluster.kill(0);
            }
            if round == 2 && i == 0 {
                cluster.restart(0);
            }
            let start = Instant::now();
            let hits = retriever
                .search(q, &opts)
                .unwrap_or_else(|e| panic!("round {round}, query {i}: {e}"));
            slowest = slowest.max(start.elapsed());
            let ids: Vec<String> = hits.into_iter().map(|h| h.passage_id).collect();
            assert_eq!(ids, before[i], "round {round}, query {i}");
        }
    }
    eprintln!("slowest query: {slowest:?}");
    // The retry window bounds how long a query waits for the cluster to notice.
    assert!(slowest < Duration::from_secs(10), "{slowest:?}");
}

#[test]
fn foreign_and_mismatched_collections_and_absent_clusters_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, _) = corpus(tmp.path(), 12);
    let encoder = encoder();
    let cluster = TestCluster::start(3);
    let location = cluster.location("mine", &[1], "");
    write_corpus(
        &cluster_of(&location),
        &corpus,
        &encoder,
        &settings(Default::default()),
        &NoProgress,
    )
    .unwrap();
    let store = QdrantStore::open(QdrantLocation::parse(&location).unwrap()).unwrap();
    // Another encoder: refused, naming both.
    let mut other = encoder.info().clone();
    other.config_sha256 = "0".repeat(64);
    other.path = "/models/other-encoder".into();
    let err = store.check_encoder(&other).unwrap_err().to_string();
    assert!(
        err.contains("encoder") && err.contains("other-encoder"),
        "{err}"
    );
    assert!(err.contains(&location), "{err}");
    // Another chunking without --append: refused, naming it.
    let rechunk = WriteSettings {
        chunk: capstan_indexer::ChunkParams {
            chunk_tokens: 128,
            overlap: 16,
        },
        ..settings(Default::default())
    };
    let err = write_corpus(
        &cluster_of(&location),
        &corpus,
        &encoder,
        &rechunk,
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Mismatch {
                key: "chunking",
                ..
            }
        ),
        "{err}"
    );
    // Appending to a collection that does not exist.
    let missing = cluster.location("missing", &[0], "");
    let append = WriteSettings {
        append: true,
        ..settings(Default::default())
    };
    let err = write_corpus(
        &cluster_of(&missing),
        &corpus,
        &encoder,
        &append,
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(err, Error::NoCollection { .. }), "{err}");
    let err = QdrantStore::open(QdrantLocation::parse(&missing).unwrap())
        .err()
        .unwrap();
    assert!(err.to_string().contains("no such collection"), "{err}");
    // A collection Capstan did not make.
    let foreign = cluster.location("foreign", &[2], "");
    let client = qdrant_client::Qdrant::from_url(&format!("http://{}", cluster.grpc(2)))
        .skip_compatibility_check()
        .build()
        .unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(client.create_collection(
            qdrant_client::qdrant::CreateCollectionBuilder::new("foreign").vectors_config(
                qdrant_client::qdrant::VectorParamsBuilder::new(
                    4,
                    qdrant_client::qdrant::Distance::Cosine,
                ),
            ),
        ))
        .unwrap();
    let err = QdrantStore::open(QdrantLocation::parse(&foreign).unwrap())
        .err()
        .unwrap();
    assert!(matches!(err, Error::Foreign { .. }), "{err}");
    // Nothing listening: unavailable, naming the location, within the retry window.
    let start = Instant::now();
    let err = QdrantStore::open(QdrantLocation::parse("qdrant://127.0.0.1:1/x?retry=0.5").unwrap())
        .err()
        .unwrap();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("qdrant://127.0.0.1:1/x"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
}
