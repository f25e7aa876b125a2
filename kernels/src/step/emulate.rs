//! The decoding step's launch plan ([`super::plan`]) run on the host: device memory as host
//! regions at made-up addresses (every write bounds-checked against its region), each entry
//! point of decode_step.cu and attention_decode.cu written out as its kernel computes it
//! (attention's split ranges and their merge included). Against the CPU oracle this tests,
//! without a GPU, what the CUDA step launches: the order, the buffers and their sizes, the
//! offsets into them, every argument.

use std::borrow::Cow;
use std::collections::HashMap;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device};

use super::buffers::{f32_bytes, state_bytes, BufferAddrs, CacheTables, SeqState};
use super::decode_grid::DecodeKernel;
use super::plan::{Arg, DecodeArgs, Launch, Layout, RopeArgs};
use super::{StepMatrix, StepModel};
use crate::host_memory::{elem_bytes, round_to, tensor_bytes, Memory};

fn ggml_type(format: &str) -> Option<GgmlDType> {
    Some(match format {
        "q4_0" => GgmlDType::Q4_0,
        "q4_1" => GgmlDType::Q4_1,
        "q5_0" => GgmlDType::Q5_0,
        "q5_1" => GgmlDType::Q5_1,
        "q8_0" => GgmlDType::Q8_0,
        "q4k" => GgmlDType::Q4K,
        "q6k" => GgmlDType::Q6K,
        _ => return None,
    })
}

/// What runs each launch of a plan on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    /// Each entry point as written out here.
    Emulation,
    /// The CUDA C entry point itself, compiled for the host ([`crate::host_kernels`]).
    CudaSource,
}

/// The host executor of launch plans.
struct Emulator {
    mem: Memory,
    runner: Runner,
    /// Matrices decoded once: (address, format, rows) -> rows of f32.
    decoded: HashMap<(u64, String, usize), Vec<f32>>,
}

fn ptr(a: &Arg) -> u64 {
    match a {
        Arg::Ptr(p) => *p,
        other => panic!("expected an address, got {other:?}"),
    }
}

