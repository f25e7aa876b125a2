//! The caller-owned decoding state.

use candle_core::{DType, Tensor};

use super::{CResult, Llama};
use crate::error::{Error, Result};

/// One layer's KV cache, the same on both attention paths: keys (post-RoPE), values and
/// SelfExtend's grouped keys in buffers `(b, kv_heads, capacity, d)` written in place. The
/// cached keys are the buffer rows `offset..offset + len`, at absolute positions from `start`:
/// windowed layers (Zebra's local layers, SCCA) forget their oldest keys by moving `offset`,
/// not by copying, and a full buffer is compacted or grown by half, so a decoding step copies
/// nothing but its own new row (amortised).
#[derive(Debug)]
pub(super) struct LayerKv {
    k: Tensor,
    v: Tensor,
    k_grouped: Option<Tensor>,
    pub(super) start: usize,
    offset: usize,
    pub(super) len: usize,
}

/// Keys and values as views of a layer's cache buffers (no copies).
pub(super) struct KvView {
    pub(super) k: Tensor,
    pub(super) v: Tensor,
    pub(super) k_grouped: Option<Tensor>,
}

impl Clone for LayerKv {
    /// A copy with buffers of its own: the cache is written in place.
    fn clone(&self) -> Self {
        let own = |t: &Tensor| t.copy().expect("copying a KV-cache buffer");
        Self {
            k: own(&self.k),
            v: own(&self.v),
            k_grouped: self.k_grouped.as_ref().map(own),
            start: self.start,
            offset: self.offset,
            len: self.len,
        }
    }
}

/// How a layer's KV buffers are allocated.
#[derive(Debug, Clone, Copy)]
pub(super) struct KvAlloc {
    /// The positions the sequence may reach (0: unknown), allocated at once so that the buffer
    /// never moves below them ([`Cache::reserve`]).
    pub(super) reserve: usize,
    /// The element type keys and values are kept in ([`Llama::kv_dtype`]).
    pub(super) dtype: DType,
}

/// Where one sequence's rows lie in the packed step.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) len: usize,
    /// The sequence's KV reservation ([`super::Cache::reserve`]) and type.
    pub(super) kv: KvAlloc,
}

/// Buffer rows for `rows` cached keys: room for half as many again, in multiples of 64.
fn capacity_for(rows: usize) -> usize {
    (rows + rows / 2).next_multiple_of(64)
}

/// Buffer rows for `rows` cached keys when `reserve` positions were asked for
/// ([`Cache::reserve`]): the reservation (in multiples of 64) while it holds them.
fn capacity_with(rows: usize, reserve: usize) -> usize {
    if reserve >= rows {
        reserve.next_multiple_of(64)
    } else {
        capacity_for(rows)
    }
}

impl LayerKv {
    /// Rows in the buffers.
    pub(super) fn capacity(&self) -> usize {
        self.k.dim(2).unwrap_or(0)
    }

    /// Appends `k`, `v` (and SelfExtend's grouped keys) `(b, kv_heads, s, d)` after the cached
    /// rows, in place when the buffer has room; else the cached rows move to the front of a
    /// buffer of the same capacity if they fill at most two thirds of it, or of one half again
    /// as large. New buffers are made as `alloc` says; rows are kept in its element type.
    pub(super) fn append(
        kv: &mut Option<Self>,
        k: &Tensor,
        v: &Tensor,
        k_grouped: Option<&Tensor>,
        alloc: KvAlloc,
    ) -> CResult<()> {
        let KvAlloc { reserve, dtype } = alloc;
        let (k, v) = (&k.to_dtype(dtype)?, &v.to_dtype(dtype)?);
        let k_grouped = k_grouped.map(|g| g.to_dtype(dtype)).transpose()?;
        let k_grouped = k_grouped.as_ref();
        let s = k.dim(2)?;
        let Some(c) = kv else {
            let cap = capacity_with(s, reserve);
            let fresh = |t: &Tensor| relocated(None, t, cap);
            *kv = Some(Self {
                k: fresh(k)?,
                v: fresh(v)?,
                k_grouped: k_grouped.map(fresh).transpose()?,
                start: 0,
                offset: 0,
                len: s,
            });
            return Ok(());
        };
        let (k, v) = (&k.contiguous()?, &v.contiguous()?);
        let k_grouped = k_grouped.map(Tensor::contiguous).transpose()?;
        let k_grouped = k_grouped.as_ref();
        if c.k_grouped.is_some() != k_grouped.is_some() {
            candle_core::bail!("KV cache: grouped keys given to a cache without them, or missing")
        }
        let cap = c.capacity();
        let end = c.offset + c.len;
        if end + s <= cap {
            c.k.slice_set(k, 2, end)?;
            c.v.slice_set(v, 2, end)?;
            if let (Some(buf), Some(g)) = (&c.k_grouped, k_grouped) {
                buf.slice_set(g, 2, end)?;
            }
            c.len += s;
            return Ok(());
        }
        let need = c.len + s;
        let new_cap = if 3 * need <= 2 * cap {
            cap
        } else {
            capacity_with(need, reserve)
        };
        c.relocate(new_cap, Some((k, v, k_grouped)))
    }

