//! Attention patterns of the decoder's self-attention, selected per model (config.json's
//! `capstan_attention`) or at load time (`--attention`), and resolved per layer into the
//! kernels' [`Pattern`]s. One model, one enum: no copied model files.
//!
//! - `full`: plain causal attention.
//! - `zebra:every=L,window=W`: Zebra's grouped local-global layers (layer `l` global when
//!   `l % L == 0`, local with a window of `W` tokens elsewhere); local layers keep only the
//!   last `W` keys in the KV cache.
//! - `selfextend:group=G,window=WN`: SelfExtend in every layer (neighbour window `WN`, group
//!   size `G`); the cache also holds the keys rotated at grouped positions.
//! - `scca:fixed,chunk=W`, `scca:flow,chunk=W[,groups=M]` (default 4 groups, the paper's
//!   setting), `scca:sda,dilation=D`, `scca:mixed,chunk=W` (LongMixed): in every layer; the
//!   chunked ones keep only the last `W + largest shift` keys.

use std::fmt;
use std::str::FromStr;

use capstan_kernels::{scca_rules, Pattern, SccaKind};

use crate::config::LlamaConfig;
use crate::error::{Error, Result};

/// Context length at which [`AttentionPattern::kv_bytes_per_token`] is usually reported.
pub const KV_REPORT_CONTEXT: usize = 32 * 1024;

/// The self-attention pattern of a decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionPattern {
    /// Full causal attention in every layer.
    #[default]
    Full,
    /// Zebra grouped local-global attention.
    Zebra {
        /// Group size `L`: layer `l` is global when `l % L == 0`.
        every: usize,
        /// Local window in tokens.
        window: usize,
    },
    /// SelfExtend in every layer.
    SelfExtend {
        /// Group size `G`.
        group: usize,
        /// Neighbour window `w_n`.
        window: usize,
    },
    /// An SCCA-family pattern in every layer.
    Scca {
        /// Which one.
        kind: SccaKind,
        /// Chunk length (0 for shifted dilated attention).
        chunk: usize,
    },
}

impl AttentionPattern {
    /// Whether layer `layer` runs plain causal attention.
    pub fn is_full(&self, layer: usize) -> bool {
        match self {
            AttentionPattern::Full => true,
            AttentionPattern::Zebra { every, .. } => layer.is_multiple_of(*every),
            _ => false,
        }
    }

    /// The kernels' pattern for `layer` with `n_heads` query heads.
    pub fn layer_pattern(&self, layer: usize, n_heads: usize) -> Pattern {
        match *self {
            _ if self.is_full(layer) => Pattern::Causal,
            AttentionPattern::Zebra { window, .. } => Pattern::Local {
                window: window as u32,
            },
            AttentionPattern::SelfExtend { group, window } => Pattern::SelfExtend {
                neighbor: window as u32,
                group: group as u32,
            },
            AttentionPattern::Scca { kind, chunk } => {
                Pattern::Scca(scca_rules(kind, chunk as u32, n_heads))
            }
            AttentionPattern::Full => Pattern::Causal,
        }
    }

    /// How many of the most recent keys `layer` needs in its KV cache (`None`: all).
    pub fn kept_keys(&self, layer: usize, n_heads: usize) -> Option<usize> {
        match self.layer_pattern(layer, n_heads) {
            Pattern::Local { window } => Some(window as usize),
            Pattern::Scca(rules) if rules.iter().all(|r| r.chunk > 0) => {
                rules.iter().map(|r| (r.chunk + r.shift) as usize).max()
            }
            _ => None,
        }
    }

    /// Whether the KV cache also holds keys rotated at grouped positions (SelfExtend).
    pub fn grouped_keys(&self) -> bool {
        matches!(self, AttentionPattern::SelfExtend { .. })
    }

    /// KV-cache bytes per token of context at `context` tokens, averaged over the sequence:
    /// per layer, kept keys x (K + V [+ grouped K]) x kv heads x head dim x dtype bytes.
    pub fn kv_bytes_per_token(&self, cfg: &LlamaConfig, context: usize, dtype_bytes: usize) -> f64 {
        let per_key = cfg.kv_heads() * cfg.head_size() * dtype_bytes;
        let tensors = if self.grouped_keys() { 3 } else { 2 };
        let total: usize = (0..cfg.num_hidden_layers)
            .map(|l| {
                let kept = self
                    .kept_keys(l, cfg.num_attention_heads)
                    .map_or(context, |k| k.min(context));
                kept * per_key * tensors
            })
            .sum();
        total as f64 / context as f64
    }

