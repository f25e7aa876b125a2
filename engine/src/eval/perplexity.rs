//! Perplexity by position over long real text: the measure the seeds use for context
//! extension ("Effective Long-Context Scaling" and LongLM/SelfExtend plot the loss of the
//! next token against its position). Each document is read once, in chunks that attend to
//! everything before them through the KV cache, and the loss of every token is summed into
//! buckets by its position. Causal attention makes the loss at a position independent of
//! what follows it, so one pass of `length` tokens gives the mean loss over the first 4K,
//! 8K, ... tokens as well: the figures of shorter runs, without running them.

use std::time::Instant;

use anyhow::{bail, Context};
use candle_core::{DType, Tensor, D};
use capstan_indexer::Corpus;
use capstan_reader::{AttentionPattern, Cache, LanguageModel};
use serde::{Deserialize, Serialize};

use super::plot::{self, Labels, Series};
use super::resume::{self, RunSpec};
use super::write_report;

/// Settings of `capstan eval perplexity`.
pub struct PerplexitySettings {
    /// Tokens read per document (BOS included); shorter documents are skipped.
    pub length: usize,
    /// Width of a position bucket in tokens.
    pub bucket: usize,
    /// Documents read at most (the first long enough, in corpus order).
    pub documents: usize,
    /// Tokens per forward pass (the KV cache carries the rest).
    pub chunk: usize,
    /// Prefix lengths at which the mean loss is reported (e.g. 4K, 8K, 12K, 16K).
    pub report_at: Vec<usize>,
    /// The attention patterns compared, each over every document.
    pub patterns: Vec<AttentionPattern>,
}

/// A document cut to the run's length.
struct Excerpt {
    id: String,
    tokens: Vec<u32>,
}

/// The summed loss of one document under one pattern, by position bucket.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DocumentLoss {
    /// Sum of the next-token losses (nats) of the tokens in each bucket.
    sums: Vec<f64>,
    /// Tokens predicted in each bucket (the first token is never predicted).
    counts: Vec<u64>,
    /// Wall time of the pass.
    seconds: f64,
}

/// One pattern's results.
#[derive(Debug, Serialize)]
struct PatternResults {
    attention: String,
    /// Mean loss (nats per token) of each bucket, over every document.
    bucket_loss: Vec<f64>,
    /// Mean loss over the first `n` tokens, for each `n` of `report_at`.
    prefix_loss: Vec<(usize, f64)>,
    /// Perplexity over the first `n` tokens (`exp` of the mean loss).
    prefix_perplexity: Vec<(usize, f64)>,
    /// Tokens read per second, over all documents.
    tokens_per_second: f64,
}

#[derive(Debug, Serialize)]
struct PerplexityResults {
    task: &'static str,
    length: usize,
    bucket: usize,
    /// The model's trained context (`max_position_embeddings`).
    trained_context: usize,
    documents: Vec<String>,
    /// Start position of each bucket.
    bucket_starts: Vec<usize>,
    patterns: Vec<PatternResults>,
}

/// The first `s.documents` documents of `corpus` with at least `s.length` tokens, cut there.
fn excerpts(
    lm: &LanguageModel,
    corpus: &Corpus,
    s: &PerplexitySettings,
) -> anyhow::Result<Vec<Excerpt>> {
    // No BPE token of real text averages 16 bytes: a longer document's tail is not tokenized.
    let cut = s.length.saturating_mul(16);
    let mut out = Vec::new();
    for doc in &corpus.documents {
        if out.len() == s.documents {
            break;
        }
        if doc.text.len() < s.length {
            continue;
        }
        let end = (0..=cut.min(doc.text.len()))
            .rev()
            .find(|&i| doc.text.is_char_boundary(i))
            .unwrap_or(0);
        let mut tokens = lm
            .plain_prompt(&doc.text[..end])
            .with_context(|| format!("tokenizing document {}", doc.id))?;
        if tokens.len() >= s.length {
            tokens.truncate(s.length);
            out.push(Excerpt {
                id: doc.id.clone(),
                tokens,
            });
        }
    }
    if out.is_empty() {
        bail!(
            "no document of the corpus has {} tokens (--length); choose a shorter length or \
             longer documents",
            s.length
        );
    }
    Ok(out)
}

