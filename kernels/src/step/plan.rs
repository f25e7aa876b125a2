//! The decoding step's launches as data: which entry point, its grid and its arguments, over
//! device addresses. [`super::DecodeStep`] launches (and captures) exactly this list on CUDA;
//! `emulate.rs` runs the same list on the host, each entry point written out, so the order,
//! buffers, offsets and arguments are tested without a GPU.

use candle_core::{bail, DType, Result, Tensor};

use super::{StepDims, StepMatrix, StepModel};

/// `GEMV_WARPS` of decode_step.cu: output rows a block.
pub(crate) const GEMV_ROWS: u32 = 8;
/// `STEP_NORM_THREADS`.
pub(crate) const NORM_THREADS: u32 = 1024;
/// Warps a block of attention_decode.cu.
pub(crate) const DECODE_WARPS: usize = 4;
/// Blocks that keep an H100's or H200's 132 multiprocessors busy (a few each): below this,
/// the keys are split into ranges of at least `MIN_SPLIT_KEYS`.
const TARGET_BLOCKS: usize = 528;
const MIN_SPLIT_KEYS: usize = 256;
const MAX_SPLITS: usize = 32;

/// How many ranges attention_decode.cu splits each sequence's keys into: enough blocks for the
/// device, ranges of at least `MIN_SPLIT_KEYS`.
pub(crate) fn splits(blocks: usize, longest: usize) -> usize {
    TARGET_BLOCKS
        .div_ceil(blocks.max(1))
        .min(longest.div_ceil(MIN_SPLIT_KEYS))
        .clamp(1, MAX_SPLITS)
}

/// `GemvArgs` of decode_step.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemvArgs {
    pub(crate) rows0: i64,
    pub(crate) rows1: i64,
    pub(crate) rows2: i64,
    pub(crate) row_bytes: i64,
    pub(crate) cols: i32,
    pub(crate) mode: i32,
    pub(crate) vec: i32,
}

/// `DecodeArgs` of attention_decode.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeArgs {
    pub(crate) heads: i32,
    pub(crate) kv_heads: i32,
    pub(crate) dim: i32,
    pub(crate) scale: f32,
    pub(crate) splits: i32,
}

/// One kernel argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg {
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
    Gemv(GemvArgs),
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

/// The static buffers' addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferAddrs {
    /// f32 residual stream `(hidden)`.
    pub(crate) x: u64,
    /// A normed activation `(hidden)`, the model's type.
    pub(crate) h: u64,
    /// f32 q, k and v products.
    pub(crate) qkv: u64,
    /// Rotated queries, the model's type.
    pub(crate) q: u64,
    /// Attention output, the model's type.
    pub(crate) attn: u64,
    /// f32 gate and up products (when their formats differ).
    pub(crate) gu: u64,
    /// SwiGLU output `(intermediate)`, the model's type.
    pub(crate) act: u64,
    /// f32 logits `(vocab)`.
    pub(crate) logits: u64,
    /// Attention's per-split partial results.
    pub(crate) partial: u64,
    /// `StepState`: token, position, cache row, keys after the step (4 i32).
    pub(crate) state: u64,
    /// Per layer: keys' and values' first cached row (u64), the buffers' capacities (i32).
    pub(crate) kptr: u64,
    pub(crate) vptr: u64,
    pub(crate) caps: u64,
    /// f32 RoPE inverse frequencies.
    pub(crate) inv_freq: u64,
}

impl BufferAddrs {
    /// Indices of [`BufferAddrs::sizes`] of the buffers the host writes or reads.
    pub(crate) const LOGITS: usize = 7;
    pub(crate) const STATE: usize = 9;
    pub(crate) const KPTR: usize = 10;
    pub(crate) const VPTR: usize = 11;
    pub(crate) const CAPS: usize = 12;
    pub(crate) const INV_FREQ: usize = 13;

    /// Each buffer's bytes for a model of `dims` with `layers` layers and `elem`-byte
    /// activations, in field order.
    pub(crate) fn sizes(dims: &StepDims, layers: usize, elem: usize) -> [usize; 14] {
        let d = dims;
        let (qw, kvw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let max_splits = splits(d.heads, usize::MAX / 2);
        let l = layers.max(1);
        [
            4 * d.hidden,
            elem * d.hidden,
            4 * (qw + 2 * kvw),
            elem * qw,
            elem * qw,
            4 * 2 * d.intermediate,
            elem * d.intermediate,
            4 * d.vocab,
            4 * d.heads * max_splits * (2 + d.head_dim),
            16,
            8 * l,
            8 * l,
            4 * l,
            4 * (d.head_dim / 2),
        ]
    }

    /// The buffers at the given addresses (field order, as [`BufferAddrs::sizes`]).
    pub(crate) fn from_addrs(a: [u64; 14]) -> Self {
        Self {
            x: a[0],
            h: a[1],
            qkv: a[2],
            q: a[3],
            attn: a[4],
            gu: a[5],
            act: a[6],
            logits: a[Self::LOGITS],
            partial: a[8],
            state: a[Self::STATE],
            kptr: a[Self::KPTR],
            vptr: a[Self::VPTR],
            caps: a[Self::CAPS],
            inv_freq: a[Self::INV_FREQ],
        }
    }
}

/// Where the caches were when the graph was captured: a moved cache needs a new capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheKey {
    /// Per layer: the keys' and values' first cached row, and the buffers' capacity.
    pub(crate) layers: Vec<(u64, u64, usize)>,
    /// The ranges attention_decode.cu splits the keys into, for the smallest capacity (fixed
    /// while the caches stay where they are: the graph replays it as the keys grow).
    pub(crate) splits: usize,
}

