//! The decoding step's launches as data, for one sequence or a batch of them: which entry
//! point, its grid and its arguments, over device addresses. [`super::DecodeStep`] launches
//! (and captures) exactly this list on CUDA; `emulate.rs` runs the same list on the host, each
//! entry point written out, so the order, buffers, offsets and arguments are tested without a
//! GPU.

use candle_core::{bail, DType, Result, Tensor};

use super::buffers::BufferAddrs;
pub(crate) use super::decode_grid::DecodeArgs;
use super::decode_grid::{DecodeKernel, DECODE_WARPS};
use super::{StepDims, StepMatrix, StepModel};

/// `GEMV_WARPS` of decode_step.cu: output rows a block.
pub(crate) const GEMV_ROWS: u32 = 8;
/// `MMA_GEMV_WARPS`: warps a block of the tensor-core products, splitting the columns of the
/// block's 8 output rows.
const MMA_GEMV_WARPS: u32 = 8;
/// `STEP_NORM_THREADS`.
pub(crate) const NORM_THREADS: u32 = 1024;
/// `GemvArgs` of decode_step.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemvArgs {
    pub(crate) rows0: i64,
    pub(crate) rows1: i64,
    pub(crate) rows2: i64,
    pub(crate) row_bytes: i64,
    pub(crate) out_stride: i64,
    pub(crate) cols: i32,
    pub(crate) mode: i32,
    pub(crate) vec: i32,
    pub(crate) batch: i32,
    pub(crate) eps: f32,
}

/// `RopeArgs` of decode_step.cu, field for field: where RoPE and the cache append put a
/// layer's q, k and v.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RopeArgs {
    pub(crate) inv_freq: u64,
    pub(crate) st: u64,
    pub(crate) kt: u64,
    pub(crate) vt: u64,
    pub(crate) caps: u64,
    pub(crate) batch: i32,
    pub(crate) heads: i32,
    pub(crate) kv_heads: i32,
    pub(crate) dim: i32,
    pub(crate) factor: f32,
}

/// One kernel argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg {
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
    Gemv(GemvArgs),
    Rope(RopeArgs),
    Decode(DecodeArgs),
}

/// One launch: module, entry point, grid, block, dynamic shared bytes, arguments.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) module: &'static str,
    pub(crate) name: String,
    pub(crate) grid: (u32, u32, u32),
    pub(crate) block: (u32, u32, u32),
    pub(crate) shared: u32,
    pub(crate) args: Vec<Arg>,
}

/// What a product does with its rows' dot products (decode_step.cu's `mode`).
#[derive(Debug, Clone, Copy)]
enum Epilogue {
    /// Written (f32), bias added.
    Write,
    /// Added to the f32 residual.
    Add,
    /// Two matrices' rows combined by SwiGLU into the activation type.
    SwiGlu,
    /// q, k and v: RoPE and the cache append, q into the activation type.
    Rope(RopeArgs),
}

/// What a product reads.
#[derive(Debug, Clone, Copy)]
enum Input {
    /// Activations at this address.
    Plain(u64),
    /// The f32 residual at `.0`, normalised as it is read by the sums of squares at `.1` (a
    /// norm's slot: an entry a sequence) and the norm's weights at `.2`.
    Normed(u64, u64, u64),
}

impl Input {
    /// Whether what the product reads besides its matrices allows 16-byte loads.
    fn aligned(&self) -> bool {
        match *self {
            Input::Normed(_, _, w) => w.is_multiple_of(16),
            _ => true,
        }
    }
}

/// A grid of 1,024-thread blocks over `n` threads (cudarc's `LaunchConfig::for_num_elems`).
fn for_elems(n: u32) -> ((u32, u32, u32), (u32, u32, u32)) {
    ((n.div_ceil(1024), 1, 1), (1024, 1, 1))
}

/// A matrix as the kernels read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Matrix {
    pub(crate) ptr: u64,
    pub(crate) row_bytes: i64,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// The entry points' name of its format (`capstan_step_gemv_{format}_*`).
    pub(crate) format: &'static str,
    /// The CUDA module of its format's products.
    pub(crate) module: &'static str,
    /// 16-byte loads: the rows and the input are aligned, `cols` a multiple of 8.
    pub(crate) vec: bool,
}