/// Reads `tokens` in chunks of `chunk` and sums each predicted token's loss into its bucket.
fn score(
    lm: &LanguageModel,
    tokens: &[u32],
    s: &PerplexitySettings,
) -> anyhow::Result<DocumentLoss> {
    let model = lm.model();
    let device = model.device();
    let started = Instant::now();
    let mut cache = Cache::new(model);
    cache.reserve(tokens.len());
    let buckets = tokens.len().div_ceil(s.bucket);
    let mut sums = vec![0f64; buckets];
    let mut counts = vec![0u64; buckets];
    // The last token predicts nothing: it is never read.
    let inputs = &tokens[..tokens.len() - 1];
    for c0 in (0..inputs.len()).step_by(s.chunk) {
        let c1 = (c0 + s.chunk).min(inputs.len());
        let ids = Tensor::new(&inputs[c0..c1], device)?.unsqueeze(0)?;
        let logits = model.forward(&ids, None, &mut cache)?.squeeze(0)?;
        let targets = Tensor::new(&tokens[c0 + 1..c1 + 1], device)?.unsqueeze(1)?;
        let losses = next_token_loss(&logits, &targets)?;
        for (i, loss) in losses.into_iter().enumerate() {
            let position = c0 + 1 + i;
            sums[position / s.bucket] += loss as f64;
            counts[position / s.bucket] += 1;
        }
    }
    Ok(DocumentLoss {
        sums,
        counts,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `-log softmax(logits)[target]` per row of `logits` `(n, vocab)`, `targets` `(n, 1)` u32.
fn next_token_loss(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Vec<f32>> {
    let logits = logits.to_dtype(DType::F32)?;
    let max = logits.max_keepdim(D::Minus1)?;
    let log_sum = logits
        .broadcast_sub(&max)?
        .exp()?
        .sum_keepdim(D::Minus1)?
        .log()?
        .broadcast_add(&max)?;
    let picked = logits.gather(targets, D::Minus1)?;
    (log_sum - picked)?.squeeze(1)?.to_vec1::<f32>()
}

/// Runs every pattern of `s` over the documents of `corpus` and writes results.json,
/// results.md and perplexity.png.
pub fn run(
    lm: &mut LanguageModel,
    corpus: &Corpus,
    s: &PerplexitySettings,
    spec: &RunSpec,
) -> anyhow::Result<()> {
    if s.length < 2 || s.bucket == 0 || s.chunk == 0 || s.documents == 0 {
        bail!("--length must be at least 2, and --bucket, --chunk and --documents positive");
    }
    if let Some(n) = s
        .report_at
        .iter()
        .find(|&&n| n == 0 || n > s.length || (n % s.bucket != 0 && n != s.length))
    {
        bail!(
            "--report-at: {n} is not a multiple of --bucket {} within --length {}",
            s.bucket,
            s.length
        );
    }
    if s.patterns.is_empty() {
        bail!("--attention: no pattern to compare");
    }
    let docs = excerpts(lm, corpus, s)?;
    let mut results = Vec::new();
    for (i, pattern) in s.patterns.iter().enumerate() {
        lm.model_mut()
            .set_attention(*pattern)
            .with_context(|| format!("--attention {pattern}"))?;
        let lm: &LanguageModel = lm;
        let items: Vec<(String, &[u32])> = docs
            .iter()
            .map(|d| (format!("{pattern}|{}", d.id), d.tokens.as_slice()))
            .collect();
        // One resumable item file for all patterns: only the first pass may start it afresh.
        let stage = format!("perplexity {pattern}");
        let pass = RunSpec {
            out: spec.out,
            config: spec.config.clone(),
            restart: spec.restart && i == 0,
            concurrency: 1,
            stage: &stage,
            progress: spec.progress,
        };
        let losses = resume::run(&pass, &items, |tokens: &&[u32]| score(lm, tokens, s))?;
        results.push(summarize(pattern, &losses, s));
    }
    let summary = PerplexityResults {
        task: "perplexity",
        length: s.length,
        bucket: s.bucket,
        trained_context: lm.max_positions(),
        documents: docs.iter().map(|d| d.id.clone()).collect(),
        bucket_starts: (0..s.length).step_by(s.bucket).collect(),
        patterns: results,
    };
    draw(spec, &summary)?;
    write_report(spec.out, &summary, &markdown(&summary))
}

fn summarize(
    pattern: &AttentionPattern,
    losses: &[DocumentLoss],
    s: &PerplexitySettings,
) -> PatternResults {
    let buckets = s.length.div_ceil(s.bucket);
    let mut sums = vec![0f64; buckets];
    let mut counts = vec![0u64; buckets];
    for l in losses {
        for b in 0..buckets.min(l.sums.len()) {
            sums[b] += l.sums[b];
            counts[b] += l.counts[b];
        }
    }
    let bucket_loss = sums
        .iter()
        .zip(&counts)
        .map(|(s, &c)| if c == 0 { f64::NAN } else { s / c as f64 })
        .collect();
    // Report-at lengths end on bucket edges (checked in `run`).
    let prefix_loss: Vec<(usize, f64)> = s
        .report_at
        .iter()
        .map(|&n| {
            let whole = n.div_ceil(s.bucket);
            let (sum, count) =
                (0..whole).fold((0.0, 0u64), |(a, c), b| (a + sums[b], c + counts[b]));
            (n, sum / count.max(1) as f64)
        })
        .collect();
    let seconds: f64 = losses.iter().map(|l| l.seconds).sum();
    let tokens: u64 = losses.iter().flat_map(|l| &l.counts).sum();
    PatternResults {
        attention: pattern.to_string(),
        bucket_loss,
        prefix_perplexity: prefix_loss.iter().map(|&(n, l)| (n, l.exp())).collect(),
        prefix_loss,
        tokens_per_second: tokens as f64 / seconds.max(1e-9),
    }
}

fn draw(spec: &RunSpec, r: &PerplexityResults) -> anyhow::Result<()> {
    let series: Vec<Series> = r
        .patterns
        .iter()
        .map(|p| Series {
            name: p.attention.clone(),
            points: r
                .bucket_starts
                .iter()
                .zip(&p.bucket_loss)
                .filter(|(_, l)| l.is_finite())
                .map(|(&start, &l)| ((start + r.bucket).min(r.length) as f64, l))
                .collect(),
        })
        .collect();
    plot::lines_in(
        &spec.out.join("perplexity.png"),
        &Labels {
            title: &format!(
                "Next-token loss by position ({} documents; trained context {} tokens)",
                r.documents.len(),
                r.trained_context
            ),
            x: "position (tokens, end of bucket)",
            y: "mean loss (nats per token)",
        },
        &series,
        None,
    )
}

fn markdown(r: &PerplexityResults) -> String {
    let mut md = format!(
        "# Perplexity by position\n\n{} documents of {} tokens ({}); buckets of {} tokens; the \
         model's trained context is {} tokens. Loss: mean next-token negative log-likelihood \
         in nats; perplexity = exp(loss).\n\n## Mean over the first N tokens (perplexity)\n\n| attention |",
        r.documents.len(),
        r.length,
        r.documents.join(", "),
        r.bucket,
        r.trained_context
    );
    let Some(first) = r.patterns.first() else {
        return md;
    };
    for (n, _) in &first.prefix_loss {
        md.push_str(&format!(" {n} |"));
    }
    md.push_str(" tokens/s |\n|---|");
    md.push_str(&"---|".repeat(first.prefix_loss.len() + 1));
    md.push('\n');
    for p in &r.patterns {
        md.push_str(&format!("| {} |", p.attention));
        for ((_, l), (_, ppl)) in p.prefix_loss.iter().zip(&p.prefix_perplexity) {
            md.push_str(&format!(" {l:.3} ({ppl:.1}) |"));
        }
        md.push_str(&format!(" {:.0} |\n", p.tokens_per_second));
    }
    md.push_str("\n## Loss by position bucket\n\n| bucket |");
    for p in &r.patterns {
        md.push_str(&format!(" {} |", p.attention));
    }
    md.push_str(&format!("\n|---|{}\n", "---|".repeat(r.patterns.len())));
    for (b, start) in r.bucket_starts.iter().enumerate() {
        md.push_str(&format!("| {start}–{} |", (start + r.bucket).min(r.length)));
        for p in &r.patterns {
            md.push_str(&format!(" {:.3} |", p.bucket_loss[b]));
        }
        md.push('\n');
    }
    md.push_str("\n![loss by position](perplexity.png)\n");
    md
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::next_token_loss;

    #[test]
    fn next_token_loss_is_the_negative_log_softmax_of_the_target() {
        let dev = Device::Cpu;
        let logits = Tensor::new(&[[0f32, 3f32.ln(), -1.0], [10.0, 10.0, 10.0]], &dev).unwrap();
        let targets = Tensor::new(&[[1u32], [2]], &dev).unwrap();
        let got = next_token_loss(&logits, &targets).unwrap();
        let z = 1.0 + 3.0 + (-1f64).exp();
        let want = [(z / 3.0).ln(), 3f64.ln()];
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }
}
