//! `capstan index`: build, append to, delete from and compact an index.

use std::path::PathBuf;

use anyhow::Context;
use std::sync::Arc;

use capstan_indexer::{
    Bm25Params, ChunkParams, Encoder, EncoderOptions, EncoderPrecision, HnswParams, IndexSettings,
};
use capstan_qdrant::{
    Cluster, CollectionOptions, IndexLocation, Part, QdrantLocation, WriteSettings,
};
use clap::{Args, Subcommand};

use super::device_arg::DeviceArg;
use super::encoder_arg::{default_encoder, EncoderDtypeArg};
use super::progress::Bars;

/// Arguments of `capstan index`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct IndexArgs {
    #[command(subcommand)]
    action: Option<IndexAction>,
    #[command(flatten)]
    build: BuildArgs,
}

#[derive(Debug, Args)]
struct BuildArgs {
    /// The corpus: a BEIR corpus.jsonl, a plain JSONL ({"id","title","text"}),
    /// or a folder of .txt/.md/.html files.
    #[arg(required = true)]
    corpus: Option<PathBuf>,
    /// The index folder to write, or a Qdrant collection:
    /// qdrant://HOST:PORT[,HOST:PORT...]/COLLECTION (gRPC ports; API key from
    /// CAPSTAN_QDRANT_API_KEY).
    #[arg(long, required = true)]
    out: Option<PathBuf>,
    /// The dense encoder (a Hugging Face BERT folder).
    #[arg(long, env = "CAPSTAN_ENCODER", default_value_os_t = default_encoder())]
    encoder: PathBuf,
    /// Where the encoder runs: cpu, cuda or auto (a GPU when this build has CUDA and one
    /// answers).
    #[arg(long, value_enum, env = "CAPSTAN_DEVICE", default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// The encoder's numbers: int8 (its linear layers in int8: the CPU's fast mode, recall
    /// within noise of f32's, docs/BENCHMARKS.md), f32 (the parity mode), f16 or bf16
    /// (candle's padded BERT: a GPU's choice). Recorded in the index; questions are embedded
    /// the same way by default [default: int8 on the CPU, f32 on a GPU; with --append, the
    /// index's]
    #[arg(long, value_enum)]
    encoder_dtype: Option<EncoderDtypeArg>,
    /// Passage size in encoder tokens.
    #[arg(long, default_value_t = 256)]
    chunk_tokens: usize,
    /// Tokens shared by consecutive passages of a document.
    #[arg(long, default_value_t = 32)]
    overlap: usize,
    /// BM25 term-frequency saturation.
    #[arg(long, default_value_t = 1.2)]
    bm25_k1: f32,
    /// BM25 length normalisation.
    #[arg(long, default_value_t = 0.75)]
    bm25_b: f32,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    hnsw_m: usize,
    /// HNSW candidate list size while building.
    #[arg(long, default_value_t = 100)]
    hnsw_ef_construction: usize,
    /// Do not embed passage sentences (smaller, faster index; the extractive
    /// reader then embeds sentences at question time).
    #[arg(long)]
    no_sentence_vectors: bool,
    /// Add the corpus to the existing index (same ids replace documents).
    #[arg(long)]
    append: bool,
    /// Skip malformed lines or files (and list them) instead of failing.
    #[arg(long)]
    skip_bad: bool,
    /// Fail on damage read past (a page that could not be read, a PDF cut short), as on
    /// a bad file, instead of indexing what could be read with a warning.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    bounds: super::parse_bounds::ParseBounds,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    qdrant: QdrantArgs,
}

/// Settings of a Qdrant collection (`--out qdrant://…` only).
#[derive(Debug, Args)]
struct QdrantArgs {
    /// Write only part I of N of the corpus (by a hash of the document id), so N
    /// machines fill one collection together; running a part again finishes it.
    #[arg(long, value_name = "I/N")]
    part: Option<String>,
    /// Shards of a new collection [default: one per node].
    #[arg(long)]
    shards: Option<u32>,
    /// Copies of each shard of a new collection [default: 1].
    #[arg(long)]
    replication_factor: Option<u32>,
    /// Copies a write must reach before it is acknowledged [default: 1].
    #[arg(long)]
    write_consistency_factor: Option<u32>,
    /// Keep a new collection's vectors, sparse index and payload on disk (memory-mapped).
    #[arg(long)]
    on_disk: bool,
    /// Passages per upsert.
    #[arg(long, default_value_t = 256)]
    batch_passages: usize,
}

impl QdrantArgs {
    /// The flags set, for refusing them with an index folder.
    fn given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (set, name) in [
            (self.part.is_some(), "--part"),
            (self.shards.is_some(), "--shards"),
            (self.replication_factor.is_some(), "--replication-factor"),
            (
                self.write_consistency_factor.is_some(),
                "--write-consistency-factor",
            ),
            (self.on_disk, "--on-disk"),
        ] {
            if set {
                out.push(name);
            }
        }
        out
    }
}

