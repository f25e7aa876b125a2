//! `capstan corpus generate`: the synthetic encyclopedia of corpora/;
//! `capstan corpus extract`: the text Capstan takes from one PDF, DOCX or
//! EPUB file, per page (also the child process `capstan index` parses such
//! files in).

use std::path::PathBuf;

use super::parse_bounds::ParseBounds;
use clap::{Args, Subcommand};

/// Arguments of `capstan corpus`.
#[derive(Debug, Args)]
pub struct CorpusArgs {
    #[command(subcommand)]
    action: CorpusAction,
}

#[derive(Debug, Subcommand)]
enum CorpusAction {
    /// Write the seeded encyclopedia as a BEIR folder plus NQ-open style questions.
    Generate {
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Random seed (same seed, same corpus).
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Number of documents.
        #[arg(long, default_value_t = 3000)]
        documents: usize,
        /// Number of questions.
        #[arg(long, default_value_t = 500)]
        questions: usize,
    },
    /// Print the text of a PDF, DOCX or EPUB file as Capstan indexes it: page by
    /// page for PDFs, with section headings.
    Extract {
        /// The file.
        file: PathBuf,
        /// Print the extraction as JSON (`{"Ok": {title, text, layout}}` or
        /// `{"Err": …}`): text, the character offset where each page begins,
        /// and the sections.
        #[arg(long)]
        json: bool,
        /// Parse in this process and answer in JSON, unbounded: what the bounded child
        /// process of `index` and `corpus extract` runs.
        #[arg(long, hide = true)]
        child: bool,
        #[command(flatten)]
        bounds: ParseBounds,
    },
}

/// Runs `capstan corpus`.
pub fn run(args: CorpusArgs) -> anyhow::Result<()> {
    match args.action {
        CorpusAction::Generate {
            out,
            seed,
            documents,
            questions,
        } => {
            let cfg = capstan_corpora::EncyclopediaConfig {
                seed,
                documents,
                questions,
            };
            let corpus = capstan_corpora::generate(&cfg);
            corpus.write_beir(&out)?;
            println!(
                "wrote {} documents and {} questions (seed {seed}) to {}",
                documents,
                questions,
                out.display()
            );
            Ok(())
        }
        CorpusAction::Extract {
            file,
            json,
            child,
            bounds,
        } => extract(&file, json, child, &bounds),
    }
}

fn extract(
    file: &std::path::Path,
    json: bool,
    child: bool,
    bounds: &ParseBounds,
) -> anyhow::Result<()> {
    use capstan_indexer::extract::{self, Format};
    use std::io::Read as _;
    let mut head = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(1024).read_to_end(&mut head))
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let Some(format) = Format::detect(file, &head) else {
        anyhow::bail!("{}: not a PDF, DOCX or EPUB file", file.display());
    };
    if child {
        // Failures are answers too: the parent process names the file with them.
        let bytes = std::fs::read(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        println!(
            "{}",
            serde_json::to_string(&extract::extract(format, &bytes))?
        );
        return Ok(());
    }
    // The same bounds as `index`: a run its memory bound cannot hold does not start.
    bounds.parallel_files()?;
    // The parse runs in a bounded child, as `index` runs it: a hostile file costs this
    // process neither its memory nor its stack.
    let result = bounds.extractor()?.extract(file, format).and_then(|doc| {
        if doc.text.len() > bounds.max_document_bytes {
            return Err(extract::ExtractError::TooLarge {
                format: format.name().into(),
                what: format!(
                    "{} bytes of text, past --max-document-bytes {}",
                    doc.text.len(),
                    bounds.max_document_bytes
                ),
            });
        }
        Ok(doc)
    });
    if json {
        println!("{}", serde_json::to_string(&result)?);
        return Ok(());
    }
    let doc = result.map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    for warning in &doc.warnings {
        eprintln!("warning: {}: {warning}", file.display());
    }
    if let Some(title) = &doc.title {
        println!("# {title}");
    }
    let starts = &doc.layout.page_starts;
    if starts.is_empty() {
        println!("{}", doc.text);
        return Ok(());
    }
    let chars: Vec<char> = doc.text.chars().collect();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(chars.len());
        println!("\n--- page {} ---", i + 1);
        println!(
            "{}",
            chars[start..end.max(start)]
                .iter()
                .collect::<String>()
                .trim()
        );
    }
    Ok(())
}
