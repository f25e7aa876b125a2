//! The candle encoder equals sentence-transformers on all-MiniLM-L6-v2.
//! Expected values: fixtures/minilm_expected.json, made by
//! fixtures/make_encoder_fixture.py. The encoder folder comes from
//! `CAPSTAN_ENCODER` or scripts/setup.sh's default location.

use capstan_indexer::{Encoder, Pooling};

mod common;
use common::encoder_dir;

/// fixtures/minilm_expected.json: sentences, their sentence-transformers vectors, token counts.
fn expected_fixture() -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/tests/fixtures/minilm_expected.json",
            std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap()
}

#[test]
fn embeddings_equal_sentence_transformers() {
    let fixture = expected_fixture();
    let dir = encoder_dir();
    let encoder =
        Encoder::load(&dir).unwrap_or_else(|e| panic!("{e} (run scripts/setup.sh first)"));
    assert_eq!(encoder.info().pooling, Pooling::Mean);
    assert!(encoder.info().normalize);
    assert_eq!(
        encoder.info().max_tokens,
        fixture["max_seq_length"].as_u64().unwrap() as usize
    );
    let sentences: Vec<String> = serde_json::from_value(fixture["sentences"].clone()).unwrap();
    let expected: Vec<Vec<f32>> = serde_json::from_value(fixture["embeddings"].clone()).unwrap();
    let counts: Vec<usize> = serde_json::from_value(fixture["token_counts"].clone()).unwrap();
    assert!(
        counts.iter().any(|&c| c == encoder.info().max_tokens),
        "one sentence must be truncated"
    );
    let got = encoder.embed(&sentences).unwrap();
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        let dot: f32 = g.iter().zip(e).map(|(a, b)| a * b).sum();
        let cos = dot
            / (g.iter().map(|x| x * x).sum::<f32>().sqrt()
                * e.iter().map(|x| x * x).sum::<f32>().sqrt());
        let max_abs = g
            .iter()
            .zip(e)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(cos >= 0.99999, "sentence {i}: cosine {cos}");
        assert!(max_abs <= 1e-4, "sentence {i}: max abs diff {max_abs}");
    }
    // Batch composition must not change a vector (padding is masked).
    let alone = encoder.embed(&sentences[2..3]).unwrap();
    let max_abs = alone[0]
        .iter()
        .zip(&got[2])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(max_abs <= 1e-5, "batched vs alone: {max_abs}");
}

#[test]
fn a_missing_or_wrong_encoder_folder_is_a_clear_error() {
    let missing = Encoder::load("/nonexistent/encoder".as_ref())
        .err()
        .unwrap()
        .to_string();
    assert!(missing.contains("/nonexistent/encoder"), "{missing}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        b"{\"model_type\": \"llama\"}",
    )
    .unwrap();
    let wrong = Encoder::load(dir.path()).err().unwrap().to_string();
    assert!(wrong.contains("config.json"), "{wrong}");
}

/// The padded BERT a GPU runs (candle-transformers', batched by a token
/// budget, f32/f16/bf16) gives the vectors sentence-transformers gives, within
/// the dtype's precision; run here on the CPU, the same code as on CUDA.
#[test]
fn the_gpu_path_equals_sentence_transformers_within_its_dtype() {
    use candle_core::Device;
    use capstan_indexer::{EncoderOptions, EncoderPrecision};
    let fixture = expected_fixture();
    let sentences: Vec<String> = serde_json::from_value(fixture["sentences"].clone()).unwrap();
    let expected: Vec<Vec<f32>> = serde_json::from_value(fixture["embeddings"].clone()).unwrap();
    for (precision, tolerance) in [
        (EncoderPrecision::F32, 1e-4f32),
        (EncoderPrecision::F16, 5e-3),
        (EncoderPrecision::Bf16, 3e-2),
    ] {
        let options = EncoderOptions {
            precision,
            padded: true,
        };
        let encoder = Encoder::load_with(&encoder_dir(), &Device::Cpu, options).unwrap();
        let got = encoder.embed(&sentences).unwrap();
        // One sentence alone (no padding in its batch) and all together.
        let alone = encoder.embed(&sentences[..1]).unwrap();
        for (i, (g, e)) in alone
            .iter()
            .chain(&got)
            .zip(expected[..1].iter().chain(&expected))
            .enumerate()
        {
            // NaN must fail: `f32::max` would skip it.
            let max_abs = g
                .iter()
                .zip(e)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, |m, d| {
                    if d.is_nan() || m.is_nan() {
                        f32::NAN
                    } else {
                        m.max(d)
                    }
                });
            assert!(max_abs <= tolerance, "{precision} vector {i}: {max_abs}");
        }
    }
    let err = Encoder::load_with(
        &encoder_dir(),
        &Device::Cpu,
        EncoderOptions {
            precision: EncoderPrecision::Int8,
            padded: true,
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("int8 runs on the CPU"), "{err}");
}

/// The int8 encoder (linear layers in int8 per channel and per token, smoothed) stays within
/// its precision of sentence-transformers' f32 vectors, and ranks as they do: every
/// sentence's nearest other sentence is f32's nearest (or one within 0.01 of it in f32's
/// similarity: a near tie may go either way), and no similarity moves by more than 0.02.
#[test]
fn int8_embeddings_stay_close_to_sentence_transformers() {
    use candle_core::Device;
    use capstan_indexer::{EncoderOptions, EncoderPrecision};
    let fixture = expected_fixture();
    let sentences: Vec<String> = serde_json::from_value(fixture["sentences"].clone()).unwrap();
    let expected: Vec<Vec<f32>> = serde_json::from_value(fixture["embeddings"].clone()).unwrap();
    let options = EncoderOptions {
        precision: EncoderPrecision::Int8,
        padded: false,
    };
    let encoder = Encoder::load_with(&encoder_dir(), &Device::Cpu, options).unwrap();
    assert_eq!(encoder.info().precision, EncoderPrecision::Int8);
    let got = encoder.embed(&sentences).unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let mut worst = 1f32;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        let cos = dot(g, e) / (dot(g, g).sqrt() * dot(e, e).sqrt());
        assert!(
            cos >= 0.995,
            "sentence {i} {:?}: cosine {cos}",
            sentences[i]
        );
        worst = worst.min(cos);
    }
    let nearest = |vs: &[Vec<f32>], i: usize| {
        (0..vs.len())
            .filter(|&j| j != i)
            .max_by(|&a, &b| dot(&vs[i], &vs[a]).total_cmp(&dot(&vs[i], &vs[b])))
            .unwrap()
    };
    let mut worst_shift = 0f32;
    for i in 0..sentences.len() {
        let (ours, theirs) = (nearest(&got, i), nearest(&expected, i));
        let lost = dot(&expected[i], &expected[theirs]) - dot(&expected[i], &expected[ours]);
        assert!(
            lost <= 0.01,
            "sentence {i}: nearest {ours}, f32's {theirs} ({lost} apart)"
        );
        for j in 0..sentences.len() {
            let shift = (dot(&got[i], &got[j]) - dot(&expected[i], &expected[j])).abs();
            worst_shift = worst_shift.max(shift);
        }
    }
    assert!(worst_shift <= 0.02, "a similarity moved by {worst_shift}");
    eprintln!("int8: worst cosine to f32 {worst}, worst similarity shift {worst_shift}");
}