/// One layer's weights as addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerAddrs {
    pub(crate) attn_norm: u64,
    pub(crate) q: Matrix,
    pub(crate) k: Matrix,
    pub(crate) v: Matrix,
    /// f32 biases of q, k and v (0: none).
    pub(crate) bias: [u64; 3],
    pub(crate) o: Matrix,
    pub(crate) mlp_norm: u64,
    pub(crate) gate: Matrix,
    pub(crate) up: Matrix,
    pub(crate) down: Matrix,
}

/// A model's weights and the step's buffers, as addresses.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) dims: StepDims,
    pub(crate) factor: f32,
    /// The activations' type as entry points spell it (`f32`, `bf16`, `f16`).
    pub(crate) suffix: &'static str,
    pub(crate) embed: Matrix,
    pub(crate) layers: Vec<LayerAddrs>,
    pub(crate) norm: u64,
    pub(crate) lm_head: Matrix,
    pub(crate) buf: BufferAddrs,
    /// Whether the device has `mma.sync` for 16-bit and TF32 inputs (compute capability 8.0
    /// and up): a batch's 16-bit products, and its GGML products on f32 activations, then run
    /// on tensor cores.
    pub(crate) tensor_cores: bool,
}

impl Layout {
    /// The decoding-attention kernel of this model's heads.
    pub(crate) fn decode_kernel(&self) -> DecodeKernel {
        let elem = if self.suffix == "f32" { 4 } else { 2 };
        DecodeKernel::choose(self.dims.head_dim, elem)
    }

    /// Blocks of decoding attention a sequence and range of keys.
    pub(crate) fn decode_blocks(&self) -> usize {
        self.decode_kernel()
            .blocks(self.dims.heads, self.dims.kv_heads)
    }

