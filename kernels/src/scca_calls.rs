//! The SCCA family's chunked heads as cuDNN fused-attention calls (`crate::sdpa_graph`).
//!
//! A head whose rule is a chunk `w` and a shift `s` (SCCA_fixed, SCCA_flow, LongMixed's fixed
//! heads: [`HeadRule`]) lets a query in chunk `c`, at `[cw, (c+1)w)`, see the keys
//! `[cw - s, (c+1)w - s)` not after it. So each query chunk is a small causal attention whose
//! diagonal is shifted by `s`: `row + (q0 - k0) >= col` for its first query `q0` and first key
//! `k0`. Chunks of one shape, a chunk apart in queries, keys, values and output alike, are one
//! call batched over them and read and written in place (`SdpaBatch::Chunks`); the ragged ones
//! (a shifted head's first chunk, whose keys start at 0; a last partial chunk; a prompt chunk
//! starting mid-chunk) are calls of their own. Heads of one rule go together, which needs their
//! group to start and end on a key head's boundary (grouped-query heads). Dilated heads are not
//! a band of the scores: patterns with them run on Capstan's kernels.

use crate::pattern::{effective_shift, HeadRule};
use crate::sdpa_graph::{SdpaBatch, SdpaKey, SdpaMask};

/// One cuDNN call of an SCCA attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SccaCall {
    /// Its graph's key (`SdpaBatch::Chunks`).
    pub(crate) key: SdpaKey,
    /// Its first query (and output) row, counted from the queries' first, in rows of `dim`.
    pub(crate) q_row: i64,
    /// Its first key (and value) row, counted from the keys' first, in rows of `dim`.
    pub(crate) kv_row: i64,
}

/// More calls than this (tiny chunks over a long prompt) run on Capstan's kernels instead:
/// each call is a launch and, per new shape, a plan.
pub(crate) const MAX_CALLS: usize = 64;

/// Fewest query rows of a call, as for every call Capstan sends to cuDNN
/// (`crate::sdpa_graph::sdpa_mask`): a chunk with fewer (a prompt ending or starting just past
/// a chunk's edge) sends the whole attention to Capstan's kernels.
pub(crate) const MIN_ROWS: u64 = 16;

/// The query rows of one chunk and the keys they may see, as absolute positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    q0: u64,
    q_rows: u64,
    k0: u64,
    k_rows: u64,
}

impl Piece {
    /// The same shape as `next`, which starts a chunk `w` later in queries and keys alike.
    fn batches_with(&self, next: &Piece, w: u64) -> bool {
        (self.q_rows, self.k_rows, self.q0 - self.k0)
            == (next.q_rows, next.k_rows, next.q0 - next.k0)
            && next.q0 == self.q0 + w
    }
}

/// The chunks of the queries `[q_pos0, q_pos0 + q_len)` under `rule`, over the keys
/// `[k_pos0, k_pos0 + kv_len)`; `None` when a chunk's rows would see no key.
fn pieces(
    rule: &HeadRule,
    q_pos0: u64,
    q_len: u64,
    k_pos0: u64,
    kv_len: u64,
) -> Option<Vec<Piece>> {
    let w = rule.chunk as u64;
    let (q_end, k_end) = (q_pos0 + q_len, k_pos0 + kv_len);
    let mut out = Vec::new();
    let mut c = q_pos0 / w;
    while c * w < q_end {
        let q0 = (c * w).max(q_pos0);
        let q1 = ((c + 1) * w).min(q_end);
        // Every query of a chunk applies the same shift.
        let s = effective_shift(rule, c * w);
        let k0 = (c * w).saturating_sub(s).max(k_pos0);
        // Keys after the chunk's last query are never visible.
        let k1 = ((c + 1) * w - s).min(q1).min(k_end);
        if k1 <= k0 || k0 > q0 || q1 - q0 < MIN_ROWS {
            return None;
        }
        out.push(Piece {
            q0,
            q_rows: q1 - q0,
            k0,
            k_rows: k1 - k0,
        });
        c += 1;
    }
    Some(out)
}