#[derive(Debug, Subcommand)]
enum IndexAction {
    /// Remove documents from an index (their passages are tombstoned until `compact`)
    /// or from a Qdrant collection.
    Delete {
        /// The index folder or qdrant:// location.
        dir: PathBuf,
        /// Document ids to remove (comma-separated or repeated).
        #[arg(long, required = true, value_delimiter = ',')]
        ids: Vec<String>,
    },
    /// Check every file of an index against the size and checksum in its
    /// manifest, then open it and compare every count (exit 1 if damaged).
    Verify {
        /// The index folder.
        dir: PathBuf,
    },
    /// Rebuild an index without its deleted passages (no re-encoding).
    Compact {
        /// The index folder.
        dir: PathBuf,
        /// No progress bars.
        #[arg(long, short)]
        quiet: bool,
    },
}

/// Runs `capstan index`.
pub fn run(args: IndexArgs) -> anyhow::Result<()> {
    match args.action {
        Some(IndexAction::Delete { dir, ids }) => match IndexLocation::parse(&dir)? {
            IndexLocation::Qdrant(location) => {
                let cluster = Cluster::new(location)?;
                let s = capstan_qdrant::delete_documents(&cluster, &ids)?;
                println!(
                    "deleted {} document(s) ({} passages) from {}",
                    s.deleted_documents,
                    s.deleted_passages,
                    cluster.location()
                );
                Ok(())
            }
            IndexLocation::Folder(dir) => {
                let s = capstan_indexer::delete(&dir, &ids)?;
                println!(
                    "deleted {} document(s) from {}: {} documents, {} passages live, {} tombstoned (run `capstan index compact` to reclaim)",
                    s.deleted_documents,
                    dir.display(),
                    s.manifest.counts.documents,
                    s.manifest.counts.passages,
                    s.manifest.counts.deleted_passages
                );
                Ok(())
            }
        },
        Some(IndexAction::Verify { dir }) => verify(&folder_only(&dir, "verify")?),
        Some(IndexAction::Compact { dir, quiet }) => {
            let dir = folder_only(&dir, "compact")?;
            let s = capstan_indexer::compact(&dir, &Bars::new(quiet))?;
            println!(
                "compacted {}: {} documents, {} passages",
                dir.display(),
                s.manifest.counts.documents,
                s.manifest.counts.passages
            );
            Ok(())
        }
        None => build(args.build),
    }
}

/// Refuses a Qdrant location for commands about index folders.
fn folder_only(dir: &std::path::Path, command: &str) -> anyhow::Result<PathBuf> {
    match IndexLocation::parse(dir)? {
        IndexLocation::Folder(dir) => Ok(dir),
        IndexLocation::Qdrant(l) => anyhow::bail!(
            "`capstan index {command}` is for index folders; {l} is a Qdrant collection, whose storage Qdrant checks and compacts itself"
        ),
    }
}

fn verify(dir: &std::path::Path) -> anyhow::Result<()> {
    let report = capstan_indexer::Index::verify(dir)?;
    for damage in &report.damage {
        println!("damaged {}: {}", damage.path.display(), damage.problem);
    }
    if let Some(error) = &report.open_error {
        println!("fails to open: {error}");
    }
    let summary = format!(
        "{}: {} files, {} bytes checked",
        report.generation.display(),
        report.files,
        report.bytes
    );
    if report.is_intact() {
        println!("{summary}: intact");
        Ok(())
    } else {
        anyhow::bail!(
            "{summary}: {} damaged file(s){}; restore the index from a copy or rebuild it",
            report.damage.len(),
            if report.open_error.is_some() {
                ", fails to open"
            } else {
                ""
            }
        )
    }
}