    /// Checks the pattern against a model.
    pub fn validate(&self, cfg: &LlamaConfig) -> Result<()> {
        let bad = |msg: String| {
            Err(Error::UnsupportedConfig {
                field: "attention",
                value: msg,
            })
        };
        match *self {
            AttentionPattern::Zebra { every, window } if every == 0 || window == 0 => {
                bad(format!("{self}: every and window must be >= 1"))
            }
            AttentionPattern::SelfExtend { group, window } if group == 0 || window == 0 => {
                bad(format!("{self}: group and window must be >= 1"))
            }
            AttentionPattern::Scca {
                kind: SccaKind::Dilated { dilation: 0 },
                ..
            } => bad(format!("{self}: dilation must be >= 1")),
            AttentionPattern::Scca { kind, chunk }
                if chunk == 0 && !matches!(kind, SccaKind::Dilated { .. }) =>
            {
                bad(format!("{self}: chunk must be >= 1"))
            }
            AttentionPattern::Scca {
                kind: SccaKind::Flow { groups },
                ..
            } if groups == 0 || !cfg.num_attention_heads.is_multiple_of(groups as usize) => {
                bad(format!(
                    "{self}: {} heads do not split into {groups} groups",
                    cfg.num_attention_heads
                ))
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for AttentionPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttentionPattern::Full => write!(f, "full"),
            AttentionPattern::Zebra { every, window } => {
                write!(f, "zebra:every={every},window={window}")
            }
            AttentionPattern::SelfExtend { group, window } => {
                write!(f, "selfextend:group={group},window={window}")
            }
            AttentionPattern::Scca { kind, chunk } => match kind {
                SccaKind::Fixed => write!(f, "scca:fixed,chunk={chunk}"),
                SccaKind::Flow { groups } => write!(f, "scca:flow,chunk={chunk},groups={groups}"),
                SccaKind::Dilated { dilation } => write!(f, "scca:sda,dilation={dilation}"),
                SccaKind::Mixed => write!(f, "scca:mixed,chunk={chunk}"),
            },
        }
    }
}

impl FromStr for AttentionPattern {
    type Err = Error;

    /// Parses `full`, `zebra:every=4,window=512`, `selfextend:group=4,window=64`,
    /// `scca:fixed,chunk=N`, `scca:flow,chunk=N[,groups=M]`, `scca:sda,dilation=D`,
    /// `scca:mixed,chunk=N`.
    fn from_str(s: &str) -> Result<Self> {
        let err = |why: &str| Error::invalid(format!("attention pattern {s:?}: {why}"));
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut flags = Vec::new();
        let mut kv = std::collections::BTreeMap::new();
        for item in rest.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match item.split_once('=') {
                Some((k, v)) => {
                    let v: usize = v
                        .parse()
                        .map_err(|_| err(&format!("{k}={v} is not a number")))?;
                    kv.insert(k.to_string(), v);
                }
                None => flags.push(item.to_string()),
            }
        }
        let mut take = |k: &str, default: Option<usize>| -> Result<usize> {
            kv.remove(k)
                .or(default)
                .ok_or_else(|| err(&format!("missing {k}=")))
        };
        let pattern = match (name.trim(), flags.as_slice()) {
            ("full", []) => AttentionPattern::Full,
            ("zebra", []) => AttentionPattern::Zebra {
                every: take("every", Some(4))?,
                window: take("window", Some(512))?,
            },
            ("selfextend", []) => AttentionPattern::SelfExtend {
                group: take("group", None)?,
                window: take("window", None)?,
            },
            ("scca", [mode]) => match mode.as_str() {
                "fixed" => AttentionPattern::Scca {
                    kind: SccaKind::Fixed,
                    chunk: take("chunk", None)?,
                },
                "flow" => AttentionPattern::Scca {
                    kind: SccaKind::Flow {
                        groups: take("groups", Some(4))? as u32,
                    },
                    chunk: take("chunk", None)?,
                },
                "sda" => AttentionPattern::Scca {
                    kind: SccaKind::Dilated {
                        dilation: take("dilation", None)? as u32,
                    },
                    chunk: 0,
                },
                "mixed" => AttentionPattern::Scca {
                    kind: SccaKind::Mixed,
                    chunk: take("chunk", None)?,
                },
                other => return Err(err(&format!("unknown scca mode {other:?}"))),
            },
            _ => {
                return Err(err(
                    "expected full, zebra:every=L,window=W, selfextend:group=G,window=W, \
                     scca:fixed|flow|mixed,chunk=W or scca:sda,dilation=D",
                ))
            }
        };
        if let Some(k) = kv.keys().next() {
            return Err(err(&format!("unknown option {k}")));
        }
        Ok(pattern)
    }
}
