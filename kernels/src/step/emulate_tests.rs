//! The decoding step's plan run by the emulator against the CPU oracle.

use super::*;
use crate::step::{RandomModel, RandomShape, ReferenceStep, StepKvHost};
use crate::RopeParams;

/// Largest logit difference, relative to the largest logit, of a step whose products ran on
/// TF32 tensor cores.
const TF32_TOL: f32 = 5e-3;
/// bf16 activations over 16 to 18 sequences and 60 steps through the CUDA sources: the worst
/// logit moved by 0.0067–0.0100 of the largest over four draws of the weights before a batch's
/// norms were folded, 0.0078–0.0092 after (1e-2 failed now and then); 0.0090 with the fixed
/// seed the random models now have.
const BF16_BATCH_TOL: f32 = 1.5e-2;

fn model(dtype: DType, formats: [Option<GgmlDType>; 9], bias: bool) -> StepModel {
    shaped(RandomShape::SMALL, dtype, formats, bias)
}

fn shaped(
    shape: RandomShape,
    dtype: DType,
    formats: [Option<GgmlDType>; 9],
    bias: bool,
) -> StepModel {
    let spec = RandomModel {
        shape,
        dtype,
        formats,
        layers: 2,
        vocab: 300,
        qkv_bias: bias,
        rope: RopeParams::from_base(10_000.0, shape.head_dim, 2.0),
    };
    StepModel::random(&spec, &Device::Cpu).unwrap()
}

/// One sequence of the emulated batch: its caches (per layer: keys, values) of `cap` rows a
/// head, its host caches for the oracle, and how many tokens it has decoded.
struct Seq {
    caches: Vec<(u64, u64)>,
    cap: usize,
    host: Vec<StepKvHost>,
    len: usize,
    id: usize,
}

/// Sequences decoding together through the plan from empty caches, each against its own run
/// of the oracle: a batch that changes as sequences join (steps 10 and 20) and leave (steps 30
/// and 45)
/// — one sequence alone runs the single-sequence products, more the batched ones — and every
/// cache moving to a larger buffer at step 40 (capacity 40, then 700: keys split several
/// ways). Tokens differ by sequence and position. `extra` more sequences decode from the
/// first step to the last (15: batches of 16, 17 and 18, one and two passes of the batched
/// products).
fn check(m: &StepModel, tol: f32, runner: Runner, extra: usize) {
    let reference = ReferenceStep::new(m).unwrap();
    let mut mem = Memory::new();
    let layout = lay_out(m, &mut mem, 3 + extra);
    let mut emu = Emulator::new(mem, runner);
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
    let fresh = |emu: &mut Emulator, id: usize| Seq {
        caches: alloc(emu, 40),
        cap: 40,
        host: vec![StepKvHost::default(); m.layers.len()],
        len: 0,
        id,
    };
    let mut seqs: Vec<Seq> = (0..1 + extra)
        .map(|i| fresh(&mut emu, if i == 0 { 0 } else { 2 + i }))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for step in 0..60usize {
        match step {
            10 | 20 => {
                let s = fresh(&mut emu, step / 10);
                seqs.push(s);
            }
            // Back to one sequence after the move, for one sequence's own plan (its norms
            // folded into the products) with the keys split.
            30 | 45 => {
                seqs.remove(1);
            }
            40 => {
                for s in &mut seqs {
                    let bigger = alloc(&mut emu, 700);
                    for (old, new) in s.caches.iter().zip(&bigger) {
                        for (o, n) in [(old.0, new.0), (old.1, new.1)] {
                            for kh in 0..d.kv_heads {
                                let rows = emu
                                    .mem
                                    .read(
                                        o + (kh * per_head(s.cap)) as u64,
                                        s.len * d.head_dim * elem,
                                    )
                                    .to_vec();
                                emu.mem.write(n + (kh * per_head(700)) as u64, &rows);
                            }
                        }
                    }
                    (s.caches, s.cap) = (bigger, 700);
                }
            }
            _ => {}
        }
        let tables = CacheTables::new(
            seqs.iter()
                .map(|s| s.caches.iter().map(|&(k, v)| (k, v, s.cap)).collect())
                .collect(),
            layout.decode_blocks(),
        );
        seen.insert(tables.shape());
        let token = |s: &Seq| ((s.len * 7919 + 5 + 131 * s.id) % d.vocab) as u32;
        let states: Vec<SeqState> = seqs
            .iter()
            .map(|s| SeqState {
                token: token(s),
                pos: s.len,
                len: s.len,
            })
            .collect();
        let b = layout.buf;
        emu.write_inputs(&b, &tables, &states);
        emu.run(&layout.plan(tables.shape()));
        for (i, s) in seqs.iter_mut().enumerate() {
            let got = emu.mem.f32s(b.logits + (4 * i * d.vocab) as u64, d.vocab);
            let want = reference.step(token(s), s.len, &mut s.host).unwrap();
            let scale = want.iter().fold(1f32, |a, x| a.max(x.abs()));
            let diff = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs() / scale)
                .fold(0f32, f32::max);
            assert!(
                diff <= tol,
                "{t}, step {step}, sequence {} of {}: {diff} of the largest logit",
                s.id,
                tables.batch()
            );
            s.len += 1;
        }
    }
    let batches: std::collections::BTreeSet<usize> = seen.iter().map(|x| x.0).collect();
    let splits: std::collections::BTreeSet<usize> = seen.iter().map(|x| x.1).collect();
    assert_eq!(
        batches,
        [1 + extra, 2 + extra, 3 + extra].into(),
        "{seen:?}"
    );
    assert!(splits.len() == 2 && splits.contains(&1), "{seen:?}");
    // One sequence decoded with its keys in one range and split.
    assert!(
        seen.iter().filter(|x| x.0 == 1 + extra).count() == 2,
        "{seen:?}"
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
        check(&model(dtype, [None; 9], true), tol, Runner::Emulation, 0);
        check(&model(dtype, mixed, false), tol, Runner::Emulation, 0);
    }
}

