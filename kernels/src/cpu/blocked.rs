//! The attention the CPU runs: [`super::attention`]'s arithmetic (tiles of keys, an online
//! softmax, f32 accumulation, every pattern) made fast. Calls of [`TILED_ROWS`] query rows or
//! more go to [`super::tiled`], fewer (decoding steps) to [`super::rows`]. Heads, blocks of
//! query rows and (for the per-row path) splits of the keys run on the thread pool; the query
//! heads that share a key head read each key and value once (grouped-query attention; SCCA's
//! heads differ and run alone); keys and values are read where they lie (a KV cache's buffer,
//! never copied); the arithmetic is vectorised (AVX2 + FMA, AVX-512, picked at run time).
//! Equal to the reference up to rounding (tested for every pattern).

use rayon::prelude::*;

use super::rows::{merge, Rows, Sink, SPLIT_KEYS};
use super::tiled::{PackedKeys, TileIsa, Tiled, QUERY_BLOCK as TILED_BLOCK, TILED_ROWS};
use super::{AttnDims, AttnExtras, AttnPositions, OutPtr};
use crate::pattern::Pattern;

/// Query rows per task.
const QUERY_BLOCK: usize = 16;

/// [`super::attention`], threaded and vectorised. Returns `(batch, heads, q_len, dim)`.
pub fn attention_blocked(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &Pattern,
    extras: AttnExtras<'_>,
) -> Vec<f32> {
    attention_blocked_on(TileIsa::best(), q, k, v, dims, pos, pattern, extras)
}

/// [`attention_blocked`] with the tiled path on `isa` (for tests and probes of each one;
/// `isa` must be available on this CPU, else the portable form runs).
#[allow(clippy::too_many_arguments)]
pub fn attention_blocked_on(
    isa: TileIsa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &Pattern,
    extras: AttnExtras<'_>,
) -> Vec<f32> {
    let isa = if isa.available() {
        isa
    } else {
        TileIsa::Portable
    };
    let AttnDims {
        batch,
        heads,
        q_len,
        dim,
        ..
    } = dims;
    let mut out = vec![0f32; batch * heads * q_len * dim];
    if out.is_empty() {
        return out;
    }
    let ptr = OutPtr(out.as_mut_ptr());
    if q_len >= TILED_ROWS {
        let tiled = Tiled {
            isa,
            q,
            v,
            dims,
            pos,
            pattern,
            extras,
            keys: PackedKeys::pack(k, dims, pos.k_pos0),
            grouped: match (pattern, extras.k_grouped) {
                (Pattern::SelfExtend { .. }, Some(kg)) => {
                    Some(PackedKeys::pack(kg, dims, pos.k_pos0))
                }
                _ => None,
            },
        };
        let tasks = Tasks::new(dims, pattern, TILED_BLOCK, 1);
        (0..tasks.count()).into_par_iter().for_each(|i| {
            let t = tasks.get(i);
            // SAFETY: each task writes its own heads' rows `r0..r1`, inside `out`.
            unsafe { tiled.run(t.b, t.h0, tasks.group, t.r0, t.r1, ptr) };
        });
        return out;
    }
    // Each row's keys in splits (a decoding step's tasks), merged below.
    let splits = dims.kv_len.div_ceil(SPLIT_KEYS).max(1);
    let tasks = Tasks::new(dims, pattern, QUERY_BLOCK, splits);
    let (mut accs, mut states) = if splits > 1 {
        let entries = batch * heads * q_len * splits;
        (vec![0f32; entries * dim], vec![0f32; 2 * entries])
    } else {
        (Vec::new(), Vec::new())
    };
    let (accs_ptr, states_ptr) = (OutPtr(accs.as_mut_ptr()), OutPtr(states.as_mut_ptr()));
    let run = |i: usize| {
        let t = tasks.get(i);
        let rows = Rows {
            isa,
            q,
            k,
            v,
            dims,
            pos,
            pattern,
            extras,
            b: t.b,
            h0: t.h0,
            group: tasks.group,
        };
        let sink = if splits > 1 {
            Sink::Partial {
                accs: accs_ptr,
                states: states_ptr,
                splits,
                sp: t.sp,
            }
        } else {
            Sink::Out(ptr)
        };
        let keys = (t.sp * SPLIT_KEYS, (t.sp + 1) * SPLIT_KEYS);
        // SAFETY: each task writes its own heads' rows `r0..r1` (of its split), inside `out`
        // (or the split buffers).
        unsafe { rows.run(t.r0, t.r1, keys, sink) };
    };
    if batch * heads * q_len * dims.kv_len * dim < 1 << 15 {
        (0..tasks.count()).for_each(run);
    } else {
        (0..tasks.count()).into_par_iter().for_each(run);
    }
    if splits > 1 {
        merge(&accs, &states, splits, dim, &mut out);
    }
    out
}

/// How a call splits into tasks on the thread pool: blocks of `block` query rows of `group`
/// heads that share a key head, against one of `splits` ranges of keys. All the heads of a key
/// head attend together, unless their key ranges differ (SCCA) or there would be too few tasks
/// to keep the threads busy (a short decoding step of a model with three key heads on two
/// threads: measured slower grouped).
struct Tasks {
    heads: usize,
    q_len: usize,
    block: usize,
    blocks: usize,
    splits: usize,
    group: usize,
    groups: usize,
}

/// One task: query rows `r0..r1` of heads `h0..h0 + group` of batch row `b`, against split
/// `sp` of the keys.
struct Task {
    b: usize,
    h0: usize,
    r0: usize,
    r1: usize,
    sp: usize,
}

impl Tasks {
    fn new(dims: AttnDims, pattern: &Pattern, block: usize, splits: usize) -> Self {
        let AttnDims {
            batch,
            heads,
            kv_heads,
            q_len,
            ..
        } = dims;
        let blocks = q_len.div_ceil(block);
        let group = if matches!(pattern, Pattern::Scca(_))
            || batch * kv_heads * blocks * splits < 4 * rayon::current_num_threads()
        {
            1
        } else {
            heads / kv_heads
        };
        Self {
            heads,
            q_len,
            block,
            blocks,
            splits,
            group,
            groups: batch * heads / group,
        }
    }

    fn count(&self) -> usize {
        self.groups * self.blocks * self.splits
    }

    fn get(&self, task: usize) -> Task {
        let per_group = self.blocks * self.splits;
        let (g, rest) = (task / per_group, task % per_group);
        let (blk, sp) = (rest / self.splits, rest % self.splits);
        let r0 = blk * self.block;
        Task {
            b: g * self.group / self.heads,
            h0: g * self.group % self.heads,
            r0,
            r1: (r0 + self.block).min(self.q_len),
            sp,
        }
    }
}
