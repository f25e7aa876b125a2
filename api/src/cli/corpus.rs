//! `capstan corpus generate`: the synthetic encyclopedia of corpora/.

use std::path::PathBuf;

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
    }
}