/// The cuDNN calls computing SCCA attention with per-head `rules` for a call of `base`'s
/// shape (packed batch, no mask; `crate::cuda`'s base key), its queries from absolute
/// position `q_pos0` and its keys from `k_pos0`. Each query row of each head is written by
/// exactly one call. `None` where the pattern or shape is not expressible: a dilated or
/// unchunked head, a group of heads not on key-head boundaries, a head width cuDNN does not
/// fuse, a chunk of fewer than [`MIN_ROWS`] query rows (decoding rows among them), or more than
/// [`MAX_CALLS`] calls.
pub(crate) fn scca_calls(
    rules: &[HeadRule],
    base: &SdpaKey,
    q_pos0: u64,
    k_pos0: u64,
) -> Option<Vec<SccaCall>> {
    let (h, hk, d) = (base.heads as usize, base.kv_heads as usize, base.dim);
    if rules.len() != h
        || hk == 0
        || !h.is_multiple_of(hk)
        || d <= 0
        || d % 8 != 0
        || d > 128
        || base.q_len < 16
        || base.kv_len <= 0
        || base.batch_layout != SdpaBatch::Packed
        || rules.iter().any(|r| r.chunk == 0 || r.dilation > 1)
    {
        return None;
    }
    let group = h / hk;
    let mut calls = Vec::new();
    let mut h0 = 0;
    while h0 < h {
        let rule = rules[h0];
        let h1 = (h0..h)
            .find(|&x| (rules[x].chunk, rules[x].shift) != (rule.chunk, rule.shift))
            .unwrap_or(h);
        if !h0.is_multiple_of(group) || !h1.is_multiple_of(group) {
            return None;
        }
        let pieces = pieces(&rule, q_pos0, base.q_len as u64, k_pos0, base.kv_len as u64)?;
        let w = rule.chunk as u64;
        for b in 0..base.batch as usize {
            let mut first = 0;
            while first < pieces.len() {
                let mut n = 1;
                while first + n < pieces.len()
                    && pieces[first + n - 1].batches_with(&pieces[first + n], w)
                {
                    n += 1;
                }
                let p = pieces[first];
                let shift = (p.q0 - p.k0) as i64;
                let mask = if shift + 1 >= p.k_rows as i64 {
                    SdpaMask::None
                } else if shift == 0 {
                    SdpaMask::Causal
                } else {
                    SdpaMask::CausalShifted { shift }
                };
                calls.push(SccaCall {
                    key: SdpaKey {
                        batch: n as i64,
                        heads: (h1 - h0) as i64,
                        kv_heads: ((h1 - h0) / group) as i64,
                        q_len: p.q_rows as i64,
                        kv_len: p.k_rows as i64,
                        mask,
                        window: 0,
                        stats: false,
                        batch_layout: SdpaBatch::Chunks {
                            step: w as i64,
                            q_head_rows: base.q_len,
                        },
                        ..*base
                    },
                    q_row: ((b * h + h0) as u64 * base.q_len as u64 + p.q0 - q_pos0) as i64,
                    kv_row: ((b * hk + h0 / group) as u64 * base.kv_stride as u64 + p.k0 - k_pos0)
                        as i64,
                });
                if calls.len() > MAX_CALLS {
                    return None;
                }
                first += n;
            }
        }
        h0 = h1;
    }
    Some(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{scca_rules, SccaKind};
    use crate::sdpa_graph::DataType;

    fn base(heads: i64, kv_heads: i64, q_len: i64, kv_len: i64) -> SdpaKey {
        SdpaKey {
            dtype: DataType::Bf16,
            batch: 1,
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride: kv_len,
            dim: 128,
            mask: SdpaMask::None,
            window: 0,
            stats: false,
            batch_layout: SdpaBatch::Packed,
        }
    }

    /// The benchmark's SCCA_fixed at 32K (chunks of 2,048, half the heads shifted by 1,024):
    /// three calls, the interior chunks batched.
    #[test]
    fn scca_fixed_at_32k_is_three_calls() {
        let n = 32768;
        let rules = scca_rules(SccaKind::Fixed, 2048, 32);
        let calls = scca_calls(&rules, &base(32, 8, n, n), 0, 0).expect("expressible");
        let shape: Vec<_> = calls
            .iter()
            .map(|c| {
                let k = c.key;
                (
                    k.batch, k.heads, k.kv_heads, k.q_len, k.kv_len, k.mask, c.q_row, c.kv_row,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                // Shifted heads: the first chunk sees keys 0..1,024 (its own start), then 15
                // chunks each see the 2,048 keys from half a chunk before them.
                (1, 16, 4, 2048, 1024, SdpaMask::Causal, 0, 0),
                (
                    15,
                    16,
                    4,
                    2048,
                    2048,
                    SdpaMask::CausalShifted { shift: 1024 },
                    2048,
                    1024
                ),
                // Unshifted heads: 16 causal chunks.
                (16, 16, 4, 2048, 2048, SdpaMask::Causal, 16 * n, 4 * n),
            ]
        );
    }

    /// Every query row of every head is written by exactly one call, and each call's rows
    /// see keys the rule lets them see (and, for the first row and the last, all of them).
    #[test]
    fn every_query_row_is_written_once() {
        let odd_shifts: Vec<HeadRule> = scca_rules(SccaKind::Fixed, 32, 8)
            .into_iter()
            .enumerate()
            .map(|(h, r)| HeadRule {
                shift: if h < 4 { 40 } else { 9 },
                ..r
            })
            .collect();
        let cases = [
            // A last chunk of 24 rows.
            (scca_rules(SccaKind::Fixed, 32, 8), 88, 88, 0),
            (scca_rules(SccaKind::Flow { groups: 2 }, 16, 8), 96, 96, 0),
            // Shifts past a chunk and not a multiple of it; and 72 rows after 40 cached keys,
            // starting mid-chunk.
            (odd_shifts.clone(), 112, 112, 0),
            (odd_shifts, 72, 112, 40),
            // A prompt chunk after 37 cached keys, starting mid-chunk.
            (scca_rules(SccaKind::Fixed, 32, 8), 50, 87, 37),
        ];
        for (rules, q_len, kv_len, q_pos0) in cases {
            let mut key = base(8, 2, q_len, kv_len);
            key.batch = 2;
            key.kv_stride = kv_len + 5;
            let calls = scca_calls(&rules, &key, q_pos0, 0).expect("expressible");
            let mut written = vec![0u32; (2 * 8 * q_len) as usize];
            for c in &calls {
                let k = c.key;
                let SdpaBatch::Chunks { step, q_head_rows } = k.batch_layout else {
                    panic!("chunks")
                };
                assert_eq!(q_head_rows, q_len);
                for n in 0..k.batch {
                    for hh in 0..k.heads {
                        for r in 0..k.q_len {
                            let row = c.q_row + n * step + hh * q_head_rows + r;
                            written[row as usize] += 1;
                            // The query's absolute head and position, and its keys'.
                            let head = (row / q_len % 8) as usize;
                            let i = q_pos0 + (row % q_len) as u64;
                            let k0 = (c.kv_row + n * step) % key.kv_stride;
                            let pattern = crate::Pattern::Scca(rules.clone());
                            let mut seen = 0;
                            for col in 0..k.kv_len {
                                let p = (k0 + col) as u64;
                                let masked = match k.mask {
                                    SdpaMask::None => true,
                                    SdpaMask::Causal => col <= r,
                                    SdpaMask::CausalShifted { shift } => col <= r + shift,
                                    other => panic!("{other:?}"),
                                };
                                let want = crate::visible(&pattern, head, i, p);
                                assert_eq!(masked, want, "head {head} query {i} key {p}");
                                seen += masked as usize;
                            }
                            // No visible key left out of the call.
                            let all = (0..kv_len as u64)
                                .filter(|&p| crate::visible(&pattern, head, i, p))
                                .count();
                            assert_eq!(seen, all, "head {head} query {i}");
                        }
                    }
                }
            }
            assert!(written.iter().all(|&x| x == 1), "{written:?}");
        }
    }

    #[test]
    fn what_scca_cannot_send_to_cudnn() {
        let n = 256;
        let key = base(8, 2, n, n);
        // Dilated heads (LongMixed, shifted dilated attention).
        let mixed = scca_rules(SccaKind::Mixed, 16, 8);
        assert!(scca_calls(&mixed, &key, 0, 0).is_none());
        let dilated = scca_rules(SccaKind::Dilated { dilation: 2 }, 16, 8);
        assert!(scca_calls(&dilated, &key, 0, 0).is_none());
        // A group of heads splitting a key head's four query heads.
        let mut split = scca_rules(SccaKind::Fixed, 16, 8);
        split[2].shift = 0;
        assert!(scca_calls(&split, &key, 0, 0).is_none());
        let fixed = scca_rules(SccaKind::Fixed, 16, 8);
        assert!(scca_calls(&fixed, &key, 0, 0).is_some());
        // A chunk of 6 rows at the end, or of 3 at the start after a cache.
        assert!(scca_calls(&fixed, &base(8, 2, 70, 70), 0, 0).is_none());
        assert!(scca_calls(&fixed, &base(8, 2, 61, 90), 29, 0).is_none());
        // A decoding row; a head width cuDNN does not fuse; more than MAX_CALLS calls (three
        // a sequence, 70 sequences).
        let decoding = base(8, 2, 1, n);
        assert!(scca_calls(&fixed, &decoding, n as u64 - 1, 0).is_none());
        let mut narrow = key;
        narrow.dim = 60;
        assert!(scca_calls(&fixed, &narrow, 0, 0).is_none());
        let mut many = key;
        many.batch = 70;
        assert!(scca_calls(&fixed, &many, 0, 0).is_none());
    }
}
