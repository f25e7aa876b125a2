//! The decoding step's plan run by the emulator against the CPU oracle.

use super::*;
use crate::step::{ReferenceStep, StepDims, StepKvHost, StepLayer};
use crate::RopeParams;

fn model(dtype: DType, formats: [Option<GgmlDType>; 9], bias: bool) -> StepModel {
    let dims = StepDims {
        hidden: 256,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        intermediate: 512,
        vocab: 300,
        eps: 1e-5,
    };
    let matrix = |rows: usize, cols: usize, which: usize| {
        let w = (Tensor::rand(-1f32, 1.0, (rows, cols), &Device::Cpu).unwrap()
            * (1.7 / (cols as f64).sqrt()))
        .unwrap();
        match formats[which] {
            None => StepMatrix::Dense(w.to_dtype(dtype).unwrap()),
            Some(q) => StepMatrix::Ggml {
                dtype: q,
                rows,
                cols,
                bytes: QTensor::quantize(&w, q)
                    .unwrap()
                    .data()
                    .unwrap()
                    .into_owned()
                    .into(),
            },
        }
    };
    let norm = || {
        Tensor::rand(0.8f32, 1.2, 256, &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let bias_of = |n: usize| {
        Tensor::rand(-0.5f32, 0.5, n, &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let layers = (0..2)
        .map(|_| StepLayer {
            attn_norm: norm(),
            q: matrix(256, 256, 0),
            k: matrix(128, 256, 1),
            v: matrix(128, 256, 2),
            qkv_bias: bias.then(|| [bias_of(256), bias_of(128), bias_of(128)]),
            o: matrix(256, 256, 3),
            mlp_norm: norm(),
            gate: matrix(512, 256, 4),
            up: matrix(512, 256, 5),
            down: matrix(256, 512, 6),
        })
        .collect();
    StepModel {
        dims,
        rope: RopeParams::from_base(10_000.0, 64, 2.0),
        embed: matrix(300, 256, 7),
        layers,
        norm: norm(),
        lm_head: matrix(300, 256, 8),
    }
}

/// Steps from an empty cache through the plan, the caches moving to larger buffers at
/// step 40 (capacity 40, then 700: keys split several ways), against the oracle.
fn check(m: &StepModel, tol: f32) {
    let reference = ReferenceStep::new(m).unwrap();
    let mut mem = Memory::new();
    let layout = lay_out(m, &mut mem);
    let mut emu = Emulator {
        mem,
        decoded: HashMap::new(),
    };
    let t = layout.suffix;
    let elem = m.dtype().size_in_bytes();
    let d = m.dims;
    let per_head = |cap: usize| cap * d.head_dim * elem;
    let alloc = |emu: &mut Emulator, cap: usize| {
        (0..m.layers.len())
            .map(|_| {
                (
                    emu.mem.alloc(d.kv_heads * per_head(cap)),
                    emu.mem.alloc(d.kv_heads * per_head(cap)),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut cap = 40;
    let mut caches = alloc(&mut emu, cap);
    let mut host = vec![StepKvHost::default(); m.layers.len()];
    let mut seen_splits = std::collections::BTreeSet::new();
    for pos in 0..60usize {
        if pos == 40 {
            let bigger = alloc(&mut emu, 700);
            for (old, new) in caches.iter().zip(&bigger) {
                for (o, n) in [(old.0, new.0), (old.1, new.1)] {
                    for kh in 0..d.kv_heads {
                        let rows = emu
                            .mem
                            .read(o + (kh * per_head(cap)) as u64, 40 * d.head_dim * elem)
                            .to_vec();
                        emu.mem.write(n + (kh * per_head(700)) as u64, &rows);
                    }
                }
            }
            (caches, cap) = (bigger, 700);
        }
        let key = CacheKey::new(caches.iter().map(|&(k, v)| (k, v, cap)).collect(), d.heads);
        seen_splits.insert(key.splits);
        let b = layout.buf;
        let token = ((pos * 7919 + 5) % d.vocab) as u32;
        emu.write_inputs(&b, &key, token, pos, pos);
        emu.run(&layout.plan(&key));
        let got = emu.mem.f32s(b.logits, d.vocab);
        let want = reference.step(token, pos, &mut host).unwrap();
        let scale = want.iter().fold(1f32, |a, x| a.max(x.abs()));
        let diff = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs() / scale)
            .fold(0f32, f32::max);
        assert!(
            diff <= tol,
            "{t}, position {pos}: {diff} of the largest logit"
        );
    }
    assert!(
        seen_splits.len() == 2 && seen_splits.contains(&1),
        "{seen_splits:?}"
    );
}

#[test]
fn the_plan_computes_what_the_oracle_computes() {
    use GgmlDType as G;
    let mixed = [
        Some(G::Q4_0),
        Some(G::Q8_0),
        Some(G::Q6K),
        Some(G::Q4K),
        Some(G::Q5_0),
        Some(G::Q5_1),
        Some(G::Q4_1),
        Some(G::Q8_0),
        Some(G::Q6K),
    ];
    // f32: the plan computes the oracle's arithmetic (up to summation order); bf16 and
    // f16: a value rounded one way or the other (attention's split ranges sum in another
    // order) moves a logit by a few thousandths.
    for (dtype, tol) in [(DType::F32, 2e-5), (DType::BF16, 1e-2), (DType::F16, 1e-2)] {
        // Dense with q/k/v biases (one stacked product), and mixed formats (three
        // products; gate and up apart, then SwiGLU).
        check(&model(dtype, [None; 9], true), tol);
        check(&model(dtype, mixed, false), tol);
    }
}

#[test]
fn a_wrong_argument_in_the_plan_is_caught() {
    let m = model(DType::F32, [None; 9], false);
    let reference = ReferenceStep::new(&m).unwrap();
    let mut mem = Memory::new();
    let layout = lay_out(&m, &mut mem);
    let mut emu = Emulator {
        mem,
        decoded: HashMap::new(),
    };
    let d = m.dims;
    let kc = emu.mem.alloc(2 * 64 * 64 * 4);
    let vc = emu.mem.alloc(2 * 64 * 64 * 4);
    let kc2 = emu.mem.alloc(2 * 64 * 64 * 4);
    let vc2 = emu.mem.alloc(2 * 64 * 64 * 4);
    let key = CacheKey::new(vec![(kc, vc, 64), (kc2, vc2, 64)], d.heads);
    assert_eq!(key.splits, 1);
    let b = layout.buf;
    let mut host = vec![StepKvHost::default(); 2];
    let mut worst = 0f32;
    for pos in 0..3 {
        emu.write_inputs(&b, &key, 3, pos, pos);
        let mut plan = layout.plan(&key);
        // Attention reads the cache row's index (StepState's third int) as the key count:
        // one key short, a plan bug.
        for l in &mut plan {
            if l.name.starts_with("capstan_attention_decode_") {
                if let Arg::Ptr(p) = &mut l.args[3] {
                    *p -= 4;
                }
            }
        }
        emu.run(&plan);
        let got = emu.mem.f32s(b.logits, d.vocab);
        let want = reference.step(3, pos, &mut host).unwrap();
        worst = worst.max(
            got.iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0f32, f32::max),
        );
    }
    let diff = worst;

    assert!(
        diff > 1e-3,
        "attention one key short went unnoticed ({diff})"
    );
}
