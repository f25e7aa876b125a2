//! Synthetic long-context probes, generated from a seed and read by a
//! generative model (greedy decoding):
//! - key-value retrieval ("Lost in the Middle", Liu et al., 2023): a JSON object
//!   of random UUID keys and values; the model is asked for one key's value,
//!   the key placed at several positions;
//! - passkey retrieval (landmark attention, Mohtashami & Jaggi 2023; used by
//!   "Effective Long-Context Scaling"): a 5-digit pass key hidden at a depth in
//!   repeated filler text, at several prompt lengths (in the model's tokens).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use candle_core::Device;
use capstan_reader::{AttentionPattern, GenerationParams, LanguageModel, LoadOptions, Request};

use crate::scheduler::{Scheduler, SchedulerSettings};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::plot::{self, Grid, Labels, Series};
use super::resume::{self, RunSpec};
use super::{mean_bool, write_report};

/// Instruction of the key-value retrieval prompt (Lost in the Middle).
pub const KV_INSTRUCTION: &str =
    "Extract the value corresponding to the specified key in the JSON object below.";
/// Task description of the passkey prompt (landmark attention).
pub const PASSKEY_TASK: &str =
    "There is an important info hidden inside a lot of irrelevant text. \
Find it and memorize them. I will quiz you about the important information there.";
/// Filler sentences, repeated in this order.
pub const FILLER: [&str; 5] = [
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
];
/// The passkey question the model completes.
pub const PASSKEY_QUESTION: &str = "What is the pass key? The pass key is";
/// Longest encoder chunk of the CAPE reader, in tokens.
const CAPE_CHUNK_TOKENS: usize = capstan_reader::CEPE_CHUNK_TOKENS;

