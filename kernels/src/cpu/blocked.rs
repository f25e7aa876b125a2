//! The attention the CPU runs: [`super::attention`]'s arithmetic (tiles of keys, an online
//! softmax, f32 accumulation, every pattern) made fast. Calls of [`TILED_ROWS`] query rows or
//! more go to [`super::tiled`], fewer (decoding steps) to [`super::rows`]. Heads, blocks of
//! query rows and (for the per-row path) splits of the keys run on the thread pool; the query
//! heads that share a key head read each key and value once (grouped-query attention; SCCA's
//! heads differ and run alone); keys and values are read where they lie (a KV cache's buffer,
//! never copied); the arithmetic is vectorised (AVX2 + FMA, AVX-512, picked at run time).
//! Equal to the reference up to rounding (tested for every pattern).

use rayon::prelude::*;

use super::kv::KvElement;
use super::rows::{merge, Rows, Sink, SPLIT_KEYS};
use super::tiled::{PackedKeys, TileIsa, Tiled, QUERY_BLOCK as TILED_BLOCK, TILED_ROWS};
use super::{AttnDims, AttnExtras, AttnPositions, OutPtr};
use crate::pattern::Pattern;

/// Query rows per task.
const QUERY_BLOCK: usize = 16;

/// [`super::attention`], threaded and vectorised, with keys and values in f32 or f16
/// ([`KvElement`]). Returns `(batch, heads, q_len, dim)`.
pub fn attention_blocked<E: KvElement>(
    q: &[f32],
    k: &[E],
    v: &[E],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &Pattern,
    extras: AttnExtras<'_, E>,
) -> Vec<f32> {
    attention_blocked_on(TileIsa::best(), q, k, v, dims, pos, pattern, extras)
}

/// [`attention_blocked`] with the tiled path on `isa` (for tests and probes of each one;
/// `isa` must be available on this CPU, else the portable form runs).
#[allow(clippy::too_many_arguments)]
pub fn attention_blocked_on<E: KvElement>(
    isa: TileIsa,
    q: &[f32],
    k: &[E],
    v: &[E],
    dims: AttnDims,
    pos: AttnPositions,
    pattern: &Pattern,
    extras: AttnExtras<'_, E>,
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
    let call = RowsCall {
        q,
        k,
        v,
        dims,
        pos,
        pattern,
        extras,
    };
    let mut job = RowsJob::new(isa, call);
    let run = |i: usize| {
        // SAFETY: each task writes its own rows (of its split) of `out` or `job`'s buffers.
        unsafe { job.run(i, ptr) };
    };
    if batch * heads * q_len * dims.kv_len * dim < 1 << 15 {
        (0..job.tasks.count()).for_each(run);
    } else {
        (0..job.tasks.count()).into_par_iter().for_each(run);
    }
    job.merge(&mut out);
    out
}

/// One call of [`attention_rows_many`]: what [`attention_blocked`] takes.
#[derive(Clone, Copy)]
pub struct RowsCall<'a, E = f32> {
    /// Queries, `(batch, heads, q_len, dim)`.
    pub q: &'a [f32],
    /// Keys, `(batch, kv_heads, kv_stride, dim)` (a KV cache's buffer, read in place).
    pub k: &'a [E],
    /// Values, shaped as the keys.
    pub v: &'a [E],
    /// Shapes.
    pub dims: AttnDims,
    /// Positions and scale.
    pub pos: AttnPositions,
    /// Who sees whom.
    pub pattern: &'a Pattern,
    /// The pattern's extra inputs.
    pub extras: AttnExtras<'a, E>,
}