    /// Forgets every cached key at position `end` or later (keys read only for a pass, such as
    /// [`Llama::forward_branches`]). The buffers stay as they are.
    pub(super) fn truncate(&mut self, end: usize) {
        self.len = end.saturating_sub(self.start).min(self.len);
    }

    /// Forgets the oldest `n` cached keys (a windowed layer's keys no later query sees). The
    /// buffer shrinks when the rest would fill less than a quarter of it.
    pub(super) fn drop_front(&mut self, n: usize) -> CResult<()> {
        let n = n.min(self.len);
        if n == 0 {
            // Full-attention layers forget nothing, and a reserved buffer must not shrink.
            return Ok(());
        }
        self.offset += n;
        self.start += n;
        self.len -= n;
        let small = capacity_for(2 * self.len.max(1));
        if 4 * small <= self.capacity() {
            self.relocate(small, None)?;
        }
        Ok(())
    }

    /// Moves the cached rows (and `new` rows after them) to the front of fresh buffers of
    /// `cap` rows.
    fn relocate(
        &mut self,
        cap: usize,
        new: Option<(&Tensor, &Tensor, Option<&Tensor>)>,
    ) -> CResult<()> {
        let (offset, len) = (self.offset, self.len);
        let keep = |t: &Tensor, add: Option<&Tensor>| -> CResult<Tensor> {
            let old = t.narrow(2, offset, len)?;
            match add {
                Some(a) => relocated(Some(&old), a, cap),
                None => relocated(None, &old, cap),
            }
        };
        let added = new.map(|(k, v, g)| (k.dim(2).unwrap_or(0), k, v, g));
        self.k = keep(&self.k, added.map(|a| a.1))?;
        self.v = keep(&self.v, added.map(|a| a.2))?;
        if let Some(g) = &self.k_grouped {
            self.k_grouped = Some(keep(g, added.and_then(|a| a.3))?);
        }
        self.offset = 0;
        self.len = len + added.map_or(0, |a| a.0);
        Ok(())
    }

    /// Whether the buffers have a row free after the cached ones (a decoding step writes
    /// its key and value there in place).
    pub(super) fn has_free_row(&self) -> bool {
        self.k_grouped.is_none() && self.offset + self.len < self.capacity()
    }

    /// The buffers as the decoding step reads and extends them
    /// ([`capstan_kernels::step::StepKv`]).
    pub(super) fn step_kv(&self) -> capstan_kernels::step::StepKv<'_> {
        capstan_kernels::step::StepKv {
            k: &self.k,
            v: &self.v,
            offset: self.offset,
            len: self.len,
        }
    }

    /// Counts the row a decoding step wrote after the cached ones ([`LayerKv::step_kv`]).
    pub(super) fn count_written_row(&mut self) {
        self.len += 1;
    }

    /// The cached keys and values, as views of the buffers.
    pub(super) fn view(&self) -> CResult<KvView> {
        let rows = |t: &Tensor| t.narrow(2, self.offset, self.len);
        Ok(KvView {
            k: rows(&self.k)?,
            v: rows(&self.v)?,
            k_grouped: self.k_grouped.as_ref().map(rows).transpose()?,
        })
    }
}