#[test]
fn a_wrong_argument_in_the_plan_is_caught() {
    let runner = Runner::Emulation;
    let m = model(DType::F32, [None; 9], false);
    let reference = ReferenceStep::new(&m).unwrap();
    let mut mem = Memory::new();
    let layout = lay_out(&m, &mut mem, 1);
    let mut emu = Emulator::new(mem, runner);
    let d = m.dims;
    let kc = emu.mem.alloc(2 * 64 * 64 * 4);
    let vc = emu.mem.alloc(2 * 64 * 64 * 4);
    let kc2 = emu.mem.alloc(2 * 64 * 64 * 4);
    let vc2 = emu.mem.alloc(2 * 64 * 64 * 4);
    let tables = CacheTables::new(
        vec![vec![(kc, vc, 64), (kc2, vc2, 64)]],
        layout.decode_blocks(),
    );
    assert_eq!(tables.shape(), (1, 1));
    let b = layout.buf;
    let mut host = vec![StepKvHost::default(); 2];
    let mut worst = 0f32;
    for pos in 0..3 {
        let state = SeqState {
            token: 3,
            pos,
            len: pos,
        };
        emu.write_inputs(&b, &tables, &[state]);
        let mut plan = layout.plan(tables.shape());
        // Attention reads the cache row's index (the state's third field) as the key count:
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
    assert!(
        worst > 1e-3,
        "attention one key short went unnoticed ({worst})"
    );
}

/// The CUDA C sources themselves (decode_step.cu, its GGML modules, attention_decode.cu),
/// compiled for the host, run the plan against the oracle: the emulation above checks the
/// plan, this checks the kernels' own code (indexing, loops, the batched products' passes,
/// split ranges and their merge, the roundings) as a GPU would run it, short of timing.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cuda_sources_compute_what_the_oracle_computes() {
    let mixed = RandomModel::MIXED_FORMATS;
    for (dtype, tol) in [(DType::F32, 2e-5), (DType::BF16, 1e-2), (DType::F16, 1e-2)] {
        check(&model(dtype, [None; 9], true), tol, Runner::CudaSource, 0);
        // f32 activations: a batch's single-format GGML products (o, down, output) on TF32.
        let ggml_tol = if dtype == DType::F32 { TF32_TOL } else { tol };
        check(&model(dtype, mixed, false), ggml_tol, Runner::CudaSource, 0);
    }
}