/// [`attention_blocked`] of several calls of fewer than [`TILED_ROWS`] query rows each (the
/// sequences of a batched decoding step, each reading its own KV cache), as one pass of the
/// thread pool over all their tasks: one call per sequence would pay the pool's start and end
/// once per sequence and layer, for a few microseconds of work each. Each call's output is
/// what it gets alone, bit for bit (its rows, splits and merge are the same).
pub fn attention_rows_many<E: KvElement>(calls: &[RowsCall<'_, E>]) -> Vec<Vec<f32>> {
    let isa = TileIsa::best();
    let mut outs: Vec<Vec<f32>> = calls
        .iter()
        .map(|c| vec![0f32; c.dims.batch * c.dims.heads * c.dims.q_len * c.dims.dim])
        .collect();
    let mut jobs: Vec<(RowsJob<E>, OutPtr)> = calls
        .iter()
        .zip(outs.iter_mut())
        .map(|(c, out)| {
            assert!(
                c.dims.q_len < TILED_ROWS,
                "attention_rows_many: a call of {} rows",
                c.dims.q_len
            );
            let job = RowsJob::new(isa, *c);
            (job, OutPtr(out.as_mut_ptr()))
        })
        .collect();
    // Task `i` of the pass is task `i - starts[c]` of call `c`.
    let mut starts = Vec::with_capacity(jobs.len());
    let mut total = 0;
    for (job, _) in &jobs {
        starts.push(total);
        total += job.tasks.count();
    }
    (0..total).into_par_iter().for_each(|i| {
        let c = starts.partition_point(|&s| s <= i) - 1;
        let (job, out) = &jobs[c];
        // SAFETY: each task writes its own rows (of its split) of its call's output or buffers.
        unsafe { job.run(i - starts[c], *out) };
    });
    for ((job, _), out) in jobs.iter_mut().zip(outs.iter_mut()) {
        job.merge(out);
    }
    outs
}

/// The per-row path of one call: its tasks (rows of heads against splits of the keys) and the
/// split buffers they write, merged after.
struct RowsJob<'a, E> {
    rows: Rows<'a, E>,
    tasks: Tasks,
    splits: usize,
    accs: Vec<f32>,
    states: Vec<f32>,
    ptrs: (OutPtr, OutPtr),
}

impl<'a, E: KvElement> RowsJob<'a, E> {
    fn new(isa: TileIsa, call: RowsCall<'a, E>) -> Self {
        let RowsCall {
            q,
            k,
            v,
            dims,
            pos,
            pattern,
            extras,
        } = call;
        // Each row's keys in splits (a decoding step's tasks), merged after.
        let splits = dims.kv_len.div_ceil(SPLIT_KEYS).max(1);
        let tasks = Tasks::new(dims, pattern, QUERY_BLOCK, splits);
        let (mut accs, mut states) = if splits > 1 {
            let entries = dims.batch * dims.heads * dims.q_len * splits;
            (vec![0f32; entries * dims.dim], vec![0f32; 2 * entries])
        } else {
            (Vec::new(), Vec::new())
        };
        let ptrs = (OutPtr(accs.as_mut_ptr()), OutPtr(states.as_mut_ptr()));
        let rows = Rows {
            isa,
            q,
            k,
            v,
            dims,
            pos,
            pattern,
            extras,
            b: 0,
            h0: 0,
            group: tasks.group,
        };
        Self {
            rows,
            tasks,
            splits,
            accs,
            states,
            ptrs,
        }
    }

    /// Task `i`.
    ///
    /// # Safety
    /// `out` holds the call's `(batch, heads, q_len, dim)` output; no other thread runs task
    /// `i` at the same time.
    unsafe fn run(&self, i: usize, out: OutPtr) {
        let t = self.tasks.get(i);
        let rows = Rows {
            b: t.b,
            h0: t.h0,
            ..self.rows
        };
        let sink = if self.splits > 1 {
            Sink::Partial {
                accs: self.ptrs.0,
                states: self.ptrs.1,
                splits: self.splits,
                sp: t.sp,
            }
        } else {
            Sink::Out(out)
        };
        let keys = (t.sp * SPLIT_KEYS, (t.sp + 1) * SPLIT_KEYS);
        // SAFETY: the task's rows `r0..r1` (of its split) are its own.
        unsafe { rows.run(t.r0, t.r1, keys, sink) };
    }

    /// The splits' sums into `out` (nothing to do without splits).
    fn merge(&mut self, out: &mut [f32]) {
        if self.splits > 1 {
            merge(
                &self.accs,
                &self.states,
                self.splits,
                self.rows.dims.dim,
                out,
            );
        }
    }
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
