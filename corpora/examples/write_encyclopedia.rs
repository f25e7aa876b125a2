//! Writes the default encyclopedia as a BEIR folder:
//! `cargo run --release -p capstan-corpora --example write_encyclopedia -- OUT_DIR [SEED]`.

use std::path::PathBuf;

use capstan_corpora::{generate, EncyclopediaConfig};

fn main() -> capstan_corpora::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "encyclopedia".into()));
    let mut cfg = EncyclopediaConfig::default();
    if let Some(seed) = args.next() {
        cfg.seed = seed.parse().expect("SEED must be an unsigned integer");
    }
    let start = std::time::Instant::now();
    let enc = generate(&cfg);
    let took = start.elapsed();
    enc.write_beir(&dir)?;
    println!(
        "{} documents, {} questions (seed {}) in {:.0?} -> {}",
        enc.documents.len(),
        enc.questions.len(),
        cfg.seed,
        took,
        dir.display()
    );
    Ok(())
}