impl CacheKey {
    /// The caches of every layer, for a model of `heads` query heads.
    pub(crate) fn new(layers: Vec<(u64, u64, usize)>, heads: usize) -> Self {
        let smallest = layers.iter().map(|l| l.2).min().unwrap_or(1);
        Self {
            splits: splits(heads, smallest),
            layers,
        }
    }

    /// The bytes of the key, value and capacity tables ([`BufferAddrs::kptr`], `vptr`,
    /// `caps`), as the host writes them.
    pub(crate) fn tables(&self) -> [Vec<u8>; 3] {
        let l = &self.layers;
        [
            l.iter().flat_map(|x| x.0.to_le_bytes()).collect(),
            l.iter().flat_map(|x| x.1.to_le_bytes()).collect(),
            l.iter().flat_map(|x| (x.2 as i32).to_le_bytes()).collect(),
        ]
    }
}

/// The bytes of `StepState` ([`BufferAddrs::state`]) for `token` at position `pos` after
/// `len` cached rows: it writes row `len`, and attention then reads `len + 1` keys.
pub(crate) fn state_bytes(token: u32, pos: usize, len: usize) -> Vec<u8> {
    [token as i32, pos as i32, len as i32, len as i32 + 1]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

/// Little-endian bytes of f32 values (the RoPE frequencies, biases).
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
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
}