/// The same with 16 to 18 sequences: the batched products' second pass (bf16 weights: the
/// tensor-core products' second group of 16).
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cuda_sources_decode_a_batch_of_two_passes() {
    check(
        &model(DType::F32, [None; 9], true),
        2e-5,
        Runner::CudaSource,
        15,
    );
    check(
        &model(DType::BF16, [None; 9], true),
        BF16_BATCH_TOL,
        Runner::CudaSource,
        15,
    );
    check(
        &model(DType::BF16, RandomModel::MIXED_FORMATS, false),
        BF16_BATCH_TOL,
        Runner::CudaSource,
        15,
    );
}

/// A batch's products of GGML weights on f32 activations through the CUDA source's TF32
/// tensor-core path (inputs and weights rounded to 10 fraction bits: a logit moves by about a
/// thousandth of the largest), one and two passes of 16 sequences.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cuda_sources_decode_ggml_batches_on_tensor_cores() {
    for formats in [RandomModel::GROUPED_FORMATS, RandomModel::MIXED_FORMATS] {
        check(
            &model(DType::F32, formats, false),
            TF32_TOL,
            Runner::CudaSource,
            15,
        );
    }
}

/// The same plans with the blocks and the threads between barriers taking their turns reversed
/// and shuffled (`host_kernels::Schedule`): a race in the step's kernels — a read of shared or
/// global memory another thread writes with no barrier between — would read another value
/// here. Results are compared with the oracle, not bit for bit across schedules: the norms'
/// sums of squares are atomic adds of floats, whose order moves the last bits.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cuda_sources_compute_the_same_in_any_order_of_turns() {
    use crate::host_kernels::{with_schedule, Schedule};
    let grouped = model(DType::F32, RandomModel::GROUPED_FORMATS, false);
    with_schedule(Schedule::Reversed, || {
        check(
            &model(DType::F32, [None; 9], true),
            2e-5,
            Runner::CudaSource,
            0,
        );
        check(&grouped, TF32_TOL, Runner::CudaSource, 15);
    });
    with_schedule(Schedule::Shuffled(0x5eed), || {
        let mixed = model(DType::BF16, RandomModel::MIXED_FORMATS, false);
        check(&mixed, BF16_BATCH_TOL, Runner::CudaSource, 15);
        check(
            &model(DType::F32, RandomModel::MIXED_FORMATS, false),
            TF32_TOL,
            Runner::CudaSource,
            0,
        );
    });
}

/// SmolLM2-135M's widths and formats (Q4_1 matrices, a Q8_0 embedding tied to the output
/// layer) through the CUDA sources: 9 query heads over 3 (RoPE pairs and grouped heads not
/// powers of two), a residual of 18 GGML units; one sequence, then batches on tensor cores.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cuda_sources_decode_a_smollm2_shaped_model() {
    let q = Some(GgmlDType::Q4_1);
    let e = Some(GgmlDType::Q8_0);
    let formats = [q, q, q, q, q, q, q, e, e];
    let m = shaped(RandomShape::SMOLLM2, DType::F32, formats, false);
    check(&m, TF32_TOL, Runner::CudaSource, 15);
}