fn build(args: BuildArgs) -> anyhow::Result<()> {
    let corpus_path = args.corpus.clone().expect("clap requires CORPUS");
    let out = args.out.clone().expect("clap requires --out");
    let location = IndexLocation::parse(&out)?;
    let settings = IndexSettings {
        chunk: ChunkParams {
            chunk_tokens: args.chunk_tokens,
            overlap: args.overlap,
        },
        bm25: Bm25Params {
            k1: args.bm25_k1,
            b: args.bm25_b,
        },
        hnsw: HnswParams {
            m: args.hnsw_m,
            ef_construction: args.hnsw_ef_construction,
        },
        sentence_vectors: !args.no_sentence_vectors,
    };
    settings.chunk.validate()?;
    settings.bm25.validate()?;
    settings.hnsw.validate()?;
    let given = args.qdrant.given();
    if matches!(location, IndexLocation::Folder(_)) && !given.is_empty() {
        anyhow::bail!(
            "{} only apply to a Qdrant collection (--out qdrant://HOST:PORT/COLLECTION)",
            given.join(", ")
        );
    }
    let start = std::time::Instant::now();
    let extractor = args.bounds.extractor()?;
    let parallel_files = args.bounds.parallel_files()?;
    let corpus = capstan_indexer::read_corpus_reporting(
        &corpus_path,
        capstan_indexer::ReadOptions {
            skip_bad: args.skip_bad,
            max_document_bytes: args.bounds.max_document_bytes,
            extractor: Some(extractor),
            parallel_files,
        },
        &Bars::new(args.quiet),
    )?;
    for skipped in &corpus.skipped {
        eprintln!("skipped {skipped}");
    }
    for warning in &corpus.warnings {
        eprintln!("warning: {warning}");
    }
    if args.strict && !corpus.warnings.is_empty() {
        anyhow::bail!(
            "{} file(s) were damaged (--strict); nothing was indexed",
            corpus.warnings.len()
        );
    }
    if !corpus.skipped.is_empty() {
        eprintln!("skipped {} bad line(s) or file(s)", corpus.skipped.len());
    }
    let device = args.device.device()?;
    let precision = match (args.encoder_dtype, &location) {
        (Some(given), _) => given.into(),
        (None, IndexLocation::Folder(dir)) if args.append && dir.join("CURRENT").is_file() => {
            capstan_indexer::Index::open(dir)?
                .manifest()
                .encoder
                .precision
        }
        // Writing into an existing collection: its precision (one collection holds int8 or
        // float vectors, never both).
        (None, IndexLocation::Qdrant(location)) => {
            let cluster = Cluster::new(location.clone())?;
            match capstan_qdrant::collection_description(&cluster)? {
                Some(d) => d.encoder.precision,
                None if device.is_cpu() => EncoderPrecision::Int8,
                None => EncoderPrecision::F32,
            }
        }
        (None, _) if device.is_cpu() => EncoderPrecision::Int8,
        (None, _) => EncoderPrecision::F32,
    };
    let options = EncoderOptions {
        precision,
        padded: false,
    };
    let encoder =
        Encoder::load_with(&args.encoder, &device, options).context("loading the dense encoder")?;
    let bars = Bars::new(args.quiet);
    let out = match location {
        IndexLocation::Qdrant(location) => {
            return write_qdrant(location, &args, settings, &corpus, &encoder, &bars, start)
        }
        IndexLocation::Folder(dir) => dir,
    };
    let summary = if args.append {
        capstan_indexer::append(&out, &corpus, &encoder, &bars)?
    } else {
        capstan_indexer::build(&out, &corpus, &encoder, settings, &bars)?
    };
    let c = summary.manifest.counts;
    if !summary.written {
        println!(
            "{} is up to date with {} ({} documents, {} passages); nothing to do",
            out.display(),
            corpus_path.display(),
            c.documents,
            c.passages
        );
    } else {
        let unchanged = match summary.unchanged_documents {
            0 => String::new(),
            n => format!(", {n} unchanged"),
        };
        println!(
            "indexed {} document(s) ({} replaced{unchanged}) into {} in {:.1}s: {} documents, {} passages",
            summary.added_documents + summary.replaced_documents,
            summary.replaced_documents,
            out.display(),
            start.elapsed().as_secs_f64(),
            c.documents,
            c.passages
        );
    }
    Ok(())
}

/// `capstan index CORPUS --out qdrant://…`: this run's part of the corpus
/// into the collection (created if missing).
fn write_qdrant(
    location: QdrantLocation,
    args: &BuildArgs,
    settings: IndexSettings,
    corpus: &capstan_indexer::Corpus,
    encoder: &Encoder,
    bars: &Bars,
    start: std::time::Instant,
) -> anyhow::Result<()> {
    let q = &args.qdrant;
    let part = match &q.part {
        Some(p) => Part::parse(p)?,
        None => Part::default(),
    };
    let write = WriteSettings {
        chunk: settings.chunk,
        bm25: settings.bm25,
        collection: CollectionOptions {
            shards: q.shards,
            replication_factor: q.replication_factor,
            write_consistency_factor: q.write_consistency_factor,
            on_disk: q.on_disk,
            hnsw_m: Some(settings.hnsw.m as u64),
            hnsw_ef_construct: Some(settings.hnsw.ef_construction as u64),
        },
        part,
        append: args.append,
        batch_passages: q.batch_passages,
    };
    let cluster = Arc::new(Cluster::new(location)?);
    let s = capstan_qdrant::write_corpus(&cluster, corpus, encoder, &write, bars)?;
    println!(
        "{} {} (part {part}: {} documents): wrote {} document(s) ({} passages), {} already there, in {:.1}s",
        if s.created { "created" } else { "updated" },
        cluster.location(),
        s.documents,
        s.written_documents,
        s.written_passages,
        s.skipped_documents,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
