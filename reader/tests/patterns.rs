//! Attention patterns on the parity fixtures: a pattern whose window covers the input gives
//! exactly the plain model's logits; a narrower one changes them; decoding through the KV
//! cache (with local layers' trimmed caches) equals one full pass.

use candle_core::{DType, Device, Tensor};
use capstan_reader::{AttentionPattern, Cache, Checkpoint};

mod common;
use common::fixture;

const FIXTURES: [&str; 3] = ["llama-abf-tiny", "llama-gqa-sharded", "llama-linear-rope"];

fn logits(dir: &str, pattern: &str, ids: &[u32]) -> Vec<Vec<f32>> {
    let path = fixture(dir);
    let ckpt = Checkpoint::open(&path).unwrap();
    let mut model = ckpt.load_model(&Device::Cpu, Some(DType::F32)).unwrap();
    model.set_attention(pattern.parse().unwrap()).unwrap();
    let mut cache = Cache::new(&model);
    let x = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let out = model.forward(&x, None, &mut cache).unwrap();
    out.squeeze(0).unwrap().to_vec2::<f32>().unwrap()
}

fn ids(dir: &str, n: usize) -> Vec<u32> {
    let path = fixture(dir);
    let vocab = Checkpoint::open(&path).unwrap().config().vocab_size as u32;
    (0..n as u32).map(|i| (i * 7919 + 13) % vocab).collect()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn covering_windows_give_the_plain_model() {
    for dir in FIXTURES {
        let n = 40;
        let input = ids(dir, n);
        let plain = logits(dir, "full", &input);
        for p in [
            "zebra:every=2,window=40",
            "selfextend:group=4,window=40",
            "scca:flow,chunk=40,groups=2",
            "scca:fixed,chunk=80",
        ] {
            let got = logits(dir, p, &input);
            let d = max_diff(&plain, &got);
            assert!(d < 1e-4, "{dir} {p}: differs from the plain model by {d}");
        }
        for p in [
            "zebra:every=2,window=8",
            "selfextend:group=4,window=8",
            "scca:flow,chunk=8,groups=2",
            "scca:fixed,chunk=8",
            "scca:sda,dilation=2",
        ] {
            let got = logits(dir, p, &input);
            assert!(max_diff(&plain, &got) > 1e-3, "{dir} {p}: no effect");
        }
    }
}

#[test]
fn decoding_through_the_cache_equals_one_pass() {
    // Long enough for the in-place cache to fill its first buffer (64 rows), compact the
    // windowed layers' rows to its front and grow the others, with a multi-token chunk between
    // single steps.
    let dir = "llama-gqa-sharded";
    let input = ids(dir, 150);
    for p in [
        "full",
        "zebra:every=2,window=6",
        "selfextend:group=3,window=5",
        "scca:fixed,chunk=8",
        "scca:flow,chunk=4,groups=2",
        "scca:mixed,chunk=8",
    ] {
        let whole = logits(dir, p, &input);
        let path = fixture(dir);
        let ckpt = Checkpoint::open(&path).unwrap();
        let mut model = ckpt.load_model(&Device::Cpu, Some(DType::F32)).unwrap();
        model.set_attention(p.parse().unwrap()).unwrap();
        // Both model paths: candle's ops, and the kernels the CUDA path runs (CPU references).
        for fused in [false, true] {
            model.set_fused_kernels(fused);
            let mut cache = Cache::new(&model);
            let mut steps = Vec::new();
            let first = 11;
            let x = Tensor::new(&input[..first], &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let out = model.forward(&x, None, &mut cache).unwrap();
            steps.extend(out.squeeze(0).unwrap().to_vec2::<f32>().unwrap());
            let chunks = input[first..60]
                .chunks(1)
                .chain([&input[60..100]])
                .chain(input[100..].chunks(1));
            for chunk in chunks {
                let x = Tensor::new(chunk, &Device::Cpu)
                    .unwrap()
                    .unsqueeze(0)
                    .unwrap();
                let out = model.forward(&x, None, &mut cache).unwrap();
                steps.extend(out.squeeze(0).unwrap().to_vec2::<f32>().unwrap());
            }
            let d = max_diff(&whole, &steps);
            assert!(
                d < 1e-4,
                "{p} (fused {fused}): decode differs from one pass by {d}"
            );
        }
    }
}

#[test]
fn patterns_parse_and_print() {
    for s in [
        "full",
        "zebra:every=4,window=512",
        "selfextend:group=4,window=64",
        "scca:fixed,chunk=1024",
        "scca:flow,chunk=1024,groups=4",
        "scca:sda,dilation=2",
        "scca:mixed,chunk=256",
    ] {
        let p: AttentionPattern = s.parse().unwrap();
        assert_eq!(p.to_string(), s);
    }
    assert_eq!(
        "scca:flow,chunk=1024".parse::<AttentionPattern>().unwrap(),
        "scca:flow,chunk=1024,groups=4".parse().unwrap()
    );
    for bad in [
        "zebra:every=x",
        "scca:chunk=4",
        "selfextend:group=2",
        "swa",
        "full:x=1",
    ] {
        assert!(bad.parse::<AttentionPattern>().is_err(), "{bad} parsed");
    }
}
