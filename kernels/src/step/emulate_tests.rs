//! The decoding step's plan run by the emulator against the CPU oracle.

use super::*;
use crate::step::{RandomModel, ReferenceStep, StepKvHost};
use crate::RopeParams;

fn model(dtype: DType, formats: [Option<GgmlDType>; 9], bias: bool) -> StepModel {
    let spec = RandomModel {
        dtype,
        formats,
        layers: 2,
        vocab: 300,
        qkv_bias: bias,
        rope: RopeParams::from_base(10_000.0, 64, 2.0),
    };
    StepModel::random(&spec, &Device::Cpu).unwrap()
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
    let mixed = RandomModel::MIXED_FORMATS;
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
