//! `capstan ask`: answer one question with its sources.

use std::io::Write;
use std::path::PathBuf;

use capstan_reader::Flow;
use clap::Args;

use super::pipeline_args::{build, Command, PipelineArgs};
use super::search::snippet;
use capstan_engine::pipeline::AnswerKind;
use capstan_engine::pipeline::ReaderKind;

/// Arguments of `capstan ask`.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// The index folder.
    index: PathBuf,
    /// The question.
    question: String,
    /// Print the answer, citations, passages, usage and timings as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pipeline: PipelineArgs,
}

/// Runs `capstan ask`.
pub fn run(args: AskArgs) -> anyhow::Result<()> {
    if args.question.trim().is_empty() {
        anyhow::bail!("the question is empty");
    }
    let (pipeline, defaults, _) = build(&args.index, &args.pipeline, Command::Ask)?;
    let mut request = defaults.request;
    request.question = args.question.clone();
    // Free text streams as it comes; a span answer is printed as the passage spells it.
    let stream = !args.json
        && request.reader != ReaderKind::Extractive
        && request.answer == capstan_engine::context::AnswerMode::Free;
    if stream {
        print!("answer: ");
    }
    // A panic in the pipeline is reported as the error it is, as the server reports it.
    let answer = capstan_engine::guarded(|| {
        pipeline.answer(&request, |piece| {
            if stream {
                print!("{piece}");
                let _ = std::io::stdout().flush();
            }
            Flow::Continue
        })
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    if stream {
        println!();
    } else if answer.no_answer {
        println!("answer: (no answer: the reader copied nothing from the passages)");
    } else {
        println!("answer: {}", answer.answer);
    }
    let rank = |id: &str| answer.passages.iter().position(|h| h.passage_id == id);
    match answer.kind {
        AnswerKind::Sentence => println!("  (a sentence of the passages: the extractive reader)"),
        AnswerKind::Span => {
            for s in &answer.spans {
                println!(
                    "  (copied from [{}] {}, characters {}..{})",
                    rank(&s.passage_id).map_or(0, |r| r + 1),
                    s.passage_id,
                    s.start,
                    s.end
                );
            }
        }
        AnswerKind::Free => {}
    }
    println!("sources:");
    for (i, hit) in answer.passages.iter().enumerate() {
        let cited = if answer.citations.contains(&hit.passage_id) {
            "*"
        } else {
            " "
        };
        let location = hit.location.describe();
        let location = if location.is_empty() {
            location
        } else {
            format!(", {location}")
        };
        println!(
            "{cited}[{}] {}{location} ({}) score {:.4}",
            i + 1,
            hit.title,
            hit.passage_id,
            hit.score
        );
        println!("     {}", snippet(&hit.text, 160));
    }
    let t = answer.timings;
    println!(
        "reader {} | retrieve {:.1} ms, assemble {:.1} ms, read {:.1} ms, total {:.1} ms",
        answer.reader.name(),
        t.retrieve_ms,
        t.assemble_ms,
        t.read_ms,
        t.total_ms
    );
    Ok(())
}
