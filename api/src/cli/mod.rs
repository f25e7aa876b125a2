//! Subcommands of the `capstan` binary.

mod ask;
mod corpus;
mod device_arg;
mod encoder_arg;
mod eval;
mod index;
mod model;
mod parse_bounds;
mod pipeline_args;
mod progress;
mod search;
mod serve;

use clap::{Parser, Subcommand};

/// Capstan: retrieval-augmented long-context question answering.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Whether the command is `serve` (a long-running server, not a pipeline stage).
    pub fn is_server(&self) -> bool {
        matches!(self.command, Command::Serve(_))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Index a corpus (BM25 + dense + passage store); delete from or compact an index.
    Index(index::IndexArgs),
    /// Answer a question with citations (extractive, llama or cape reader).
    Ask(ask::AskArgs),
    /// Serve the HTTP API (QA, search, embeddings, OpenAI-compatible chat).
    Serve(serve::ServeArgs),
    /// Retrieve the top-k passages for a question.
    Search(search::SearchArgs),
    /// Batch evaluation: retrieval, QA, lost-in-the-middle positions, kv-retrieval and passkey probes.
    Eval(eval::EvalArgs),
    /// Generate the project's synthetic corpora.
    Corpus(corpus::CorpusArgs),
    /// Inspect and run generative checkpoints (parity checks).
    Model(model::ModelArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Index(args) => index::run(args),
        Command::Ask(args) => ask::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Search(args) => search::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Corpus(args) => corpus::run(args),
        Command::Model(args) => model::run(args),
    }
}

/// An error and its causes on one line, each cause printed once: typed errors
/// often repeat their source in their own message (`"{path}: {source}"`), so
/// a cause whose text the line already holds is left out.
pub fn error_chain(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}