/// Heads 128 wide, four query heads over one key head (Llama 3's), through the CUDA sources:
/// RoPE pairs 64 apart, attention's lanes four values each, one sequence and batches on tensor
/// cores (16 to 18 sequences: two passes); bf16, and a Q4_K_M file's formats (Q4_K, with v and
/// down in Q6_K, the output layer Q6_K) on f32 activations.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cuda_sources_decode_heads_128_wide() {
    let m = shaped(RandomShape::LLAMA3_HEADS, DType::BF16, [None; 9], false);
    check(&m, BF16_BATCH_TOL, Runner::CudaSource, 15);
    let (k4, k6) = (Some(GgmlDType::Q4K), Some(GgmlDType::Q6K));
    let q4_k_m = [k4, k4, k6, k4, k4, k4, k6, k4, k6];
    let m = shaped(RandomShape::LLAMA3_HEADS, DType::F32, q4_k_m, false);
    check(&m, TF32_TOL, Runner::CudaSource, 15);
}

/// A batch's GGML products on f32 activations run on tensor cores, each in its format's
/// module; not on a device without them, nor on 16-bit activations.
#[test]
fn a_batch_of_ggml_products_runs_on_tensor_cores() {
    let m = model(DType::F32, RandomModel::GROUPED_FORMATS, false);
    let mut mem = Memory::new();
    let layout = lay_out(&m, &mut mem, 3);
    let l = m.layers.len();
    for x in mma_launches(&layout, 3) {
        let format = x.name.trim_start_matches("capstan_step_gemv_mma_");
        let format = format.trim_start_matches("norm_");
        assert_eq!(format!("decode_step_{format}"), format!("{}_f32", x.module));
    }
    let mma = |layout: &Layout, batch| mma_launches(layout, batch).len();
    assert_tensor_cores_for_batches(&layout, l);
    let m16 = model(DType::BF16, RandomModel::GROUPED_FORMATS, false);
    let layout16 = lay_out(&m16, &mut mem, 3);
    assert_eq!(mma(&layout16, 3), 0);
}

/// The launches of a step, with q/k/v and gate/up each of one format: the norms live in the
/// products, RoPE and the cache append in the q/k/v products' epilogue, and attention merges
/// its own splits (five a layer), for one sequence and for a batch on tensor cores; a batch on
/// CUDA cores has its norms as launches of their own (seven).
#[test]
fn one_sequence_decodes_in_five_launches_a_layer() {
    for m in [
        model(DType::BF16, [None; 9], false),
        model(DType::F32, RandomModel::GROUPED_FORMATS, false),
    ] {
        let mut mem = Memory::new();
        let layout = lay_out(&m, &mut mem, 3);
        let older = Layout {
            tensor_cores: false,
            ..layout.clone()
        };
        let l = m.layers.len();
        for splits in [1, 4] {
            assert_eq!(layout.plan((1, splits)).len(), 2 + 5 * l);
            assert_eq!(layout.plan((3, splits)).len(), 2 + 5 * l);
            assert_eq!(older.plan((3, splits)).len(), 3 + 7 * l);
        }
        assert_tensor_cores_for_batches(&layout, l);
        // Every product reading a norm normalises its batch's inputs.
        let normed = mma_launches(&layout, 3)
            .iter()
            .filter(|x| x.name.starts_with("capstan_step_gemv_mma_norm_"))
            .count();
        assert_eq!(normed, 2 * l + 1, "{}", layout.suffix);
    }
}

/// The tensor-core products of one step of `batch` sequences.
fn mma_launches(layout: &Layout, batch: usize) -> Vec<Launch> {
    layout
        .plan((batch, 1))
        .into_iter()
        .filter(|x| x.name.starts_with("capstan_step_gemv_mma_"))
        .collect()
}

/// A batch's products (q/k/v, output, gate/up, down a layer, then the output layer) run on
/// tensor cores, one sequence's do not, and a device without them keeps the CUDA-core
/// products.
fn assert_tensor_cores_for_batches(layout: &Layout, layers: usize) {
    let mma = |layout: &Layout, batch| mma_launches(layout, batch).len();
    assert_eq!((mma(layout, 1), mma(layout, 3)), (0, 4 * layers + 1));
    let older = Layout {
        tensor_cores: false,
        ..layout.clone()
    };
    assert_eq!(mma(&older, 3), 0);
}
