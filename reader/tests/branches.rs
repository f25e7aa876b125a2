//! Branches read after one cached prompt in one pass (`Llama::forward_branches`) compute what
//! each branch computes alone after the prompt, leave the cache as it was, and are refused
//! where they cannot be right.

use candle_core::{Device, Tensor};
use capstan_reader::{AttentionPattern, Cache, Llama};

mod common;
use common::load_f32;

const TOL: f32 = 1e-4;

/// Every row's logits of `tokens` read after what `cache` holds.
fn rows(model: &Llama, cache: &mut Cache, tokens: &[u32]) -> Vec<Vec<f32>> {
    let ids = Tensor::new(tokens, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    model
        .forward(&ids, None, cache)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap()
}

/// The rows of a branches pass after what `cache` holds.
fn branch_rows(model: &Llama, branches: &[&[u32]], cache: &mut Cache) -> Vec<Vec<f32>> {
    model
        .forward_branches(branches, cache)
        .unwrap()
        .to_vec2()
        .unwrap()
}

fn close(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Asserts that `got`, the rows of a branches pass, hold each branch's rows as it gives them
/// read alone after `prompt`.
fn each_as_read_alone(
    model: &Llama,
    prompt: &[u32],
    branches: &[&[u32]],
    got: &[Vec<f32>],
    name: &str,
) {
    let mut row = 0;
    for branch in branches {
        let mut alone = Cache::new(model);
        rows(model, &mut alone, prompt);
        for (j, want) in rows(model, &mut alone, branch).iter().enumerate() {
            let d = close(&got[row + j], want);
            assert!(d < TOL, "{name}: branch {branch:?} row {j} differs by {d}");
        }
        row += branch.len();
    }
}

#[test]
fn branches_equal_each_branch_read_alone_after_the_prompt() {
    for name in [
        "llama3-rope-tiny",
        "qwen2-tiny",
        "llama-abf-tiny",
        "llama-tied",
    ] {
        let model = load_f32(name);
        let v = model.config().vocab_size as u32;
        let prompt: Vec<u32> = (0..37).map(|i| (i * 7 + 3) % v).collect();
        let branches: Vec<Vec<u32>> = vec![
            vec![5 % v],
            (0..6).map(|i| (i * 11 + 1) % v).collect(),
            vec![9 % v, 9 % v, 4 % v],
        ];
        let mut cache = Cache::new(&model);
        rows(&model, &mut cache, &prompt);
        let slices: Vec<&[u32]> = branches.iter().map(Vec::as_slice).collect();
        let got = branch_rows(&model, &slices, &mut cache);
        assert_eq!(got.len(), branches.iter().map(Vec::len).sum::<usize>());
        assert_eq!(cache.seq_len(), prompt.len(), "{name}: the cache grew");
        each_as_read_alone(&model, &prompt, &slices, &got, name);
        // The cache reads on as if the branches had never been read.
        let next = [(2 * v / 3).max(3)];
        let mut fresh = Cache::new(&model);
        rows(&model, &mut fresh, &prompt);
        let want = rows(&model, &mut fresh, &next);
        let after = rows(&model, &mut cache, &next);
        assert!(
            close(&after[0], &want[0]) < TOL,
            "{name}: the cache changed"
        );
    }
}

#[test]
fn branches_sharing_a_prefix_equal_each_branch_read_alone() {
    // A prefix tree reads "4 8" once for the first three branches; each still gets its own
    // rows, as if read alone, whether its prefix is another branch, a part of one, or the
    // same branch twice.
    let model = load_f32("llama3-rope-tiny");
    let prompt: Vec<u32> = (0..21).map(|i| (i * 5 + 2) % 60).collect();
    let branches: Vec<&[u32]> = vec![&[4, 8, 15], &[4, 8], &[4, 9, 15], &[8, 4], &[4, 8, 15]];
    let mut cache = Cache::new(&model);
    rows(&model, &mut cache, &prompt);
    let got = branch_rows(&model, &branches, &mut cache);
    assert_eq!(got.len(), 13);
    each_as_read_alone(&model, &prompt, &branches, &got, "llama3-rope-tiny");
    assert_eq!(cache.seq_len(), prompt.len());
}

#[test]
fn branches_after_an_empty_cache_start_the_sequence() {
    let model = load_f32("llama3-rope-tiny");
    let branches: Vec<&[u32]> = vec![&[4, 8, 15], &[16, 23]];
    let mut cache = Cache::new(&model);
    let got = branch_rows(&model, &branches, &mut cache);
    assert_eq!(cache.seq_len(), 0);
    let alone = rows(&model, &mut Cache::new(&model), branches[1]);
    assert!(close(&got[3], &alone[0]) < TOL && close(&got[4], &alone[1]) < TOL);
}

#[test]
fn branches_are_refused_where_they_cannot_be_right() {
    let mut model = load_f32("llama3-rope-tiny");
    let mut cache = Cache::new(&model);
    assert!(model.forward_branches(&[], &mut cache).is_err());
    assert!(model.forward_branches(&[&[]], &mut cache).is_err());
    let v = model.config().vocab_size as u32;
    assert!(model.forward_branches(&[&[v]], &mut cache).is_err());
    // Two rows in the cache: which one would the branches follow?
    let two = Tensor::new(&[[3u32, 4], [5, 6]], &Device::Cpu).unwrap();
    model.forward(&two, None, &mut cache).unwrap();
    assert!(model.forward_branches(&[&[7]], &mut cache).is_err());
    // A windowed layer forgets keys a branch needs.
    model
        .set_attention(AttentionPattern::Zebra {
            every: 2,
            window: 4,
        })
        .unwrap();
    assert!(model
        .forward_branches(&[&[7]], &mut Cache::new(&model))
        .is_err());
}