/// A seed for one case, mixed from the run's seed and the case's coordinates (splitmix64).
fn case_seed(seed: u64, parts: &[u64]) -> u64 {
    let mut h = seed;
    for &p in parts {
        h = h.wrapping_add(p).wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

/// A random version-4 UUID.
pub fn uuid(rng: &mut impl Rng) -> String {
    let mut b: [u8; 16] = rng.gen();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// One key-value retrieval example.
#[derive(Debug, Clone, PartialEq)]
pub struct KvCase {
    /// The key-value pairs in prompt order.
    pub records: Vec<(String, String)>,
    /// Index in `records` of the key asked for.
    pub position: usize,
}

impl KvCase {
    /// `pairs` random UUID pairs for (`seed`, `sample`), the queried pair moved to `position`.
    /// The same sample has the same pairs at every position.
    pub fn generate(seed: u64, pairs: usize, sample: usize, position: usize) -> Self {
        assert!(position < pairs, "position {position} of {pairs} pairs");
        let mut rng = StdRng::seed_from_u64(case_seed(seed, &[pairs as u64, sample as u64]));
        let mut records: Vec<(String, String)> = (0..pairs)
            .map(|_| (uuid(&mut rng), uuid(&mut rng)))
            .collect();
        let gold = records.remove(0);
        records.insert(position, gold);
        Self { records, position }
    }

    /// The queried key.
    pub fn key(&self) -> &str {
        &self.records[self.position].0
    }

    /// The expected answer.
    pub fn value(&self) -> &str {
        &self.records[self.position].1
    }

    fn record(k: &str, v: &str) -> String {
        format!("\"{k}\": \"{v}\"")
    }

    /// The JSON object as the paper formats it: one pair per line.
    pub fn json(&self) -> String {
        let lines: Vec<String> = self
            .records
            .iter()
            .map(|(k, v)| Self::record(k, v))
            .collect();
        format!("{{{}}}", lines.join(",\n "))
    }

    fn question(&self) -> String {
        format!("Key: \"{}\"\nCorresponding value:", self.key())
    }

    /// The whole prompt for a decoder-only model.
    pub fn prompt(&self) -> String {
        format!(
            "{KV_INSTRUCTION}\n\nJSON data:\n{}\n\n{}",
            self.json(),
            self.question()
        )
    }
}

/// Filler text of `n` sentences, starting with sentence `from` of the cycle.
fn filler(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| FILLER[i % FILLER.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// The passkey prompt with `before` filler sentences before the pass key and `after` after it.
pub fn passkey_prompt(passkey: &str, before: usize, after: usize) -> String {
    let needle = format!("The pass key is {passkey}. Remember it. {passkey} is the pass key.");
    let parts = [
        PASSKEY_TASK.to_string(),
        filler(0, before),
        needle,
        filler(before, after),
        PASSKEY_QUESTION.to_string(),
    ];
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

/// One passkey example.
#[derive(Debug, Clone, PartialEq)]
pub struct PasskeyCase {
    /// The 5-digit pass key.
    pub passkey: String,
    /// Filler sentences before the pass key.
    pub before: usize,
    /// Filler sentences after it.
    pub after: usize,
}

impl PasskeyCase {
    /// The case for (`seed`, `length` index, `depth` index, `sample`) with `filler` sentences
    /// in all, `round(depth * filler)` of them before the pass key.
    pub fn generate(seed: u64, coords: [usize; 3], filler: usize, depth: f64) -> Self {
        let parts: Vec<u64> = coords.iter().map(|&c| c as u64).collect();
        let mut rng = StdRng::seed_from_u64(case_seed(seed, &parts));
        let before = ((depth.clamp(0.0, 1.0) * filler as f64).round() as usize).min(filler);
        Self {
            passkey: rng.gen_range(10_000..100_000u32).to_string(),
            before,
            after: filler - before,
        }
    }

    /// The prompt.
    pub fn prompt(&self) -> String {
        passkey_prompt(&self.passkey, self.before, self.after)
    }
}

/// The most filler sentences whose prompt has at most `length` tokens by `count`
/// (0 when even the bare prompt is longer).
pub fn fit_filler(
    length: usize,
    count: impl Fn(&str) -> anyhow::Result<usize>,
) -> anyhow::Result<usize> {
    let fits = |n: usize| -> anyhow::Result<bool> {
        Ok(count(&passkey_prompt("00000", n / 2, n - n / 2))? <= length)
    };
    if !fits(0)? {
        return Ok(0);
    }
    let mut hi = 1;
    while fits(hi)? {
        hi *= 2;
    }
    let mut lo = hi / 2; // fits(lo), !fits(hi)
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Which kind of generative reader reads the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeReader {
    /// The whole prompt in a Llama decoder.
    Llama,
    /// CAPE / CEPE: the key-value pairs in encoder chunks, instruction and question in the decoder.
    Cape,
}

/// A loaded generative model and the kind of reader that reads the probe.
pub struct ProbeModel {
    scheduler: Scheduler,
    reader: ProbeReader,
    /// Run prompts past `max_position_embeddings` (the experiment of context extension).
    beyond_context: bool,
}

impl ProbeModel {
    /// Loads the checkpoint at `path` (a folder or a .gguf file, with a tokenizer) onto
    /// `device`, with `attention` overriding its self-attention pattern. Probes generate
    /// through a continuous-batching scheduler of `scheduling`'s size (`--concurrency` probes
    /// in flight share its steps).
    pub fn load(
        path: &Path,
        device: &Device,
        reader: ProbeReader,
        opts: LoadOptions,
        attention: Option<AttentionPattern>,
        beyond_context: bool,
        scheduling: SchedulerSettings,
    ) -> anyhow::Result<Self> {
        let mut model = LanguageModel::load(path, device, opts)
            .with_context(|| format!("loading the model {}", path.display()))?;
        if let Some(p) = attention {
            model.model_mut().set_attention(p)?;
        }
        Ok(Self {
            scheduler: Scheduler::start("probe", Arc::new(model), scheduling),
            reader,
            beyond_context,
        })
    }

    fn model(&self) -> &LanguageModel {
        self.scheduler.model()
    }

    /// Token ids of `text` (no special tokens).
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        Ok(self.model().encode(text)?)
    }

    /// Prompt length in tokens of `text` as the decoder reads it (template or BOS included).
    pub fn count(&self, text: &str) -> anyhow::Result<usize> {
        Ok(self.decoder_request(text)?.prompt.len())
    }

    /// The model's context window.
    pub fn max_positions(&self) -> usize {
        self.model().max_positions()
    }

    /// The decoder prompt of `text`: one user turn through the chat template of an instruct
    /// model, else BOS and the text.
    fn decoder_request(&self, text: &str) -> anyhow::Result<Request> {
        Ok(Request {
            prompt: self.model().user_prompt(text)?,
            encoder_chunks: Vec::new(),
        })
    }

    /// The request of a key-value case: the whole prompt in the decoder (Llama), or the
    /// pairs in encoder chunks of at most 256 tokens (CAPE).
    fn kv_request(&self, case: &KvCase) -> anyhow::Result<Request> {
        if self.reader == ProbeReader::Llama {
            return self.decoder_request(&case.prompt());
        }
        let mut chunks: Vec<Vec<u32>> = Vec::new();
        let mut current: Vec<u32> = Vec::new();
        for (k, v) in &case.records {
            let ids = self.encode(&format!("{},\n", KvCase::record(k, v)))?;
            if !current.is_empty() && current.len() + ids.len() > CAPE_CHUNK_TOKENS {
                chunks.push(std::mem::take(&mut current));
            }
            current.extend(ids);
            current.truncate(CAPE_CHUNK_TOKENS);
        }
        if !current.is_empty() {
            chunks.push(current);
        }
        let mut request = self.decoder_request(&format!(
            "{KV_INSTRUCTION}\n\nThe JSON data is in the context.\n\n{}",
            case.question()
        ))?;
        request.encoder_chunks = chunks;
        Ok(request)
    }

    /// Greedy generation up to a new line (or the end of the turn); returns the text and the
    /// context length (decoder prompt plus encoder chunks, in tokens).
    fn generate(
        &self,
        request: &Request,
        max_new_tokens: usize,
    ) -> anyhow::Result<(String, usize)> {
        let n = request.prompt.len();
        if !self.beyond_context {
            self.model().check_length(n, max_new_tokens)?;
        }
        let mut params = self
            .model()
            .with_stops(GenerationParams::greedy(max_new_tokens));
        if !self.model().uses_chat_template() {
            params.stop_strings = vec!["\n".into()];
        }
        let out = self.scheduler.generate(request.clone(), params)?;
        let context = n + request.encoder_chunks.iter().map(Vec::len).sum::<usize>();
        Ok((out.text.unwrap_or_default().trim().to_string(), context))
    }
}

/// The outcome of one probe.
#[derive(Debug, Serialize, Deserialize)]
struct ProbeItem {
    prediction: String,
    correct: bool,
    prompt_tokens: usize,
}

/// Settings of `capstan eval kv-retrieval`.
pub struct KvSettings {
    /// Numbers of key-value pairs.
    pub pairs: Vec<usize>,
    /// Evenly spaced positions of the queried key per pair count.
    pub positions: usize,
    /// Examples per (pairs, position).
    pub samples: usize,
    /// Seed of the generator.
    pub seed: u64,
    /// Generated tokens at most.
    pub max_new_tokens: usize,
}

/// `count` evenly spaced positions among `n` (first and last included).
pub fn spread(n: usize, count: usize) -> Vec<usize> {
    if n <= 1 || count <= 1 {
        return vec![0];
    }
    let mut out: Vec<usize> = (0..count)
        .map(|i| ((i * (n - 1)) as f64 / (count - 1) as f64).round() as usize)
        .collect();
    out.dedup();
    out
}

#[derive(Serialize)]
struct KvResults {
    task: &'static str,
    reader: ProbeReader,
    samples: usize,
    seed: u64,
    /// pairs -> 0-based position of the queried key -> accuracy.
    accuracy: BTreeMap<usize, BTreeMap<usize, f64>>,
    /// pairs -> mean context tokens (decoder prompt + encoder chunks).
    prompt_tokens: BTreeMap<usize, f64>,
}

/// Runs key-value retrieval and writes results.json, results.md and kv_retrieval.png.
pub fn kv_retrieval(model: &ProbeModel, s: &KvSettings, spec: &RunSpec) -> anyhow::Result<()> {
    let mut items = Vec::new();
    for &n in &s.pairs {
        if n == 0 {
            bail!("--pairs: 0 pairs");
        }
        for p in spread(n, s.positions) {
            for sample in 0..s.samples {
                items.push((format!("n{n}/p{p}/s{sample}"), (n, p, sample)));
            }
        }
    }
    let results = resume::run(spec, &items, |&(n, p, sample)| {
        let case = KvCase::generate(s.seed, n, sample, p);
        let (prediction, prompt_tokens) =
            model.generate(&model.kv_request(&case)?, s.max_new_tokens)?;
        Ok(ProbeItem {
            correct: prediction.contains(case.value()),
            prediction,
            prompt_tokens,
        })
    })?;
    let mut accuracy: BTreeMap<usize, BTreeMap<usize, f64>> = BTreeMap::new();
    let mut tokens: BTreeMap<usize, f64> = BTreeMap::new();
    for &n in &s.pairs {
        let of_n: Vec<_> = items
            .iter()
            .zip(&results)
            .filter(|((_, (m, _, _)), _)| *m == n)
            .collect();
        tokens.insert(
            n,
            of_n.iter()
                .map(|(_, r)| r.prompt_tokens as f64)
                .sum::<f64>()
                / of_n.len() as f64,
        );
        for p in spread(n, s.positions) {
            let acc = mean_bool(
                of_n.iter()
                    .filter(|((_, (_, q, _)), _)| *q == p)
                    .map(|(_, r)| r.correct),
            );
            accuracy.entry(n).or_default().insert(p, acc);
        }
    }
    let summary = KvResults {
        task: "kv-retrieval",
        reader: model.reader,
        samples: s.samples,
        seed: s.seed,
        accuracy,
        prompt_tokens: tokens,
    };
    let series: Vec<Series> = summary
        .accuracy
        .iter()
        .map(|(n, by)| Series {
            name: format!("{n} pairs (~{:.0} tokens)", summary.prompt_tokens[n]),
            points: by.iter().map(|(&p, &a)| (p as f64, a)).collect(),
        })
        .collect();
    plot::lines(
        &spec.out.join("kv_retrieval.png"),
        &Labels {
            title: &format!("Key-value retrieval ({} samples per point)", s.samples),
            x: "position of the queried key (0 = first)",
            y: "accuracy",
        },
        &series,
    )?;
    let mut md = format!(
        "# Key-value retrieval\n\nReader `{}`, {} samples per point, seed {}. Accuracy: the value's UUID appears in the greedy output.\n\n\
         | pairs | context tokens (mean) | position | accuracy |\n|---|---|---|---|\n",
        model.reader.name(),
        s.samples,
        s.seed
    );
    for (n, by) in &summary.accuracy {
        for (p, a) in by {
            md.push_str(&format!(
                "| {n} | {:.0} | {p} | {a:.4} |\n",
                summary.prompt_tokens[n]
            ));
        }
    }
    md.push_str("\n![accuracy by position of the key](kv_retrieval.png)\n");
    write_report(spec.out, &summary, &md)
}

/// Settings of `capstan eval passkey`.
pub struct PasskeySettings {
    /// Prompt lengths in the model's tokens.
    pub lengths: Vec<usize>,
    /// Depths of the pass key in the filler (0 = start, 1 = end).
    pub depths: Vec<f64>,
    /// Examples per (length, depth).
    pub samples: usize,
    /// Seed of the generator.
    pub seed: u64,
    /// Generated tokens at most.
    pub max_new_tokens: usize,
}

#[derive(Serialize)]
struct PasskeyResults {
    task: &'static str,
    samples: usize,
    seed: u64,
    /// length -> depth -> accuracy.
    accuracy: BTreeMap<usize, BTreeMap<String, f64>>,
    /// length -> mean prompt tokens.
    prompt_tokens: BTreeMap<usize, f64>,
}

/// Runs passkey retrieval and writes results.json, results.md and passkey.png.
pub fn passkey(model: &ProbeModel, s: &PasskeySettings, spec: &RunSpec) -> anyhow::Result<()> {
    if let Some(d) = s.depths.iter().find(|d| !(0.0..=1.0).contains(*d)) {
        bail!("--depths: {d} is not between 0 and 1");
    }
    let mut items = Vec::new();
    for (li, &length) in s.lengths.iter().enumerate() {
        if !model.beyond_context && length + s.max_new_tokens > model.max_positions() {
            bail!(
                "--lengths: {length} tokens + {} new tokens exceed the model's {} positions \
                 (--beyond-context runs them anyway)",
                s.max_new_tokens,
                model.max_positions()
            );
        }
        let filler = fit_filler(length, |t| model.count(t))?;
        if filler == 0 {
            bail!("--lengths: {length} tokens is too short for the passkey prompt");
        }
        for (di, &depth) in s.depths.iter().enumerate() {
            for sample in 0..s.samples {
                let case = PasskeyCase::generate(s.seed, [li, di, sample], filler, depth);
                items.push((format!("L{length}/d{depth}/s{sample}"), case));
            }
        }
    }
    let results = resume::run(spec, &items, |case: &PasskeyCase| {
        let (prediction, prompt_tokens) =
            model.generate(&model.decoder_request(&case.prompt())?, s.max_new_tokens)?;
        Ok(ProbeItem {
            correct: prediction.contains(&case.passkey),
            prediction,
            prompt_tokens,
        })
    })?;
    let per_cell = s.depths.len() * s.samples;
    let mut accuracy: BTreeMap<usize, BTreeMap<String, f64>> = BTreeMap::new();
    let mut tokens = BTreeMap::new();
    for (li, &length) in s.lengths.iter().enumerate() {
        let of_len = &results[li * per_cell..(li + 1) * per_cell];
        tokens.insert(
            length,
            of_len.iter().map(|r| r.prompt_tokens as f64).sum::<f64>() / per_cell as f64,
        );
        for (di, depth) in s.depths.iter().enumerate() {
            let cell = &of_len[di * s.samples..(di + 1) * s.samples];
            accuracy
                .entry(length)
                .or_default()
                .insert(depth.to_string(), mean_bool(cell.iter().map(|r| r.correct)));
        }
    }
    let summary = PasskeyResults {
        task: "passkey",
        samples: s.samples,
        seed: s.seed,
        accuracy,
        prompt_tokens: tokens,
    };
    let columns: Vec<String> = s.lengths.iter().map(|l| l.to_string()).collect();
    let rows: Vec<String> = s.depths.iter().map(|d| d.to_string()).collect();
    let values: Vec<Vec<f64>> = rows
        .iter()
        .map(|d| s.lengths.iter().map(|l| summary.accuracy[l][d]).collect())
        .collect();
    plot::heatmap(
        &spec.out.join("passkey.png"),
        &Labels {
            title: &format!(
                "Passkey retrieval accuracy ({} samples per cell)",
                s.samples
            ),
            x: "prompt length (tokens)",
            y: "depth of the pass key",
        },
        &Grid {
            column_labels: &columns,
            row_labels: &rows,
            values: &values,
        },
    )?;
    let mut md = format!(
        "# Passkey retrieval\n\n{} samples per cell, seed {}. Accuracy: the 5-digit pass key appears in the greedy output. \
         Rows: depth of the pass key in the filler (0 = start, 1 = end); columns: prompt length in tokens.\n\n| depth |",
        s.samples, s.seed
    );
    for c in &columns {
        md.push_str(&format!(" {c} |"));
    }
    md.push_str(&format!("\n|---|{}\n", "---|".repeat(columns.len())));
    for (d, row) in rows.iter().zip(&values) {
        md.push_str(&format!("| {d} |"));
        for v in row {
            md.push_str(&format!(" {v:.2} |"));
        }
        md.push('\n');
    }
    md.push_str("\n![passkey accuracy by length and depth](passkey.png)\n");
    write_report(spec.out, &summary, &md)
}

impl ProbeReader {
    fn name(self) -> &'static str {
        match self {
            ProbeReader::Llama => "llama",
            ProbeReader::Cape => "cape",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(t: &str) -> anyhow::Result<usize> {
        Ok(t.split_whitespace().count())
    }

    #[test]
    fn kv_key_is_at_the_requested_position_and_generation_is_seeded() {
        for p in [0, 37, 74] {
            let case = KvCase::generate(1, 75, 3, p);
            assert_eq!(case.records.len(), 75);
            let prompt = case.prompt();
            let lines: Vec<&str> = prompt.lines().collect();
            let first = lines.iter().position(|l| l.starts_with('{')).unwrap();
            let at = lines
                .iter()
                .position(|l| l.contains(&format!("\"{}\": ", case.key())))
                .unwrap();
            assert_eq!(at - first, p, "key line");
            assert!(lines[at].contains(case.value()));
            assert_eq!(
                prompt.matches(case.key()).count(),
                2,
                "in the data and the question"
            );
            assert!(prompt.ends_with(&format!("Key: \"{}\"\nCorresponding value:", case.key())));
            let json: serde_json::Value = serde_json::from_str(&case.json()).unwrap();
            assert_eq!(json[case.key()], case.value());
        }
        // Same sample, same pairs at every position; seeds and samples differ.
        let (a, b) = (
            KvCase::generate(1, 75, 3, 0),
            KvCase::generate(1, 75, 3, 74),
        );
        assert_eq!((a.key(), a.value()), (b.key(), b.value()));
        assert_eq!(a, KvCase::generate(1, 75, 3, 0));
        assert_ne!(a.key(), KvCase::generate(2, 75, 3, 0).key());
        assert_ne!(a.key(), KvCase::generate(1, 75, 4, 0).key());
        let u = a.key();
        assert_eq!((u.len(), &u[14..15]), (36, "4"));
        assert_eq!(spread(75, 5), vec![0, 19, 37, 56, 74]);
        assert_eq!(spread(3, 5), vec![0, 1, 2]);
    }

    #[test]
    fn passkey_is_at_the_requested_depth_and_fits_the_length() {
        let filler = fit_filler(1000, words).unwrap();
        assert!(words(&passkey_prompt("00000", 0, filler)).unwrap() <= 1000);
        assert!(words(&passkey_prompt("00000", 0, filler + 1)).unwrap() > 1000);
        for (i, depth) in [0.0, 0.25, 0.5, 0.75, 1.0].into_iter().enumerate() {
            let case = PasskeyCase::generate(1, [0, i, 0], filler, depth);
            let prompt = case.prompt();
            assert_eq!(case.passkey.len(), 5);
            assert_eq!(prompt.matches(&case.passkey).count(), 2);
            let needle = prompt.find("The pass key is").unwrap();
            let start = PASSKEY_TASK.len();
            let end = prompt.find(PASSKEY_QUESTION).unwrap();
            let frac = (needle - start) as f64 / (end - start) as f64;
            assert!(
                (frac - depth).abs() < 0.02,
                "depth {depth}: needle at {frac}"
            );
            assert!(prompt.starts_with(PASSKEY_TASK) && prompt.ends_with(PASSKEY_QUESTION));
            assert_eq!(case, PasskeyCase::generate(1, [0, i, 0], filler, depth));
        }
        let keys: std::collections::HashSet<String> = (0..20)
            .map(|s| PasskeyCase::generate(1, [0, 0, s], filler, 0.5).passkey)
            .collect();
        assert!(keys.len() > 15, "pass keys vary with the sample");
        assert_ne!(
            PasskeyCase::generate(1, [0, 0, 0], filler, 0.5).passkey,
            PasskeyCase::generate(2, [0, 0, 0], filler, 0.5).passkey
        );
    }
}