    /// Every launch of one step of `batch` sequences, in order, attention splitting the keys
    /// `splits` ways ([`CacheTables::shape`]).
    pub(crate) fn plan(&self, (batch, splits): (usize, usize)) -> Vec<Launch> {
        let d = self.dims;
        let b = self.buf;
        let sfx = self.suffix;
        let n = batch as u64;
        let (qw, kvw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let qkv_w = qw + 2 * kvw;
        let mut out = Vec::with_capacity(2 + 10 * self.layers.len());
        // Norms folded into the products (decode_step.cu): slot k of the sums of squares
        // belongs to the step's k-th norm, `batch` entries each.
        let folded = self.folded_norms(batch);
        let slots = folded.len();
        let slot = |k: usize| {
            if folded[k] {
                b.ss + 4 * (k * batch) as u64
            } else {
                0
            }
        };
        let (grid, block) = for_elems((self.embed.cols / 32) as u32);
        out.push(Launch {
            module: self.embed.module,
            name: format!("capstan_step_embed_{}", self.embed.format),
            grid: (grid.0, batch as u32, 1),
            block,
            shared: 0,
            args: vec![
                Arg::Ptr(self.embed.ptr),
                Arg::I64(self.embed.row_bytes),
                Arg::I32(self.embed.cols as i32),
                Arg::Ptr(b.state),
                Arg::I32(batch as i32),
                Arg::Ptr(b.x),
                // Every slot zeroed for the products that add to them, the first set.
                Arg::Ptr(if folded.contains(&true) { b.ss } else { 0 }),
                Arg::I32(slots as i32),
            ],
        });
        for (i, l) in self.layers.iter().enumerate() {
            // The input of products after norm k: the norm's output, or (folded) the residual
            // with the norm's slot and weights.
            let normed = |k: usize, w: u64| {
                if folded[k] {
                    Input::Normed(b.x, slot(k), w)
                } else {
                    Input::Plain(b.h)
                }
            };
            let gemv = |ms: [&Matrix; 3], bias, x, out_f32, out_t, mode, stride| {
                self.gemv(ms, bias, (x, out_f32, out_t, 0), mode, stride, batch)
            };
            // A product adding to the residual, adding its squares to slot k (folded).
            let add = |m: &Matrix, x, k| {
                let io = (Input::Plain(x), b.x, 0, slot(k));
                self.gemv([m; 3], [0; 3], io, Epilogue::Add, d.hidden, batch)
            };
            // This layer's entries of the cache tables: one per sequence.
            let tables = (
                b.kptr + 8 * i as u64 * n,
                b.vptr + 8 * i as u64 * n,
                b.caps + 4 * i as u64 * n,
            );
            let rope = RopeArgs {
                inv_freq: b.inv_freq,
                st: b.state,
                kt: tables.0,
                vt: tables.1,
                caps: tables.2,
                batch: batch as i32,
                heads: d.heads as i32,
                kv_heads: d.kv_heads as i32,
                dim: d.head_dim as i32,
                factor: self.factor,
            };
            if !folded[2 * i] {
                out.push(self.norm(b.x, l.attn_norm, b.h, batch));
            }
            let x = normed(2 * i, l.attn_norm);
            if l.q.format == l.k.format && l.k.format == l.v.format {
                // RoPE and the cache append in the products' epilogue.
                let qkv = [&l.q, &l.k, &l.v];
                out.push(gemv(qkv, l.bias, x, 0, b.q, Epilogue::Rope(rope), 0));
            } else {
                for (j, (m, at)) in [(&l.q, 0), (&l.k, qw), (&l.v, qw + kvw)]
                    .into_iter()
                    .enumerate()
                {
                    let bias = [l.bias[j], 0, 0];
                    let at = b.qkv + 4 * at as u64;
                    out.push(gemv([m; 3], bias, x, at, 0, Epilogue::Write, qkv_w));
                }
                out.push(self.rope_append(rope));
            }
            // The key counts are the state's fourth field.
            out.push(self.attention(tables, b.state + 12 * n, batch, splits));
            out.push(add(&l.o, b.attn, 2 * i + 1));
            if !folded[2 * i + 1] {
                out.push(self.norm(b.x, l.mlp_norm, b.h, batch));
            }
            let x = normed(2 * i + 1, l.mlp_norm);
            let inter = d.intermediate;
            if l.gate.format == l.up.format {
                let gate_up = [&l.gate, &l.up, &l.up];
                out.push(gemv(gate_up, [0; 3], x, 0, b.act, Epilogue::SwiGlu, inter));
            } else {
                let up = b.gu + 4 * (inter * batch) as u64;
                out.push(gemv(
                    [&l.gate; 3],
                    [0; 3],
                    x,
                    b.gu,
                    0,
                    Epilogue::Write,
                    inter,
                ));
                out.push(gemv([&l.up; 3], [0; 3], x, up, 0, Epilogue::Write, inter));
                let (grid, block) = for_elems((inter * batch) as u32);
                out.push(Launch {
                    module: "decode_step",
                    name: format!("capstan_step_swiglu_{sfx}"),
                    grid,
                    block,
                    shared: 0,
                    args: vec![
                        Arg::Ptr(b.gu),
                        Arg::Ptr(up),
                        Arg::Ptr(b.act),
                        Arg::I32((inter * batch) as i32),
                    ],
                });
            }
            out.push(add(&l.down, b.act, 2 * i + 2));
        }
        let last = 2 * self.layers.len();
        let x = if folded[last] {
            Input::Normed(b.x, slot(last), self.norm)
        } else {
            out.push(self.norm(b.x, self.norm, b.h, batch));
            Input::Plain(b.h)
        };
        let lm_head = [&self.lm_head; 3];
        let io = (x, b.logits, 0, 0);
        out.push(self.gemv(lm_head, [0; 3], io, Epilogue::Write, d.vocab, batch));
        out
    }

    /// Which of the step's norms (two a layer, then the final one) are folded into the products
    /// that read them: all of one sequence's; a batch's where the products reading the norm run
    /// on tensor cores (only their entry points normalise a batch's inputs) and the residual's
    /// writer adds up each sequence's squares (the embedding, or a product on tensor cores).
    fn folded_norms(&self, batch: usize) -> Vec<bool> {
        let n = 2 * self.layers.len() + 1;
        if batch == 1 {
            return vec![true; n];
        }
        let b = self.buf;
        let on_tc =
            |ms: &[&Matrix], x: Input| ms.iter().all(|m| self.on_tensor_cores(m, &x, batch));
        (0..n)
            .map(|k| {
                let normed = |w| Input::Normed(b.x, b.ss, w);
                let (i, after_attention) = (k / 2, k % 2 == 1);
                let (readers, writer) = match self.layers.get(i) {
                    // Layer i's q, k and v after its first norm; written by the embedding or
                    // the previous layer's down product.
                    Some(l) if !after_attention => (
                        on_tc(&[&l.q, &l.k, &l.v], normed(l.attn_norm)),
                        i == 0 || on_tc(&[&self.layers[i - 1].down], Input::Plain(b.act)),
                    ),
                    Some(l) => (
                        on_tc(&[&l.gate, &l.up], normed(l.mlp_norm)),
                        on_tc(&[&l.o], Input::Plain(b.attn)),
                    ),
                    // The final norm, before the output layer.
                    None => (
                        on_tc(&[&self.lm_head], normed(self.norm)),
                        self.layers
                            .last()
                            .is_none_or(|l| on_tc(&[&l.down], Input::Plain(b.act))),
                    ),
                };
                readers && writer
            })
            .collect()
    }

    /// Whether a batch's product of `m` reading `x` runs on tensor cores (decode_step.cu,
    /// gemv_mma): 16-bit weights in the activations' own type (their module, STEP_MMA) and
    /// GGML weights on f32 activations (TF32, in the format's module); rows and inputs 16-byte
    /// aligned, 32 columns at a time.
    fn on_tensor_cores(&self, m: &Matrix, x: &Input, batch: usize) -> bool {
        let dense16 = matches!(self.suffix, "bf16" | "f16") && m.format == self.suffix;
        let ggml_tf32 = self.suffix == "f32" && m.is_ggml();
        self.tensor_cores
            && batch > 1
            && (dense16 || ggml_tf32)
            && m.vec
            && x.aligned()
            && m.cols.is_multiple_of(32)
    }

    /// RoPE and the cache append of each sequence's f32 q, k and v (products of different
    /// formats wrote them to the qkv buffer), a thread per pair of values.
    fn rope_append(&self, r: RopeArgs) -> Launch {
        let d = self.dims;
        let (grid, block) = for_elems(((d.heads + 2 * d.kv_heads) * d.head_dim / 2) as u32);
        Launch {
            module: "decode_step",
            name: format!("capstan_step_rope_append_{}", self.suffix),
            grid: (grid.0, r.batch as u32, 1),
            block,
            shared: 0,
            args: vec![
                Arg::Ptr(self.buf.qkv),
                Arg::Ptr(r.inv_freq),
                Arg::Ptr(r.st),
                Arg::I32(r.batch),
                Arg::Ptr(self.buf.q),
                Arg::Ptr(r.kt),
                Arg::Ptr(r.vt),
                Arg::Ptr(r.caps),
                Arg::I32(r.heads),
                Arg::I32(r.kv_heads),
                Arg::I32(r.dim),
                Arg::F32(r.factor),
            ],
        }
    }

    /// RMSNorm of each sequence's residual row, a block a sequence.
    fn norm(&self, x: u64, w: u64, out: u64, batch: usize) -> Launch {
        Launch {
            module: "decode_step",
            name: format!("capstan_step_rmsnorm_{}", self.suffix),
            grid: (batch as u32, 1, 1),
            block: (NORM_THREADS, 1, 1),
            shared: 0,
            args: vec![
                Arg::Ptr(x),
                Arg::Ptr(w),
                Arg::Ptr(out),
                Arg::I32(self.dims.hidden as i32),
                Arg::F32(self.dims.eps as f32),
            ],
        }
    }

    /// Products of every sequence's input row `x` over the stacked rows of `ms` (one matrix:
    /// `ms` its three times, only the first counted; SwiGLU: `ms[0]` and `ms[1]`), finished by
    /// `epilogue`; each sequence's outputs `out_stride` elements after the one before. Adding
    /// to the residual, it also adds each sequence's squares to its entry at `ss_out` (0:
    /// nowhere; a batch's only on tensor cores).
    fn gemv(
        &self,
        ms: [&Matrix; 3],
        bias: [u64; 3],
        (x, out_f32, out_t, ss_out): (Input, u64, u64, u64),
        epilogue: Epilogue,
        out_stride: usize,
        batch: usize,
    ) -> Launch {
        let (mode, rope) = match epilogue {
            Epilogue::Write => (0, RopeArgs::default()),
            Epilogue::Add => (1, RopeArgs::default()),
            Epilogue::SwiGlu => (2, RopeArgs::default()),
            Epilogue::Rope(r) => (3, r),
        };
        let one = std::ptr::eq(ms[0], ms[1]) && std::ptr::eq(ms[1], ms[2]);
        let rows = if one {
            [ms[0].rows, 0, 0]
        } else if mode == 2 {
            [ms[0].rows, ms[1].rows, 0]
        } else {
            [ms[0].rows, ms[1].rows, ms[2].rows]
        };
        let m0 = ms[0];
        let args = GemvArgs {
            rows0: rows[0] as i64,
            rows1: rows[1] as i64,
            rows2: rows[2] as i64,
            row_bytes: m0.row_bytes,
            out_stride: out_stride as i64,
            cols: m0.cols as i32,
            mode,
            // A normed input also reads the norm's weights 16 bytes at a time.
            vec: (ms.iter().all(|m| m.vec) && x.aligned()) as i32,
            batch: batch as i32,
            eps: self.dims.eps as f32,
        };
        // Warps: a row each, or (mode 3) a pair of rows RoPE rotates together.
        let out_rows = match mode {
            2 => rows[0],
            3 => rows.iter().sum::<usize>() / 2,
            _ => rows.iter().sum(),
        };
        // A batch's products of one format run on tensor cores where they can
        // ([`Layout::on_tensor_cores`]); only they normalise a batch's inputs. One sequence's
        // products have entry points of their own (decode_step.cu, PASS 1), and those that
        // normalise the residual as they read it others again.
        let same_format = ms.iter().all(|m| m.format == m0.format);
        let mma = same_format && ms.iter().all(|m| self.on_tensor_cores(m, &x, batch));
        let (x, ss_in, norm_w) = match x {
            Input::Plain(x) => (x, 0, 0),
            Input::Normed(x, ss, w) => (x, ss, w),
        };
        // `folded_norms` folds a batch's norm only into products on tensor cores: the
        // CUDA-core batched products would read the f32 residual as activations.
        assert!(
            batch == 1 || ss_in == 0 || mma,
            "decode step plan: a batch's normed input off tensor cores"
        );
        // (module, entry point, output rows a block, threads a block)
        let (module, entry, rows_a_block, threads) = match (mma, batch, ss_in) {
            (true, _, _) => {
                let module = if m0.is_ggml() {
                    m0.module
                } else {
                    "decode_step_mma"
                };
                let entry = if ss_in == 0 {
                    "gemv_mma"
                } else {
                    "gemv_mma_norm"
                };
                (module, entry, 8, 32 * MMA_GEMV_WARPS)
            }
            (false, 1, 0) => (m0.module, "gemv", GEMV_ROWS, 32 * GEMV_ROWS),
            (false, 1, _) => (m0.module, "gemv_norm", GEMV_ROWS, 32 * GEMV_ROWS),
            (false, _, _) => (m0.module, "gemv_batch", GEMV_ROWS, 32 * GEMV_ROWS),
        };
        Launch {
            module,
            name: format!("capstan_step_{entry}_{}_{}", m0.format, self.suffix),
            grid: ((out_rows as u32).div_ceil(rows_a_block), 1, 1),
            block: (threads, 1, 1),
            shared: 0,
            args: vec![
                Arg::Ptr(ms[0].ptr),
                Arg::Ptr(ms[1].ptr),
                Arg::Ptr(ms[2].ptr),
                Arg::Ptr(bias[0]),
                Arg::Ptr(bias[1]),
                Arg::Ptr(bias[2]),
                Arg::Ptr(x),
                Arg::Ptr(out_f32),
                Arg::Ptr(out_t),
                Arg::Ptr(ss_in),
                Arg::Ptr(norm_w),
                Arg::Ptr(ss_out),
                Arg::Rope(rope),
                Arg::Gemv(args),
            ],
        }
    }

    /// Decoding attention of each sequence's query row against its layer cache (this
    /// layer's table entries at `tables`, key counts at `lens`), keys split `splits` ways,
    /// merged by the last split to finish.
    fn attention(&self, tables: (u64, u64, u64), lens: u64, batch: usize, splits: usize) -> Launch {
        let d = self.dims;
        let b = self.buf;
        let args = DecodeArgs {
            heads: d.heads as i32,
            kv_heads: d.kv_heads as i32,
            dim: d.head_dim as i32,
            scale: 1.0 / (d.head_dim as f32).sqrt(),
            splits: splits as i32,
        };
        let kernel = self.decode_kernel();
        Launch {
            module: "attention_decode",
            name: kernel.entry(self.suffix),
            grid: (
                kernel.blocks(d.heads, d.kv_heads) as u32,
                batch as u32,
                splits as u32,
            ),
            block: (32 * DECODE_WARPS as u32, 1, 1),
            shared: kernel.shared_bytes(d.head_dim),
            args: vec![
                Arg::Ptr(b.q),
                Arg::Ptr(tables.0),
                Arg::Ptr(tables.1),
                Arg::Ptr(lens),
                Arg::Ptr(tables.2),
                Arg::Ptr(b.attn),
                Arg::Ptr(b.partial),
                Arg::Ptr(b.counters),
                Arg::Decode(args),
            ],
        }
    }
}

impl Matrix {
    /// Whether its values are GGML blocks (else dense floats).
    pub(crate) fn is_ggml(&self) -> bool {
        !matches!(self.format, "f32" | "bf16" | "f16")
    }