/// A fresh `(b, h, cap, d)` buffer holding `front` (if any) then `rows`, zeros after.
fn relocated(front: Option<&Tensor>, rows: &Tensor, cap: usize) -> CResult<Tensor> {
    let (b, h, s, d) = rows.dims4()?;
    let used = s + front.map_or(0, |f| f.dim(2).unwrap_or(0));
    let pad = Tensor::zeros((b, h, cap - used, d), rows.dtype(), rows.device())?;
    match front {
        Some(f) => Tensor::cat(&[f, rows, &pad], 2),
        None => Tensor::cat(&[rows, &pad], 2),
    }
}
/// Per-layer cross-attention keys and values of the encoder context.
#[derive(Debug, Clone)]
pub(super) struct CrossLayerState {
    pub(super) k: Tensor,
    pub(super) v: Tensor,
}

/// The encoder context of a request: computed once, used at every decoding step.
#[derive(Debug, Clone)]
pub(super) struct CrossContext {
    /// Indexed by decoder layer: the projected keys and values ([`CrossKv::Cached`]); `None`
    /// for layers without cross-attention, and for every layer when they are projected as
    /// each layer runs.
    pub(super) layers: Vec<Option<CrossLayerState>>,
    /// The encoder's last hidden states `(b, n, encoder width)` when keys and values are
    /// projected as each layer runs.
    pub(super) states: Option<Tensor>,
    /// Additive f32 padding mask `(b, 1, 1, n)`.
    pub(super) mask: Tensor,
    /// The same as u8 `(b, n)`, 0 for padding: the attention kernel's key mask; `None` when no
    /// key is padding (the kernels then skip the test, and cuDNN's fused attention can run it).
    pub(super) key_mask: Option<Tensor>,
    /// `(b, 1, 1)`: 0 for rows without any encoder token (they then run as plain Llama).
    pub(super) row_gate: Option<Tensor>,
}

/// Where CEPE's cross-attention keys and values live during a request
/// ([`Llama::set_cross_kv`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossKv {
    /// Projected for every layer once, when the encoder context is set: the fastest decoding,
    /// but per encoder token it holds `layers x 2 x kv width` values (0.5 MB in bf16 for
    /// CEPE-LLaMA-2-7B, as much as the decoder's own KV cache per token).
    Cached,
    /// Only the encoder's last hidden states are kept (1,024 values per token for CEPE: 1/64 of
    /// the cached form) and each layer projects its keys and values when it runs: the memory
    /// the CAPE paper counts (O(md + nLD)), paid for with two projections per layer per step.
    Projected,
    /// Cached while that takes at most `max_bytes` per request, projected past it.
    Auto {
        /// The largest cached keys and values, in bytes.
        max_bytes: usize,
    },
}

impl Default for CrossKv {
    /// [`CrossKv::Auto`] with 1 GiB: 2,048 encoder tokens of CEPE-LLaMA-2-7B in bf16 cached
    /// (8 passages of 256 tokens), more projected as they are used.
    fn default() -> Self {
        Self::Auto { max_bytes: 1 << 30 }
    }
}

impl std::str::FromStr for CrossKv {
    type Err = String;

    /// `cached`, `projected`, `auto` (1 GiB) or `auto:MIB`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cached" => Ok(Self::Cached),
            "projected" => Ok(Self::Projected),
            "auto" => Ok(Self::default()),
            _ => match s.strip_prefix("auto:").map(str::parse::<usize>) {
                Some(Ok(mib)) => Ok(Self::Auto {
                    max_bytes: mib << 20,
                }),
                _ => Err(format!(
                    "{s:?}: expected cached, projected, auto or auto:MIB (a budget in MiB)"
                )),
            },
        }
    }
}

/// Caller-owned decoding state: self-attention KV cache, per-row positions and padding, and the
/// encoder context of CEPE models.
#[derive(Debug, Clone)]
pub struct Cache {
    pub(super) kv: Vec<Option<LayerKv>>,
    pub(super) cross: Option<CrossContext>,
    /// Per row, per cached position: real token (true) or padding.
    pub(super) key_mask: Vec<Vec<bool>>,
    /// Per row, the number of real tokens so far (the next position id).
    pub(super) real: Vec<u32>,
    pub(super) seq_len: usize,
    /// Positions to preallocate in full-attention layers ([`Cache::reserve`]).
    pub(super) reserve: usize,
}

