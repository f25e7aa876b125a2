//! The decoding step's static buffers and per-step state as the kernels see them: the buffers'
//! addresses and sizes, the tables of each sequence's caches, each sequence's token, position
//! and key count as bytes.

use super::decode_grid::{splits, DecodeKernel};
use super::StepDims;

/// The static buffers' addresses, each holding a row per sequence of the largest batch the
/// buffers were sized for (rows packed from the first: a batch of `n` uses the first `n`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferAddrs {
    /// f32 residual stream `(batch, hidden)`.
    pub(crate) x: u64,
    /// A normed activation `(batch, hidden)`, the model's type.
    pub(crate) h: u64,
    /// f32 q, k and v products, `(batch, q + k + v)`.
    pub(crate) qkv: u64,
    /// Rotated queries, the model's type.
    pub(crate) q: u64,
    /// Attention output, the model's type.
    pub(crate) attn: u64,
    /// f32 gate products `(batch, intermediate)`, then the up products (when their formats
    /// differ).
    pub(crate) gu: u64,
    /// SwiGLU output `(batch, intermediate)`, the model's type.
    pub(crate) act: u64,
    /// f32 logits `(batch, vocab)`.
    pub(crate) logits: u64,
    /// Attention's per-split partial results.
    pub(crate) partial: u64,
    /// Attention's count of finished splits per (sequence, head), i32, zero between launches.
    pub(crate) counters: u64,
    /// The state ([`state_bytes`]): `batch` tokens, positions, cache rows, key counts (i32).
    pub(crate) state: u64,
    /// Per layer, per sequence: keys' and values' first cached row (u64), the buffers'
    /// capacities (i32).
    pub(crate) kptr: u64,
    pub(crate) vptr: u64,
    pub(crate) caps: u64,
    /// f32 RoPE inverse frequencies.
    pub(crate) inv_freq: u64,
    /// f32 sums of squares of the residual, a slot per RMSNorm of the step (two a layer, then
    /// the final one), `batch` each: one sequence's step folds its norms into the products.
    pub(crate) ss: u64,
}

impl BufferAddrs {
    /// Indices of [`BufferAddrs::sizes`] of the buffers the host writes or reads.
    pub(crate) const LOGITS: usize = 7;
    pub(crate) const STATE: usize = 9;
    pub(crate) const KPTR: usize = 10;
    pub(crate) const VPTR: usize = 11;
    pub(crate) const CAPS: usize = 12;
    pub(crate) const INV_FREQ: usize = 13;
    pub(crate) const SS: usize = 14;
    pub(crate) const COUNTERS: usize = 15;

    /// Each buffer's bytes for a model of `dims` with `layers` layers and `elem`-byte
    /// activations, for batches of up to `batch` sequences, in field order.
    pub(crate) fn sizes(dims: &StepDims, layers: usize, elem: usize, batch: usize) -> [usize; 16] {
        let d = dims;
        let (qw, kvw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        // One sequence splits its keys the most, on the kernel of the fewest blocks (the
        // tensor-core kernel's 8 heads a block, or the grouped kernel's 4).
        let fewest = [DecodeKernel::Grouped, DecodeKernel::TensorCores]
            .map(|k| k.blocks(d.heads, d.kv_heads))
            .into_iter()
            .min()
            .expect("two kernels");
        let max_splits = splits(fewest, usize::MAX / 2);
        let (l, n) = (layers.max(1), batch.max(1));
        [
            4 * d.hidden * n,
            elem * d.hidden * n,
            4 * (qw + 2 * kvw) * n,
            elem * qw * n,
            elem * qw * n,
            4 * 2 * d.intermediate * n,
            elem * d.intermediate * n,
            4 * d.vocab * n,
            4 * d.heads * max_splits * (2 + d.head_dim) * n,
            16 * n,
            8 * l * n,
            8 * l * n,
            4 * l * n,
            4 * (d.head_dim / 2),
            4 * (2 * l + 1) * n,
            4 * d.heads * n,
        ]
    }

    /// The buffers at the given addresses (field order, as [`BufferAddrs::sizes`]).
    pub(crate) fn from_addrs(a: [u64; 16]) -> Self {
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
            ss: a[Self::SS],
            counters: a[Self::COUNTERS],
        }
    }
}

/// A layer's cache as the tables hold it: the keys' first cached row, the values', and the
/// buffers' capacity in rows.
pub(crate) type LayerCache = (u64, u64, usize);

/// Where each sequence's caches are, as the tables the kernels read them from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheTables {
    /// Per sequence, per layer: the keys' and values' first cached row, and the buffers'
    /// capacity.
    pub(crate) seqs: Vec<Vec<LayerCache>>,
    /// The ranges attention_decode.cu splits the keys into, for the batch and the smallest
    /// capacity (fixed while the caches stay where they are: a graph replays it as the keys
    /// grow).
    pub(crate) splits: usize,
}

impl CacheTables {
    /// The caches of every sequence's layers, for decoding attention of `blocks` blocks a
    /// sequence and range of keys ([`Layout::decode_blocks`]).
    pub(crate) fn new(seqs: Vec<Vec<LayerCache>>, blocks: usize) -> Self {
        let smallest = seqs.iter().flatten().map(|l| l.2).min().unwrap_or(1);
        Self {
            splits: splits(blocks * seqs.len().max(1), smallest),
            seqs,
        }
    }

    /// Sequences.
    pub(crate) fn batch(&self) -> usize {
        self.seqs.len()
    }

    /// What a step's launches depend on besides the buffers: the batch and the key splits
    /// (the cache addresses are read from the tables, not launch arguments).
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.batch(), self.splits)
    }

    /// The bytes of the key, value and capacity tables ([`BufferAddrs::kptr`], `vptr`,
    /// `caps`), as the host writes them: layer after layer, each with every sequence's entry.
    pub(crate) fn tables(&self) -> [Vec<u8>; 3] {
        let layers = self.seqs.first().map_or(0, Vec::len);
        let each = |f: &dyn Fn(&LayerCache) -> Vec<u8>| -> Vec<u8> {
            (0..layers)
                .flat_map(|i| self.seqs.iter().flat_map(move |s| f(&s[i])))
                .collect()
        };
        [
            each(&|x| x.0.to_le_bytes().to_vec()),
            each(&|x| x.1.to_le_bytes().to_vec()),
            each(&|x| (x.2 as i32).to_le_bytes().to_vec()),
        ]
    }
}

/// One sequence's share of a step: its token at position `pos` after `len` cached rows (it
/// writes row `len`, and attention then reads `len + 1` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeqState {
    pub(crate) token: u32,
    pub(crate) pos: usize,
    pub(crate) len: usize,
}

/// The bytes of the state ([`BufferAddrs::state`]) of a batch: every sequence's token, then
/// every position, every cache row written, every key count.
pub(crate) fn state_bytes(seqs: &[SeqState]) -> Vec<u8> {
    let field = |f: &dyn Fn(&SeqState) -> i32| seqs.iter().map(f).collect::<Vec<_>>();
    [
        field(&|s| s.token as i32),
        field(&|s| s.pos as i32),
        field(&|s| s.len as i32),
        field(&|s| s.len as i32 + 1),
    ]
    .concat()
    .iter()
    .flat_map(|x| x.to_le_bytes())
    .collect()
}

/// Little-endian bytes of f32 values (the RoPE frequencies, biases).
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