    /// `m` at address `ptr` (dense: its first element; GGML: its first block).
    pub(crate) fn of(m: &StepMatrix, ptr: u64) -> Result<Self> {
        let (rows, cols) = m.dims()?;
        let (row_bytes, vec) = match m {
            StepMatrix::Dense(t) => (
                cols * t.dtype().size_in_bytes(),
                ptr.is_multiple_of(16) && cols.is_multiple_of(8),
            ),
            StepMatrix::Ggml(q) => (cols / q.dtype().block_size() * q.dtype().type_size(), true),
        };
        Ok(Self {
            ptr,
            row_bytes: row_bytes as i64,
            rows,
            cols,
            format: m.format()?,
            module: m.module()?,
            vec,
        })
    }
}

impl Layout {
    /// The layout of `model` (checked by the caller, before it allocates the buffers: see
    /// [`StepModel::check`]) with its matrices, norms and biases at the addresses the closures
    /// give (a bias: its f32 copy's), and the buffers at `buf`.
    pub(crate) fn build(
        model: &StepModel,
        buf: BufferAddrs,
        mut matrix: impl FnMut(&StepMatrix) -> Result<u64>,
        mut tensor: impl FnMut(&Tensor) -> Result<u64>,
        mut bias: impl FnMut(&Tensor) -> Result<u64>,
    ) -> Result<Self> {
        let suffix = match model.dtype() {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            d => bail!("decode step: a {d:?} model"),
        };
        let d = model.dims;
        let mut mat = |m: &StepMatrix, input_cols: usize| -> Result<Matrix> {
            let mut out = Matrix::of(m, matrix(m)?)?;
            // The input buffers are aligned; their width decides the rest.
            out.vec &= input_cols.is_multiple_of(8);
            Ok(out)
        };
        let (h, qw, i) = (d.hidden, d.heads * d.head_dim, d.intermediate);
        let mut layers = Vec::with_capacity(model.layers.len());
        for l in &model.layers {
            let bias = match &l.qkv_bias {
                Some(b) => [bias(&b[0])?, bias(&b[1])?, bias(&b[2])?],
                None => [0; 3],
            };
            layers.push(LayerAddrs {
                attn_norm: tensor(&l.attn_norm)?,
                q: mat(&l.q, h)?,
                k: mat(&l.k, h)?,
                v: mat(&l.v, h)?,
                bias,
                o: mat(&l.o, qw)?,
                mlp_norm: tensor(&l.mlp_norm)?,
                gate: mat(&l.gate, h)?,
                up: mat(&l.up, h)?,
                down: mat(&l.down, i)?,
            });
        }
        Ok(Self {
            dims: d,
            factor: model.rope.factor,
            suffix,
            embed: mat(&model.embed, h)?,
            layers,
            norm: tensor(&model.norm)?,
            lm_head: mat(&model.lm_head, h)?,
            buf,
            tensor_cores: true,
        })
    }
}