impl Cache {
    /// An empty cache for `model`.
    pub fn new(model: &Llama) -> Self {
        Self {
            kv: vec![None; model.decoder.layers.len()],
            cross: None,
            key_mask: Vec::new(),
            real: Vec::new(),
            seq_len: 0,
            reserve: 0,
        }
    }

    /// Preallocates room for `positions` positions (prompt, padding and new tokens) in every
    /// full-attention layer's KV buffers: they are allocated once at that size when first used
    /// and never grow or move below it, so a decoding step writes its row and copies nothing,
    /// and the memory a sequence holds is what was reserved for it. Windowed layers keep their
    /// own small buffers. Without a reservation buffers start at 1.5x the first chunk and grow
    /// by half.
    pub fn reserve(&mut self, positions: usize) {
        self.reserve = positions;
    }

    /// A batch-1 cache holding `len` positions of random keys and values (N(0, 1) in the
    /// model's dtype), as if a `len`-token prompt had been read: what one decoding step costs at
    /// that context, without the prefill. For benchmarks (`capstan-bench gpu decode`), not for
    /// generating text; models with full attention only.
    pub fn synthetic(model: &Llama, len: usize) -> Result<Self> {
        if model.attention != crate::AttentionPattern::Full {
            return Err(Error::invalid(
                "a synthetic cache is for models with full attention",
            ));
        }
        let cfg = model.config();
        let shape = (1, cfg.kv_heads(), len, cfg.head_size());
        let mut cache = Self::new(model);
        cache.ensure_batch(1)?;
        // Room for 1,024 steps beyond the context, allocated once.
        cache.reserve(len + 1024);
        let random = || -> CResult<Tensor> { Tensor::randn(0f32, 1.0, shape, model.device()) };
        let alloc = KvAlloc {
            reserve: len + 1024,
            dtype: model.kv_dtype,
        };
        for kv in cache.kv.iter_mut() {
            LayerKv::append(kv, &random()?, &random()?, None, alloc)?;
        }
        cache.key_mask = vec![vec![true; len]];
        cache.real = vec![len as u32];
        cache.seq_len = len;
        Ok(cache)
    }

    /// Number of positions (including padding) in the cache.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Bytes the encoder context holds: the cached cross-attention keys and values, or the
    /// encoder states they are projected from ([`CrossKv`]); 0 without a context.
    pub fn encoder_context_bytes(&self) -> usize {
        let bytes = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        self.cross.as_ref().map_or(0, |c| {
            let cached: usize = c
                .layers
                .iter()
                .flatten()
                .map(|l| bytes(&l.k) + bytes(&l.v))
                .sum();
            cached + c.states.as_ref().map_or(0, bytes)
        })
    }

    /// Whether encoder context was set with [`Llama::set_encoder_context`].
    pub fn has_encoder_context(&self) -> bool {
        self.cross.is_some()
    }

    /// Drops everything: KV cache, positions and encoder context.
    pub fn clear(&mut self) {
        self.kv.iter_mut().for_each(|kv| *kv = None);
        self.cross = None;
        self.key_mask.clear();
        self.real.clear();
        self.seq_len = 0;
    }

    pub(super) fn batch(&self) -> Option<usize> {
        if self.seq_len > 0 || self.cross.is_some() {
            Some(self.key_mask.len())
        } else {
            None
        }
    }

    pub(super) fn ensure_batch(&mut self, b: usize) -> Result<()> {
        match self.batch() {
            Some(cb) if cb != b => Err(Error::invalid(format!(
                "batch size {b} does not match the cache's {cb}"
            ))),
            Some(_) => Ok(()),
            None => {
                self.key_mask = vec![Vec::new(); b];
                self.real = vec![0; b];
                Ok(())
            }
        }
    }
}