fn int(a: &Arg) -> i64 {
    match a {
        Arg::I32(x) => *x as i64,
        Arg::I64(x) => *x,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn float(a: &Arg) -> f32 {
    match a {
        Arg::F32(x) => *x,
        other => panic!("expected a float, got {other:?}"),
    }
}

impl Emulator {
    fn new(mem: Memory, runner: Runner) -> Self {
        Self {
            mem,
            runner,
            decoded: HashMap::new(),
        }
    }

    /// What `DecodeStep::step_many` writes before its launches: the cache tables and the
    /// state.
    fn write_inputs(&mut self, b: &BufferAddrs, tables: &CacheTables, seqs: &[SeqState]) {
        for (at, bytes) in [b.kptr, b.vptr, b.caps].into_iter().zip(tables.tables()) {
            self.mem.write(at, &bytes);
        }
        self.mem.write(b.state, &state_bytes(seqs));
    }

    /// `rows` rows of `cols` values of a matrix of `format` at `addr`, `row_bytes` apart.
    fn rows(
        &mut self,
        format: &str,
        addr: u64,
        rows: usize,
        cols: usize,
        row_bytes: usize,
    ) -> &[f32] {
        let key = (addr, format.to_string(), rows);
        if !self.decoded.contains_key(&key) {
            let bytes = self.mem.read(addr, rows * row_bytes).to_vec();
            let values = match ggml_type(format) {
                Some(t) => {
                    let s = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, t).unwrap();
                    QTensor::new(s, (rows, cols))
                        .unwrap()
                        .dequantize(&Device::Cpu)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap()
                }
                None => self.mem.floats(format, addr, rows * cols),
            };
            self.decoded.insert(key.clone(), values);
        }
        &self.decoded[&key]
    }

    fn run(&mut self, plan: &[Launch]) {
        for l in plan {
            let name = l.name.as_str();
            let a = &l.args;
            let gemv = name
                .strip_prefix("capstan_step_gemv_batch_")
                .or_else(|| name.strip_prefix("capstan_step_gemv_mma_norm_"))
                .or_else(|| name.strip_prefix("capstan_step_gemv_mma_"))
                .or_else(|| name.strip_prefix("capstan_step_gemv_norm_"))
                .or_else(|| name.strip_prefix("capstan_step_gemv_"));
            let format = name
                .strip_prefix("capstan_step_embed_")
                .or_else(|| gemv.map(|r| r.rsplit_once('_').unwrap().0));
            check_module(l.module, format);
            if self.runner == Runner::CudaSource {
                run_cuda_source(l);
                continue;
            }
            // Kernels with a block row a sequence (grid y) are given the batch too.
            let rows = l.grid.1 as usize;
            if let Some(fmt) = name.strip_prefix("capstan_step_embed_") {
                assert_eq!(rows as i64, int(&a[4]), "{name}: a block row a sequence");
                for s in 0..rows {
                    self.embed(fmt, a, s);
                }
            } else if let Some(t) = name.strip_prefix("capstan_step_rmsnorm_") {
                self.rms_norm(t, a, l.grid.0 as usize);
            } else if let Some(rest) = gemv {
                let (fmt, t) = rest.rsplit_once('_').unwrap();
                let Arg::Gemv(g) = a[13] else {
                    panic!("gemv without its arguments")
                };
                // The batched entry points serve batches of more than one sequence; of those
                // on CUDA cores, only one sequence's normalise their input.
                let tensor_cores = name.contains("_mma_");
                let batched = name.contains("_batch_") || tensor_cores;
                assert_eq!(batched, g.batch > 1, "{name}");
                let normed = name.contains("_norm_");
                assert_eq!(normed, ptr(&a[9]) != 0, "{name}: the sums of squares");
                assert!(!normed || g.batch == 1 || tensor_cores, "{name}");
                assert!(
                    g.batch == 1 || tensor_cores || ptr(&a[11]) == 0,
                    "{name}: a batch's squares on CUDA cores"
                );
                for s in 0..g.batch as usize {
                    self.gemv(fmt, t, a, s, normed);
                }
            } else if let Some(t) = name.strip_prefix("capstan_step_rope_append_") {
                assert_eq!(rows as i64, int(&a[3]), "{name}: a block row a sequence");
                for s in 0..rows {
                    self.rope_append(t, a, s);
                }
            } else if let Some(t) = name.strip_prefix("capstan_step_swiglu_") {
                let n = int(&a[3]) as usize;
                let g = self.mem.f32s(ptr(&a[0]), n);
                let u = self.mem.f32s(ptr(&a[1]), n);
                let out: Vec<f32> = g
                    .iter()
                    .zip(&u)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                self.mem.put_floats(t, ptr(&a[2]), &out);
            } else if let Some(t) = name.strip_prefix("capstan_attention_decode_") {
                // Both kernels compute the same rows; the grid says which blocks take them.
                let Arg::Decode(d) = a[8] else {
                    panic!("{name} without its arguments")
                };
                let (heads, kv_heads) = (d.heads as usize, d.kv_heads as usize);
                let (kernel, t) = if let Some(t) = t.strip_prefix("gqa_") {
                    (DecodeKernel::Grouped, t)
                } else if let Some(t) = t.strip_prefix("mma_") {
                    (DecodeKernel::TensorCores, t)
                } else {
                    (DecodeKernel::PerHead, t)
                };
                assert_eq!(
                    l.grid.0 as usize,
                    kernel.blocks(heads, kv_heads),
                    "{name}: grid x"
                );
                assert_eq!(
                    l.shared,
                    kernel.shared_bytes(d.dim as usize),
                    "{name}: shared"
                );
                for s in 0..rows {
                    self.attention(t, a, l.grid.2 as usize, s);
                }
            } else {
                panic!("no emulation of {name}");
            }
        }
    }

    /// Sequence `s`'s embedding row.
    fn embed(&mut self, fmt: &str, a: &[Arg], s: usize) {
        let (table, row_bytes, cols) = (ptr(&a[0]), int(&a[1]) as usize, int(&a[2]) as usize);
        let token = self.mem.i32(ptr(&a[3]) + 4 * s as u64) as u64;
        let row = self
            .rows(fmt, table + token * row_bytes as u64, 1, cols, row_bytes)
            .to_vec();
        self.mem.put_f32s(ptr(&a[5]) + (4 * s * cols) as u64, &row);
        // The sums of squares: the first slot the row's, the others zeroed.
        let (ss, slots, batch) = (ptr(&a[6]), int(&a[7]) as usize, int(&a[4]) as usize);
        if ss != 0 {
            for k in 0..slots {
                let v = if k == 0 {
                    row.iter().map(|x| x * x).sum()
                } else {
                    0.0
                };
                self.mem.put_f32s(ss + (4 * (k * batch + s)) as u64, &[v]);
            }
        }
    }

    /// Every sequence's RMSNorm, a block each.
    fn rms_norm(&mut self, t: &str, a: &[Arg], batch: usize) {
        let dim = int(&a[3]) as usize;
        let elem = elem_bytes(t);
        for s in 0..batch {
            let x = self.mem.f32s(ptr(&a[0]) + (4 * s * dim) as u64, dim);
            let w = self.mem.floats(t, ptr(&a[1]), dim);
            let ss: f32 = x.iter().map(|v| v * v).sum();
            let inv = 1.0 / (ss / dim as f32 + float(&a[4])).sqrt();
            let out: Vec<f32> = x.iter().zip(&w).map(|(x, w)| x * inv * w).collect();
            self.mem
                .put_floats(t, ptr(&a[2]) + (elem * s * dim) as u64, &out);
        }
    }

    /// Sequence `s`'s products (`normed`: of the residual, normalised as it is read).
    fn gemv(&mut self, fmt: &str, t: &str, a: &[Arg], s: usize, normed: bool) {
        let Arg::Gemv(g) = a[13] else {
            panic!("gemv without its arguments")
        };
        let cols = g.cols as usize;
        let elem = elem_bytes(t);
        let x = if normed {
            let x = self.mem.f32s(ptr(&a[6]) + (4 * s * cols) as u64, cols);
            let w = self.mem.floats(t, ptr(&a[10]), cols);
            let ss = self.mem.f32s(ptr(&a[9]) + 4 * s as u64, 1)[0];
            let inv = 1.0 / (ss / cols as f32 + g.eps).sqrt();
            x.iter()
                .zip(&w)
                .map(|(x, w)| round_to(t, x * inv * w))
                .collect()
        } else {
            self.mem
                .floats(t, ptr(&a[6]) + (elem * s * cols) as u64, cols)
        };
        let stride = s as u64 * g.out_stride as u64;
        let (out_f32, out_t) = (ptr(&a[7]) + 4 * stride, ptr(&a[8]) + elem as u64 * stride);
        let rows = [g.rows0 as usize, g.rows1 as usize, g.rows2 as usize];
        let rb = g.row_bytes as usize;
        let dot = |w: &[f32], r: usize| -> f32 {
            w[r * cols..][..cols]
                .iter()
                .zip(&x)
                .map(|(a, b)| a * b)
                .sum()
        };
        if g.mode == 2 {
            let gate = self.rows(fmt, ptr(&a[0]), rows[0], cols, rb).to_vec();
            let up = self.rows(fmt, ptr(&a[1]), rows[0], cols, rb).to_vec();
            let out: Vec<f32> = (0..rows[0])
                .map(|r| {
                    let (g, u) = (dot(&gate, r), dot(&up, r));
                    g / (1.0 + (-g).exp()) * u
                })
                .collect();
            self.mem.put_floats(t, out_t, &out);
            return;
        }
        let mut out = Vec::new();
        for (j, &n) in rows.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let w = self.rows(fmt, ptr(&a[j]), n, cols, rb).to_vec();
            let bias = match ptr(&a[3 + j]) {
                0 => vec![0f32; n],
                b => self.mem.f32s(b, n),
            };
            out.extend((0..n).map(|r| dot(&w, r) + bias[r]));
        }
        if g.mode == 3 {
            let Arg::Rope(r) = a[12] else {
                panic!("RoPE's products without RoPE's arguments")
            };
            self.rope(t, &r, ptr(&a[8]), &out, s);
            return;
        }
        if g.mode == 1 {
            let prev = self.mem.f32s(out_f32, out.len());
            out.iter_mut().zip(prev).for_each(|(o, p)| *o += p);
            let ss_out = ptr(&a[11]);
            if ss_out != 0 {
                let at = ss_out + 4 * s as u64;
                let total = self.mem.f32s(at, 1)[0] + out.iter().map(|x| x * x).sum::<f32>();
                self.mem.put_f32s(at, &[total]);
            }
        }
        self.mem.put_f32s(out_f32, &out);
    }

    /// Sequence `s`'s RoPE and cache append, its f32 q, k and v from the qkv buffer.
    fn rope_append(&mut self, t: &str, a: &[Arg], s: usize) {
        let r = RopeArgs {
            inv_freq: ptr(&a[1]),
            st: ptr(&a[2]),
            kt: ptr(&a[5]),
            vt: ptr(&a[6]),
            caps: ptr(&a[7]),
            batch: int(&a[3]) as i32,
            heads: int(&a[8]) as i32,
            kv_heads: int(&a[9]) as i32,
            dim: int(&a[10]) as i32,
            factor: float(&a[11]),
        };
        let width = ((r.heads + 2 * r.kv_heads) * r.dim) as usize;
        let qkv = self.mem.f32s(ptr(&a[0]) + (4 * s * width) as u64, width);
        self.rope(t, &r, ptr(&a[4]), &qkv, s);
    }

    /// RoPE and the cache append of sequence `s`'s f32 q, k and v (`qkv`), q into `q`.
    fn rope(&mut self, t: &str, r: &RopeArgs, q: u64, qkv: &[f32], s: usize) {
        let (heads, kv_heads, dim) = (r.heads as usize, r.kv_heads as usize, r.dim as usize);
        let half = dim / 2;
        let (batch, s64) = (r.batch as u64, s as u64);
        let (pos, slot) = (
            self.mem.i32(r.st + 4 * (batch + s64)) as f32,
            self.mem.i32(r.st + 4 * (2 * batch + s64)) as u64,
        );
        let kc = self.mem.u64(r.kt + 8 * s64);
        let vc = self.mem.u64(r.vt + 8 * s64);
        let cap = self.mem.i32(r.caps + 4 * s64) as u64;
        let inv_freq = self.mem.f32s(r.inv_freq, half);
        let p = if r.factor == 1.0 { pos } else { pos / r.factor };
        let elem = elem_bytes(t);
        for head in 0..heads + 2 * kv_heads {
            let src = &qkv[head * dim..][..dim];
            let mut out = vec![0f32; dim];
            let dst = if head < heads {
                q + (((s * heads + head) * dim) * elem) as u64
            } else if head < heads + kv_heads {
                kc + (((head - heads) as u64 * cap + slot) * dim as u64) * elem as u64
            } else {
                vc + (((head - heads - kv_heads) as u64 * cap + slot) * dim as u64) * elem as u64
            };
            for f in 0..half {
                let (x1, x2) = (src[f], src[f + half]);
                if head >= heads + kv_heads {
                    (out[f], out[f + half]) = (x1, x2);
                } else {
                    let (sn, cs) = (p * inv_freq[f]).sin_cos();
                    (out[f], out[f + half]) = (x1 * cs - x2 * sn, x1 * sn + x2 * cs);
                }
            }
            self.mem.put_floats(t, dst, &out);
        }
    }

    /// Sequence `s`'s attention, every head and split.
    fn attention(&mut self, t: &str, a: &[Arg], grid_splits: usize, s: usize) {
        let Arg::Decode(d) = a[8] else {
            panic!("attention without its arguments")
        };
        let (heads, kv_heads, dim, splits) = (
            d.heads as usize,
            d.kv_heads as usize,
            d.dim as usize,
            d.splits as usize,
        );
        assert_eq!(grid_splits, splits, "the grid's z is the splits");
        let s64 = s as u64;
        let len = self.mem.i32(ptr(&a[3]) + 4 * s64) as usize;
        let cap = self.mem.i32(ptr(&a[4]) + 4 * s64) as usize;
        let (kbase, vbase) = (
            self.mem.u64(ptr(&a[1]) + 8 * s64),
            self.mem.u64(ptr(&a[2]) + 8 * s64),
        );
        let elem = elem_bytes(t);
        let q = self
            .mem
            .floats(t, ptr(&a[0]) + (elem * s * heads * dim) as u64, heads * dim);
        let row = |h: usize| s * heads + h;
        let chunk = len.div_ceil(splits);
        for h in 0..heads {
            let kh = h / (heads / kv_heads);
            let head = (kh * cap * dim * elem) as u64;
            let keys = self.mem.floats(t, kbase + head, len * dim);
            let values = self.mem.floats(t, vbase + head, len * dim);
            for split in 0..splits {
                let (first, end) = ((split * chunk).min(len), ((split + 1) * chunk).min(len));
                let scores: Vec<f32> = (first..end)
                    .map(|j| {
                        (0..dim)
                            .map(|x| q[h * dim + x] * d.scale * keys[j * dim + x])
                            .sum()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let mut l = 0f32;
                let mut acc = vec![0f32; dim];
                for (s, j) in scores.iter().zip(first..end) {
                    let e = (s - m).exp();
                    l += e;
                    for x in 0..dim {
                        acc[x] += e * values[j * dim + x];
                    }
                }
                if splits == 1 {
                    let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
                    let out: Vec<f32> = acc.iter().map(|v| v * inv).collect();
                    self.mem
                        .put_floats(t, ptr(&a[5]) + (row(h) * dim * elem) as u64, &out);
                } else {
                    let at = ptr(&a[6]) + (4 * (row(h) * splits + split) * (2 + dim)) as u64;
                    let mut row = vec![m, l];
                    row.extend(acc);
                    self.mem.put_f32s(at, &row);
                }
            }
            // The last split to finish merges them.
            if splits > 1 {
                self.merge(t, a, d, row(h));
            }
        }
    }

    /// The merge of the splits of query row `at` (sequence by head).
    fn merge(&mut self, t: &str, a: &[Arg], d: DecodeArgs, at: usize) {
        let (dim, splits) = (d.dim as usize, d.splits as usize);
        let elem = elem_bytes(t);
        let p = self.mem.f32s(
            ptr(&a[6]) + (4 * at * splits * (2 + dim)) as u64,
            splits * (2 + dim),
        );
        let part = |z: usize| &p[z * (2 + dim)..][..2 + dim];
        let big = (0..splits)
            .map(|z| part(z)[0])
            .fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f32> = (0..splits)
            .map(|z| {
                if part(z)[0] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (part(z)[0] - big).exp()
                }
            })
            .collect();
        let total: f32 = (0..splits).map(|z| part(z)[1] * w[z]).sum();
        let inv = if total > 0.0 { 1.0 / total } else { 0.0 };
        let out: Vec<f32> = (0..dim)
            .map(|x| (0..splits).map(|z| part(z)[2 + x] * w[z]).sum::<f32>() * inv)
            .collect();
        self.mem
            .put_floats(t, ptr(&a[5]) + (at * dim * elem) as u64, &out);
    }
}

/// `l` by its CUDA C entry point, compiled for the host.
#[cfg(target_arch = "x86_64")]
fn run_cuda_source(l: &Launch) {
    let mut params = crate::host_kernels::Params::default();
    for a in &l.args {
        match *a {
            Arg::Ptr(x) => params.push(x),
            Arg::I32(x) => params.push(x),
            Arg::I64(x) => params.push(x),
            Arg::F32(x) => params.push(x),
            Arg::Gemv(x) => params.push(x),
            Arg::Rope(x) => params.push(x),
            Arg::Decode(x) => params.push(x),
        };
    }
    crate::host_kernels::launch(l.module, &l.name, l.grid, l.block, l.shared, &mut params)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[cfg(not(target_arch = "x86_64"))]
fn run_cuda_source(_: &Launch) {
    panic!("the CUDA sources run on the host only on x86-64");
}

/// Panics unless `module` is one of [`crate::SOURCES`] and, for a format's product or
/// embedding, the module compiled for that format (what NVRTC will be asked for on a GPU).
fn check_module(module: &str, format: Option<&str>) {
    let Some((_, src)) = crate::SOURCES.iter().find(|(m, _)| *m == module) else {
        panic!("no CUDA module {module}")
    };
    let ggml = src.starts_with("#define STEP_GGML");
    match format.filter(|f| ggml_type(f).is_some()) {
        Some(f) => assert!(
            src.starts_with(&format!("#define STEP_GGML(F) F({f}, ")),
            "{module} is not the module of {f}"
        ),
        None => assert!(!ggml, "{module} holds only one GGML format"),
    }
}

/// `model` laid out in emulated memory for batches of up to `batch` sequences, as
/// `DecodeStep` lays it out on a device.
fn lay_out(model: &StepModel, mem: &mut Memory, batch: usize) -> Layout {
    model.check().unwrap();
    let sizes = BufferAddrs::sizes(
        &model.dims,
        model.layers.len(),
        model.dtype().size_in_bytes(),
        batch,
    );
    let addrs = sizes.map(|n| mem.alloc(n));
    let buf = BufferAddrs::from_addrs(addrs);
    mem.write(buf.inv_freq, &f32_bytes(&model.rope.inv_freq));
    let mem = std::cell::RefCell::new(mem);
    Layout::build(
        model,
        buf,
        |m| {
            Ok(match m {
                StepMatrix::Dense(t) => mem.borrow_mut().put(&tensor_bytes(t)),
                StepMatrix::Ggml(q) => mem.borrow_mut().put(&q.data()?),
            })
        },
        |t| Ok(mem.borrow_mut().put(&tensor_bytes(t))),
        |b| {
            let f: Vec<f32> = b.to_dtype(DType::F32)?.to_vec1()?;
            Ok(mem.borrow_mut().put(&f32_bytes(&f)))
        },
    )
    .unwrap()
}

#[cfg(test)]
#[path = "emulate_tests.rs"]
mod tests;