impl Layout {
    /// Every launch of one step, in order, for the caches of `key`.
    pub(crate) fn plan(&self, key: &CacheKey) -> Vec<Launch> {
        let d = self.dims;
        let b = self.buf;
        let sfx = self.suffix;
        let (qw, kvw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let mut out = Vec::with_capacity(2 + 10 * self.layers.len());
        let (grid, block) = for_elems((self.embed.cols / 32) as u32);
        out.push(Launch {
            module: self.embed.module,
            name: format!("capstan_step_embed_{}", self.embed.format),
            grid,
            block,
            shared: 0,
            args: vec![
                Arg::Ptr(self.embed.ptr),
                Arg::I64(self.embed.row_bytes),
                Arg::I32(self.embed.cols as i32),
                Arg::Ptr(b.state),
                Arg::Ptr(b.x),
            ],
        });
        for (i, l) in self.layers.iter().enumerate() {
            out.push(self.norm(b.x, l.attn_norm, b.h));
            if l.q.format == l.k.format && l.k.format == l.v.format {
                out.push(self.gemv([&l.q, &l.k, &l.v], l.bias, b.h, b.qkv, 0, 0));
            } else {
                for (j, (m, at)) in [(&l.q, 0), (&l.k, qw), (&l.v, qw + kvw)]
                    .into_iter()
                    .enumerate()
                {
                    out.push(self.gemv1(m, l.bias[j], b.h, b.qkv + 4 * at as u64, 0));
                }
            }
            let (kc, vc, cap) = key.layers[i];
            let (grid, block) = for_elems(((d.heads + 2 * d.kv_heads) * d.head_dim / 2) as u32);
            out.push(Launch {
                module: "decode_step",
                name: format!("capstan_step_rope_append_{sfx}"),
                grid,
                block,
                shared: 0,
                args: vec![
                    Arg::Ptr(b.qkv),
                    Arg::Ptr(b.inv_freq),
                    Arg::Ptr(b.state),
                    Arg::Ptr(b.q),
                    Arg::Ptr(kc),
                    Arg::Ptr(vc),
                    Arg::I32(d.heads as i32),
                    Arg::I32(d.kv_heads as i32),
                    Arg::I32(d.head_dim as i32),
                    Arg::I32(cap as i32),
                    Arg::F32(self.factor),
                ],
            });
            // The key count is StepState's fourth int.
            let tables = (
                b.kptr + 8 * i as u64,
                b.vptr + 8 * i as u64,
                b.caps + 4 * i as u64,
            );
            out.extend(self.attention(tables, b.state + 12, key.splits));
            out.push(self.gemv1(&l.o, 0, b.attn, b.x, 1));
            out.push(self.norm(b.x, l.mlp_norm, b.h));
            if l.gate.format == l.up.format {
                out.push(self.gemv([&l.gate, &l.up, &l.up], [0; 3], b.h, 0, b.act, 2));
            } else {
                let up = b.gu + 4 * d.intermediate as u64;
                out.push(self.gemv1(&l.gate, 0, b.h, b.gu, 0));
                out.push(self.gemv1(&l.up, 0, b.h, up, 0));
                let (grid, block) = for_elems(d.intermediate as u32);
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
                        Arg::I32(d.intermediate as i32),
                    ],
                });
            }
            out.push(self.gemv1(&l.down, 0, b.act, b.x, 1));
        }
        out.push(self.norm(b.x, self.norm, b.h));
        out.push(self.gemv1(&self.lm_head, 0, b.h, b.logits, 0));
        out
    }

    fn norm(&self, x: u64, w: u64, out: u64) -> Launch {
        Launch {
            module: "decode_step",
            name: format!("capstan_step_rmsnorm_{}", self.suffix),
            grid: (1, 1, 1),
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

    fn gemv1(&self, m: &Matrix, bias: u64, x: u64, out: u64, mode: i32) -> Launch {
        self.gemv_rows([(m, bias), (m, 0), (m, 0)], [m.rows, 0, 0], x, out, 0, mode)
    }

    /// `mode` 0 or 1 over the stacked rows of `ms`, or 2 (SwiGLU of `ms[0]` and `ms[1]`).
    fn gemv(
        &self,
        ms: [&Matrix; 3],
        bias: [u64; 3],
        x: u64,
        out_f32: u64,
        out_t: u64,
        mode: i32,
    ) -> Launch {
        let rows = if mode == 2 {
            [ms[0].rows, ms[1].rows, 0]
        } else {
            [ms[0].rows, ms[1].rows, ms[2].rows]
        };
        let ms = [(ms[0], bias[0]), (ms[1], bias[1]), (ms[2], bias[2])];
        self.gemv_rows(ms, rows, x, out_f32, out_t, mode)
    }

    fn gemv_rows(
        &self,
        ms: [(&Matrix, u64); 3],
        rows: [usize; 3],
        x: u64,
        out_f32: u64,
        out_t: u64,
        mode: i32,
    ) -> Launch {
        let m0 = ms[0].0;
        let args = GemvArgs {
            rows0: rows[0] as i64,
            rows1: rows[1] as i64,
            rows2: rows[2] as i64,
            row_bytes: m0.row_bytes,
            cols: m0.cols as i32,
            mode,
            vec: ms.iter().all(|(m, _)| m.vec) as i32,
        };
        let out_rows = if mode == 2 {
            rows[0]
        } else {
            rows.iter().sum()
        };
        Launch {
            module: m0.module,
            name: format!("capstan_step_gemv_{}_{}", m0.format, self.suffix),
            grid: ((out_rows as u32).div_ceil(GEMV_ROWS), 1, 1),
            block: (32 * GEMV_ROWS, 1, 1),
            shared: 0,
            args: vec![
                Arg::Ptr(ms[0].0.ptr),
                Arg::Ptr(ms[1].0.ptr),
                Arg::Ptr(ms[2].0.ptr),
                Arg::Ptr(ms[0].1),
                Arg::Ptr(ms[1].1),
                Arg::Ptr(ms[2].1),
                Arg::Ptr(x),
                Arg::Ptr(out_f32),
                Arg::Ptr(out_t),
                Arg::Gemv(args),
            ],
        }
    }

    /// Decoding attention of the one query row against a layer's cache (its tables' entries
    /// at `tables`), keys split `splits` ways, merged by a second launch.
    fn attention(&self, tables: (u64, u64, u64), lens: u64, splits: usize) -> Vec<Launch> {
        let d = self.dims;
        let b = self.buf;
        let args = DecodeArgs {
            heads: d.heads as i32,
            kv_heads: d.kv_heads as i32,
            dim: d.head_dim as i32,
            scale: 1.0 / (d.head_dim as f32).sqrt(),
            splits: splits as i32,
        };
        let mut out = vec![Launch {
            module: "attention_decode",
            name: format!("capstan_attention_decode_{}", self.suffix),
            grid: (d.heads as u32, 1, splits as u32),
            block: (32 * DECODE_WARPS as u32, 1, 1),
            shared: (DECODE_WARPS * (2 + d.head_dim) * 4) as u32,
            args: vec![
                Arg::Ptr(b.q),
                Arg::Ptr(tables.0),
                Arg::Ptr(tables.1),
                Arg::Ptr(lens),
                Arg::Ptr(tables.2),
                Arg::Ptr(b.attn),
                Arg::Ptr(b.partial),
                Arg::Decode(args),
            ],
        }];
        if splits > 1 {
            out.push(Launch {
                module: "attention_decode",
                name: format!("capstan_attention_decode_merge_{}", self.suffix),
                grid: (d.heads as u32, 1, 1),
                block: (32, 1, 1),
                shared: 0,
                args: vec![Arg::Ptr(b.partial), Arg::Ptr(b.attn), Arg::Decode(args)],
            });
        }
        out
    }
}

impl Matrix {
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
        })
    }
}