/// Keys and values of a run of positions of a one-row cache, copied out: a
/// block of a prompt prefix cache ([`Cache::copy_block`], [`Cache::load_prefix`]).
#[derive(Debug)]
pub struct KvBlock {
    /// Per layer, keys, values and (SelfExtend) the keys rotated at grouped positions,
    /// `(1, kv_heads, len, head_dim)`.
    layers: Vec<(Tensor, Tensor, Option<Tensor>)>,
    len: usize,
}

impl KvBlock {
    /// Positions it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its tensors by name (`{layer}.k`, `{layer}.v`, `{layer}.g` for SelfExtend's grouped
    /// keys), to be stored ([`KvBlock::from_tensors`] reads them back).
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::with_capacity(self.layers.len() * 2);
        for (i, (k, v, g)) in self.layers.iter().enumerate() {
            out.push((format!("{i}.k"), k.clone()));
            out.push((format!("{i}.v"), v.clone()));
            if let Some(g) = g {
                out.push((format!("{i}.g"), g.clone()));
            }
        }
        out
    }

    /// A block of `model` from tensors [`KvBlock::tensors`] named (`get` looks one up),
    /// refused unless every layer's keys and values have the model's shape and KV type and
    /// the block's length.
    pub fn from_tensors(
        model: &Llama,
        len: usize,
        get: impl Fn(&str) -> Option<Tensor>,
    ) -> Result<KvBlock> {
        let cfg = model.config();
        let shape = [1, cfg.kv_heads(), len, cfg.head_size()];
        let grouped = matches!(model.attention, crate::AttentionPattern::SelfExtend { .. });
        let check = |name: String| -> Result<Tensor> {
            let t = get(&name).ok_or_else(|| Error::invalid(format!("no tensor {name}")))?;
            if t.dims() != shape || t.dtype() != model.kv_dtype {
                return Err(Error::invalid(format!(
                    "{name} is {:?} {:?}, the model's blocks {shape:?} {:?}",
                    t.dims(),
                    t.dtype(),
                    model.kv_dtype
                )));
            }
            Ok(t.to_device(model.device())?)
        };
        let layers = (0..model.decoder.layers.len())
            .map(|i| {
                let g = grouped.then(|| check(format!("{i}.g"))).transpose()?;
                Ok((check(format!("{i}.k"))?, check(format!("{i}.v"))?, g))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvBlock { layers, len })
    }

    /// Bytes of its keys and values.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|(k, v, g)| {
                (k.elem_count() + v.elem_count() + g.as_ref().map_or(0, Tensor::elem_count))
                    * k.dtype().size_in_bytes()
            })
            .sum()
    }
}

impl Cache {
    /// Whether this cache's prefixes can be reused by another sequence: one row, no
    /// padding, no encoder context, every layer holding every position from 0 (full
    /// attention or SelfExtend, whose grouped keys come along; windowed layers forget keys).
    fn reusable(&self, model: &Llama) -> bool {
        prefix_reusable(model.attention)
            && self.cross.is_none()
            && self.key_mask.len() == 1
            && self.key_mask[0].iter().all(|&m| m)
            && self.kv.iter().all(|kv| {
                kv.as_ref()
                    .is_some_and(|kv| kv.start == 0 && kv.len == self.seq_len)
            })
    }

    /// A copy of positions `start..end` of every layer's keys and values; `None` when
    /// the cache's prefixes cannot be reused (see [`Cache::load_prefix`]) or it holds
    /// fewer positions.
    pub fn copy_block(&self, model: &Llama, start: usize, end: usize) -> Result<Option<KvBlock>> {
        if start >= end || end > self.seq_len || !self.reusable(model) {
            return Ok(None);
        }
        let layers = self
            .kv
            .iter()
            .flatten()
            .map(|kv| {
                // Only the rows: `copy` would clone the whole buffer behind the view.
                let rows = |t: &Tensor| {
                    t.narrow(2, kv.offset + start, end - start)?
                        .force_contiguous()
                };
                let grouped = kv.k_grouped.as_ref().map(rows).transpose()?;
                Ok((rows(&kv.k)?, rows(&kv.v)?, grouped))
            })
            .collect::<CResult<Vec<_>>>()?;
        Ok(Some(KvBlock {
            layers,
            len: end - start,
        }))
    }

