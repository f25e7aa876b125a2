//! Attention patterns as visibility rules over absolute positions, shared by the CPU
//! references and (through [`HeadRule`] tables and the same formulas) the CUDA kernels.
//!
//! Every rule is causal-safe: a query at position `i` never sees a key at `p > i` unless the
//! attention is non-causal cross-attention.

/// Per-query-head rule of the SCCA family (SCCA paper, sections 3 and 4), as used by
/// [`Pattern::Scca`].
///
/// A key at absolute position `p` is visible to a query at `i >= p` when
/// - `chunk > 0`: the key, shifted right by `shift` (the roll of K and V), lands in the query's
///   chunk: `(p + shift) / chunk == i / chunk`. When the shifted chunk lies wholly before
///   position 0 (`(i / chunk + 1) * chunk <= shift`: the roll wrapped it around to the end of
///   the sequence, i.e. to later tokens) the head uses its own chunk (`shift = 0`) instead, so no
///   query is left without keys;
/// - `dilation > 1`: `p % dilation == offset` or `p == i` (shifted dilated attention; the query
///   always sees itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRule {
    /// Chunk length `w` (0: no chunking).
    pub chunk: u32,
    /// Right shift of this head's keys and values.
    pub shift: u32,
    /// Dilation distance (1: none).
    pub dilation: u32,
    /// Start offset of the dilated selection (`< dilation`).
    pub offset: u32,
}

/// Which SCCA-family pattern, expanded into per-head [`HeadRule`]s by [`scca_rules`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SccaKind {
    /// SCCA_fixed: the first half of the heads shifted by `chunk / 2`, the rest unshifted.
    Fixed,
    /// SCCA_flow: heads split into `groups` equal groups; group `g` shifted by `g * chunk`.
    Flow {
        /// Number of head groups (the paper's `m`, 4 in its experiments).
        groups: u32,
    },
    /// Shifted dilated attention over the whole sequence: head `h` keeps positions
    /// `p % dilation == h % dilation`.
    Dilated {
        /// Dilation distance.
        dilation: u32,
    },
    /// LongMixed (section 4): the first quarter of the heads SDA with dilation 2, the next half
    /// SDA with dilation 4, the last quarter SCCA_fixed.
    Mixed,
}

/// The per-head rules of an SCCA-family pattern for `n_heads` query heads.
pub fn scca_rules(kind: SccaKind, chunk: u32, n_heads: usize) -> Vec<HeadRule> {
    let plain = HeadRule {
        chunk,
        shift: 0,
        dilation: 1,
        offset: 0,
    };
    let dilated = |h: usize, d: u32| HeadRule {
        chunk: 0,
        shift: 0,
        dilation: d,
        offset: (h % d as usize) as u32,
    };
    (0..n_heads)
        .map(|h| match kind {
            SccaKind::Fixed => HeadRule {
                shift: if h < n_heads / 2 { chunk / 2 } else { 0 },
                ..plain
            },
            SccaKind::Flow { groups } => {
                let groups = (groups.max(1) as usize).min(n_heads);
                let g = h * groups / n_heads;
                HeadRule {
                    shift: g as u32 * chunk,
                    ..plain
                }
            }
            SccaKind::Dilated { dilation } => dilated(h, dilation.max(1)),
            SccaKind::Mixed => {
                let q = n_heads / 4;
                if h < q {
                    dilated(h, 2)
                } else if h < 3 * q {
                    dilated(h, 4)
                } else {
                    let fixed_heads = n_heads - 3 * q;
                    HeadRule {
                        shift: if h - 3 * q < fixed_heads / 2 {
                            chunk / 2
                        } else {
                            0
                        },
                        ..plain
                    }
                }
            }
        })
        .collect()
}

/// An attention pattern of one layer.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// Full causal attention.
    Causal,
    /// Zebra local attention: the query at `i` sees keys `i - window < p <= i` (the `window`
    /// most recent tokens, itself included), computed blockwise (Zebra paper, Appendix A:
    /// blocks of `window` tokens, each attending to itself and the block before it).
    Local {
        /// Window `w` in tokens.
        window: u32,
    },
    /// SelfExtend: keys with `i - p < neighbor` are scored with the normally rotated query and
    /// key; farther keys with the grouped ones (key at `p / group`, query at
    /// `i / group + neighbor - neighbor / group`), passed as `q_grouped` / `k_grouped`.
    SelfExtend {
        /// Neighbour window `w_n`.
        neighbor: u32,
        /// Group size `G`.
        group: u32,
    },
    /// SCCA family: one [`HeadRule`] per query head.
    Scca(Vec<HeadRule>),
    /// Non-causal cross-attention (CAPE): every key visible unless masked as padding.
    Cross,
}

impl Pattern {
    /// Whether the pattern is causal.
    pub fn is_causal(&self) -> bool {
        !matches!(self, Pattern::Cross)
    }
}

/// Key rows processed per tile, by the CPU reference and the CUDA kernel alike.
pub const TILE: usize = 16;

/// The shift a head actually applies to a query at `i` (see [`HeadRule`]).
pub fn effective_shift(rule: &HeadRule, i: u64) -> u64 {
    if rule.chunk == 0 {
        return 0;
    }
    let c = i / rule.chunk as u64;
    if (c + 1) * rule.chunk as u64 <= rule.shift as u64 {
        0
    } else {
        rule.shift as u64
    }
}

/// Half-open range of absolute key positions a query at `i` may see (before the per-key rule):
/// this is what lets the kernels skip whole tiles.
pub fn key_range(pattern: &Pattern, head: usize, i: u64) -> (u64, u64) {
    match pattern {
        Pattern::Causal | Pattern::SelfExtend { .. } => (0, i + 1),
        Pattern::Cross => (0, u64::MAX),
        Pattern::Local { window } => {
            // Blockwise form: the query's block and the block before it.
            let w = (*window).max(1) as u64;
            let block = i / w;
            (block.saturating_sub(1) * w, i + 1)
        }
        Pattern::Scca(rules) => {
            let r = &rules[head];
            if r.chunk == 0 {
                return (0, i + 1);
            }
            let w = r.chunk as u64;
            let s = effective_shift(r, i);
            let c = i / w;
            ((c * w).saturating_sub(s), ((c + 1) * w - s).min(i + 1))
        }
    }
}

/// Whether the key at absolute `p` is visible to the query at `i` in query head `head`
/// (inside [`key_range`]; padding is applied separately).
pub fn visible(pattern: &Pattern, head: usize, i: u64, p: u64) -> bool {
    match pattern {
        Pattern::Cross => true,
        Pattern::Causal | Pattern::SelfExtend { .. } => p <= i,
        Pattern::Local { window } => p <= i && i - p < (*window).max(1) as u64,
        Pattern::Scca(rules) => {
            let r = &rules[head];
            if p > i {
                return false;
            }
            if r.chunk > 0 {
                let w = r.chunk as u64;
                if (p + effective_shift(r, i)) / w != i / w {
                    return false;
                }
            }
            r.dilation <= 1 || p % r.dilation as u64 == r.offset as u64 || p == i
        }
    }
}