    /// Starts an empty cache from `blocks`, a prompt's first positions in order, as if
    /// their tokens had been read: the next token read is at position `Σ len`. For
    /// models with full attention or SelfExtend and no encoder context (the blocks come
    /// from [`Cache::copy_block`], which gives none otherwise).
    pub fn load_prefix(&mut self, model: &Llama, blocks: &[&KvBlock]) -> Result<()> {
        if self.seq_len > 0 || self.cross.is_some() {
            return Err(Error::invalid("a prefix goes into an empty cache"));
        }
        if !prefix_reusable(model.attention) {
            return Err(Error::invalid(
                "prefixes are reused with full attention or SelfExtend only",
            ));
        }
        let len: usize = blocks.iter().map(|b| b.len).sum();
        if len == 0 {
            return Ok(());
        }
        let n_layers = self.kv.len();
        if blocks.iter().any(|b| b.layers.len() != n_layers) {
            return Err(Error::invalid("a prefix block of another model"));
        }
        self.ensure_batch(1)?;
        let alloc = KvAlloc {
            reserve: self.reserve,
            dtype: model.kv_dtype,
        };
        for (layer, kv) in self.kv.iter_mut().enumerate() {
            let ks: Vec<&Tensor> = blocks.iter().map(|b| &b.layers[layer].0).collect();
            let vs: Vec<&Tensor> = blocks.iter().map(|b| &b.layers[layer].1).collect();
            let (k, v) = (Tensor::cat(&ks, 2)?, Tensor::cat(&vs, 2)?);
            let gs: Option<Vec<&Tensor>> =
                blocks.iter().map(|b| b.layers[layer].2.as_ref()).collect();
            let grouped = match gs {
                Some(gs) => Some(Tensor::cat(&gs, 2)?),
                None if matches!(model.attention, crate::AttentionPattern::SelfExtend { .. }) => {
                    return Err(Error::invalid(
                        "a prefix block without SelfExtend's grouped keys",
                    ))
                }
                None => None,
            };
            LayerKv::append(kv, &k, &v, grouped.as_ref(), alloc)?;
        }
        self.key_mask = vec![vec![true; len]];
        self.real = vec![len as u32];
        self.seq_len = len;
        Ok(())
    }
}

/// Whether a model with `attention` keeps every position's keys from 0 in every layer, so
/// that a prompt's prefix can be copied out and loaded into another sequence's cache.
fn prefix_reusable(attention: crate::AttentionPattern) -> bool {
    matches!(
        attention,
        crate::AttentionPattern::Full | crate::AttentionPattern::SelfExtend { .. }
    )
}

/// Encoder chunks after left padding: `hidden_states` `(chunks, len, hidden)` (after the final
/// norm) and, per chunk, which positions are real tokens.
#[derive(Debug, Clone)]
pub struct EncodedChunks {
    /// Last hidden states after the encoder's final RMSNorm.
    pub hidden_states: Tensor,
    /// `mask[c][i]`: position `i` of chunk `c` is a real token (false: left padding).
    pub mask: Vec<Vec<bool>>,
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::{KvAlloc, LayerKv};

    /// Rows `(1, 2, s, 3)` numbered from `first`, so every cached row says where it came from.
    fn rows(first: usize, s: usize) -> Tensor {
        let data: Vec<f32> = (0..2 * s * 3)
            .map(|i| {
                let (h, r, c) = (i / (s * 3), (i / 3) % s, i % 3);
                (h * 100_000 + (first + r) * 10 + c) as f32
            })
            .collect();
        Tensor::from_vec(data, (1, 2, s, 3), &Device::Cpu).unwrap()
    }

    fn f32_alloc(reserve: usize) -> KvAlloc {
        KvAlloc {
            reserve,
            dtype: DType::F32,
        }
    }

    /// With a reservation the buffer is allocated once at its size and never moves while the
    /// sequence stays within it; past it, it grows as without one.
    #[test]
    fn a_reserved_cache_never_moves() {
        let mut kv: Option<LayerKv> = None;
        let mut pos = 0;
        for s in [30, 1, 1, 500, 1, 1, 1400] {
            LayerKv::append(&mut kv, &rows(pos, s), &rows(pos, s), None, f32_alloc(2000)).unwrap();
            // What the kernel path does after every pass of a full-attention layer.
            kv.as_mut().unwrap().drop_front(0).unwrap();
            pos += s;
            assert_eq!(
                kv.as_ref().unwrap().capacity(),
                2048,
                "after {pos} positions"
            );
            assert_eq!(kv.as_ref().unwrap().offset, 0);
        }
        let first = kv.as_ref().unwrap().view().unwrap().k;
        LayerKv::append(
            &mut kv,
            &rows(pos, 200),
            &rows(pos, 200),
            None,
            f32_alloc(2000),
        )
        .unwrap();
        let c = kv.as_ref().unwrap();
        assert!(
            c.capacity() >= pos + 200,
            "grew past the reservation: {}",
            c.capacity()
        );
        let again = c.view().unwrap().k.narrow(2, 0, pos).unwrap();
        assert_eq!(
            first.squeeze(0).unwrap().to_vec3::<f32>().unwrap(),
            again.squeeze(0).unwrap().to_vec3::<f32>().unwrap()
        );
    }

    #[test]
    fn cross_kv_parses() {
        use super::CrossKv;
        assert_eq!("cached".parse::<CrossKv>(), Ok(CrossKv::Cached));
        assert_eq!("projected".parse::<CrossKv>(), Ok(CrossKv::Projected));
        assert_eq!("auto".parse::<CrossKv>(), Ok(CrossKv::default()));
        assert_eq!(
            "auto:512".parse::<CrossKv>(),
            Ok(CrossKv::Auto {
                max_bytes: 512 << 20
            })
        );
        for bad in ["", "auto:", "auto:x", "cache"] {
            assert!(bad.parse::<CrossKv>().is_err(), "{bad:?}");
        }
    }

    /// The in-place cache holds exactly what concatenating every chunk and keeping the last
    /// `window` rows holds (the cache this one replaced), through appends that fit, compactions,
    /// growth and shrinking; its buffer stays within a few times the kept rows.
    #[test]
    fn in_place_cache_equals_concatenation() {
        for window in [None, Some(5), Some(40), Some(100)] {
            let mut kv: Option<LayerKv> = None;
            let mut reference: Option<Tensor> = None;
            let mut pos = 0;
            let sizes = [11, 1, 1, 70, 1, 1, 1, 3, 130, 1, 2, 1, 1, 64, 1, 1, 1, 1];
            for (step, &s) in sizes.iter().cycle().take(60).enumerate() {
                let new = rows(pos, s);
                let grouped = (new.clone() + 0.5).unwrap();
                LayerKv::append(
                    &mut kv,
                    &new,
                    &(&new * 2.0).unwrap(),
                    Some(&grouped),
                    f32_alloc(0),
                )
                .unwrap();
                pos += s;
                let all = match reference.take() {
                    Some(r) => Tensor::cat(&[&r, &new], 2).unwrap(),
                    None => new.clone(),
                };
                let c = kv.as_mut().unwrap();
                let view = c.view().unwrap();
                let want_v = (&all * 2.0).unwrap();
                let want_g = (&all + 0.5).unwrap();
                for (got, want, what) in [
                    (&view.k, &all, "keys"),
                    (&view.v, &want_v, "values"),
                    (view.k_grouped.as_ref().unwrap(), &want_g, "grouped keys"),
                ] {
                    let (g, w) = (
                        got.squeeze(0).unwrap().to_vec3::<f32>().unwrap(),
                        want.squeeze(0).unwrap().to_vec3::<f32>().unwrap(),
                    );
                    assert_eq!(g, w, "{what} after step {step}, window {window:?}");
                }
                assert_eq!(c.start + c.len, pos);
                let len = all.dim(2).unwrap();
                let drop = window.map_or(0, |w| len.saturating_sub(w));
                c.drop_front(drop).unwrap();
                let kept = len - drop;
                reference = Some(all.narrow(2, drop, kept).unwrap());
                if let Some(w) = window {
                    let bound = super::capacity_for(4 * (w + 130));
                    assert!(
                        c.capacity() <= bound,
                        "capacity {} for window {w}",
                        c.capacity()
                    );
                }
            }
        }
    }
}
