//! The kernels as candle custom ops: `cpu_fwd` runs the CPU versions ([`crate::cpu`]; attention
//! the blocked one, tested equal to the reference),
//! `cuda_fwd` the NVRTC-compiled CUDA kernel on candle's stream.

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType};

use crate::cpu::{self, AttnDims, AttnExtras};
use crate::op_params::{kv_rows, AttentionOp, AttentionOptions, RmsNormOp, RopeOp};
use crate::pattern::Pattern;

/// The data of a contiguous float tensor as f32.
pub(crate) fn cpu_f32(s: &CpuStorage, l: &Layout) -> Result<Vec<f32>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        bail!("capstan-kernels: input must be contiguous, got {:?}", l)
    };
    cpu_f32_at(s, a, b - a)
}

/// The f32 data of `n` elements of a float storage from `start` (keys or values read in place).
pub(crate) fn cpu_f32_at(s: &CpuStorage, start: usize, n: usize) -> Result<Vec<f32>> {
    let r = start..start + n;
    Ok(match s {
        CpuStorage::F32(v) => v[r].to_vec(),
        CpuStorage::BF16(v) => v[r].iter().map(|x| x.to_f32()).collect(),
        CpuStorage::F16(v) => v[r].iter().map(|x| x.to_f32()).collect(),
        CpuStorage::F64(v) => v[r].iter().map(|&x| x as f32).collect(),
        _ => bail!(
            "capstan-kernels: expected a float tensor, got {:?}",
            s.dtype()
        ),
    })
}

/// [`cpu_f32_at`] without a copy when the storage is f32.
fn cpu_f32_ref(s: &CpuStorage, start: usize, n: usize) -> Result<std::borrow::Cow<'_, [f32]>> {
    Ok(match s {
        CpuStorage::F32(v) => std::borrow::Cow::Borrowed(&v[start..start + n]),
        _ => std::borrow::Cow::Owned(cpu_f32_at(s, start, n)?),
    })
}

fn convert<T: WithDType>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x as f64)).collect()
}

/// f32 results back in `dtype`.
pub(crate) fn cpu_from_f32(v: &[f32], dtype: DType) -> Result<CpuStorage> {
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(v.to_vec()),
        DType::BF16 => CpuStorage::BF16(convert(v)),
        DType::F16 => CpuStorage::F16(convert(v)),
        DType::F64 => CpuStorage::F64(v.iter().map(|&x| x as f64).collect()),
        d => bail!("capstan-kernels: unsupported dtype {d:?}"),
    })
}

impl AttentionOp {
    /// [`cpu::attention_blocked`] of `q` against keys, values and grouped keys of either
    /// element type.
    fn blocked<E: cpu::KvElement>(
        &self,
        q: &[f32],
        (k, v, k_grouped): (&[E], &[E], Option<&[E]>),
        dims: AttnDims,
        q_grouped: Option<&[f32]>,
        key_mask: Option<&[bool]>,
    ) -> Vec<f32> {
        let extras = AttnExtras {
            q_grouped,
            k_grouped,
            key_mask,
        };
        let (pos, pattern) = (self.positions(dims.dim), &self.opts.pattern);
        cpu::attention_blocked(q, k, v, dims, pos, pattern, extras)
    }
}

fn tensor_f32(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
}

impl CustomOp3 for AttentionOp {
    fn name(&self) -> &'static str {
        "capstan-attention"
    }

    fn cpu_fwd(
        &self,
        sq: &CpuStorage,
        lq: &Layout,
        sk: &CpuStorage,
        lk: &Layout,
        sv: &CpuStorage,
        lv: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let dims = self.dims(lq, lk, lv)?;
        let span = Self::kv_span(&dims);
        let at = |l: &Layout| kv_rows(l).map_or(0, |(start, _)| start);
        let q = cpu_f32(sq, lq)?;
        let qg = self.opts.q_grouped.as_ref().map(tensor_f32).transpose()?;
        // SelfExtend's grouped keys, read in place like the keys (the storage guard outlives
        // the slice).
        let kg_storage = self.opts.k_grouped.as_ref().map(|t| t.storage_and_layout());
        let kg = match &kg_storage {
            Some((g, l)) => {
                let candle_core::Storage::Cpu(g) = &**g else {
                    bail!("attention: grouped keys are not on the CPU")
                };
                Some((g, at(l)))
            }
            None => None,
        };
        let mask = match &self.opts.key_mask {
            Some(m) => Some(
                m.flatten_all()?
                    .to_dtype(DType::U8)?
                    .to_vec1::<u8>()?
                    .into_iter()
                    .map(|x| x != 0)
                    .collect::<Vec<bool>>(),
            ),
            None => None,
        };
        let (qg, mask) = (qg.as_deref(), mask.as_deref());
        let kg_half = kg.is_none_or(|(g, _)| matches!(g, CpuStorage::F16(_)));
        let out = match (sk, sv) {
            // A KV cache kept in f16 is read in place as f16.
            (CpuStorage::F16(k), CpuStorage::F16(v)) if kg_half => {
                let kg = kg
                    .map(|(g, start)| elems(g.as_slice::<half::f16>()?, start, span))
                    .transpose()?;
                let kv = (elems(k, at(lk), span)?, elems(v, at(lv), span)?, kg);
                self.blocked(&q, kv, dims, qg, mask)
            }
            // f32 keys and values (a KV cache's buffer) are read in place; others widened.
            _ => {
                let (k, v) = (
                    cpu_f32_ref(sk, at(lk), span)?,
                    cpu_f32_ref(sv, at(lv), span)?,
                );
                let kg = kg
                    .map(|(g, start)| cpu_f32_ref(g, start, span))
                    .transpose()?;
                self.blocked(&q, (&k, &v, kg.as_deref()), dims, qg, mask)
            }
        };
        Ok((cpu_from_f32(&out, sq.dtype())?, lq.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        sq: &candle_core::CudaStorage,
        lq: &Layout,
        sk: &candle_core::CudaStorage,
        lk: &Layout,
        sv: &candle_core::CudaStorage,
        lv: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::attention_fwd(self, sq, lq, sk, lk, sv, lv)
    }
}

fn check_extras(q: &Tensor, k: &Tensor, opts: &AttentionOptions) -> Result<()> {
    match (&opts.pattern, &opts.q_grouped, &opts.k_grouped) {
        (Pattern::SelfExtend { neighbor, group }, Some(qg), Some(kg)) => {
            if *group == 0 || *neighbor == 0 {
                bail!("SelfExtend needs group >= 1 and neighbor window >= 1")
            }
            if qg.dims() != q.dims() || kg.dims() != k.dims() {
                bail!(
                    "SelfExtend: grouped q {:?} / k {:?} must be shaped as q {:?} / k {:?}",
                    qg.dims(),
                    kg.dims(),
                    q.dims(),
                    k.dims()
                )
            }
        }
        (Pattern::SelfExtend { .. }, _, _) => {
            bail!("SelfExtend needs q_grouped and k_grouped")
        }
        _ => {}
    }
    if let Some(m) = &opts.key_mask {
        let (b, _, t, _) = k.dims4()?;
        if m.dims() != [b, t] {
            bail!("key_mask {:?}, expected [{b}, {t}]", m.dims())
        }
    }
    Ok(())
}

/// Attention of `q` `(b, h, s, d)` over `k`, `v` `(b, kv_heads, t, d)` with a pattern;
/// returns `(b, h, s, d)` in `q`'s dtype (f32 accumulation).
///
/// Keys, values and grouped keys that are views of KV-cache buffers of one capacity
/// (`buffer.narrow(2, offset, t)`) are read in place; other layouts are packed first.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: AttentionOptions) -> Result<Tensor> {
    check_extras(q, k, &opts)?;
    let mut opts = opts;
    opts.q_grouped = opts.q_grouped.map(|t| t.contiguous()).transpose()?;
    opts.key_mask = opts
        .key_mask
        .map(|t| t.to_dtype(DType::U8)?.contiguous())
        .transpose()?;
    let q = q.contiguous()?;
    if reads_in_place(k, v, &opts) {
        q.apply_op3_no_bwd(k, v, &AttentionOp { opts })
    } else {
        opts.k_grouped = opts.k_grouped.map(|t| t.contiguous()).transpose()?;
        let (k, v) = (k.contiguous()?, v.contiguous()?);
        q.apply_op3_no_bwd(&k, &v, &AttentionOp { opts })
    }
}

/// Whether the keys, values (and grouped keys) are views of KV-cache buffers of one capacity,
/// which the kernels read where they lie.
fn reads_in_place(k: &Tensor, v: &Tensor, opts: &AttentionOptions) -> bool {
    let head_rows = |t: &Tensor| kv_rows(t.layout()).map(|(_, rows)| rows);
    let rows = head_rows(k);
    rows.is_some()
        && head_rows(v) == rows
        && opts.k_grouped.as_ref().is_none_or(|g| head_rows(g) == rows)
}

/// `n` elements of `v` from `start`, in place.
fn elems<T>(v: &[T], start: usize, n: usize) -> Result<&[T]> {
    v.get(start..start + n)
        .ok_or_else(|| candle_core::Error::Msg("attention: a view past its buffer".into()))
}

/// `n` values of type `T` of a CPU storage from `start`, in place.
fn cpu_in<T: WithDType>(storage: &candle_core::Storage, start: usize, n: usize) -> Result<&[T]> {
    match storage {
        candle_core::Storage::Cpu(s) => elems(s.as_slice::<T>()?, start, n),
        _ => bail!("attention_many: tensors on the CPU expected"),
    }
}

/// The call [`cpu::attention_rows_many`] takes for `op` on these storages, read in place.
fn rows_call<'a, E: cpu::KvElement + WithDType>(
    (sq, lq): (&'a candle_core::Storage, &Layout),
    (sk, lk): (&'a candle_core::Storage, &Layout),
    (sv, lv): (&'a candle_core::Storage, &Layout),
    op: &'a AttentionOp,
    dims: AttnDims,
) -> Result<cpu::RowsCall<'a, E>> {
    let span = AttentionOp::kv_span(&dims);
    let at = |l: &Layout| kv_rows(l).map_or(0, |(start, _)| start);
    let nq = dims.batch * dims.heads * dims.q_len * dims.dim;
    Ok(cpu::RowsCall {
        q: cpu_in::<f32>(sq, lq.start_offset(), nq)?,
        k: cpu_in::<E>(sk, at(lk), span)?,
        v: cpu_in::<E>(sv, at(lv), span)?,
        dims,
        pos: op.positions(dims.dim),
        pattern: &op.opts.pattern,
        extras: cpu::AttnExtras::default(),
    })
}

/// [`attention`] of several calls at once (the sequences of a batched decoding step, each
/// against its own KV cache): on the CPU, calls of f32 queries with fewer than
/// [`cpu::TILED_ROWS`] query rows, keys and values both f32 or both f16, and no extras run as
/// one pass of the thread pool per key type ([`cpu::attention_rows_many`]), each computing
/// what it computes alone; the others (prompt chunks, other devices) one by one. Outputs in
/// the calls' order.
pub fn attention_many(
    calls: Vec<(Tensor, Tensor, Tensor, AttentionOptions)>,
) -> Result<Vec<Tensor>> {
    let together = |(q, k, v, o): &(Tensor, Tensor, Tensor, AttentionOptions)| {
        q.device().is_cpu()
            && q.dtype() == DType::F32
            && matches!(k.dtype(), DType::F32 | DType::F16)
            && v.dtype() == k.dtype()
            && q.dims4()
                .is_ok_and(|(_, _, rows, _)| rows < cpu::TILED_ROWS)
            && o.q_grouped.is_none()
            && o.k_grouped.is_none()
            && o.key_mask.is_none()
            && reads_in_place(k, v, o)
    };
    let mut outs: Vec<Option<Tensor>> = vec![None; calls.len()];
    let mut prepared = Vec::with_capacity(calls.len());
    for (i, call) in calls.into_iter().enumerate() {
        if !together(&call) {
            let (q, k, v, o) = call;
            outs[i] = Some(attention(&q, &k, &v, o)?);
            continue;
        }
        let (q, k, v, opts) = call;
        let q = q.contiguous()?;
        let op = AttentionOp { opts };
        let dims = op.dims(q.layout(), k.layout(), v.layout())?;
        prepared.push((i, q, k, v, op, dims));
    }
    // Every call's storage held while the pass reads it in place.
    let storages: Vec<_> = prepared
        .iter()
        .map(|(_, q, k, v, _, _)| {
            (
                q.storage_and_layout(),
                k.storage_and_layout(),
                v.storage_and_layout(),
            )
        })
        .collect();
    let (mut wide, mut half) = (Vec::new(), Vec::new());
    for (n, ((_, _, k, _, op, dims), ((sq, lq), (sk, lk), (sv, lv)))) in
        prepared.iter().zip(&storages).enumerate()
    {
        let (q, k_at, v_at) = ((&**sq, *lq), (&**sk, *lk), (&**sv, *lv));
        if k.dtype() == DType::F16 {
            half.push((n, rows_call::<half::f16>(q, k_at, v_at, op, *dims)?));
        } else {
            wide.push((n, rows_call::<f32>(q, k_at, v_at, op, *dims)?));
        }
    }
    let mut results: Vec<Option<Vec<f32>>> = vec![None; prepared.len()];
    for (n, out) in run_rows_many(&wide).into_iter().chain(run_rows_many(&half)) {
        results[n] = Some(out);
    }
    drop((wide, half));
    drop(storages);
    for ((i, q, ..), out) in prepared.iter().zip(results) {
        let out = out.expect("every prepared call ran");
        outs[*i] = Some(Tensor::from_vec(out, q.shape(), q.device())?);
    }
    Ok(outs.into_iter().flatten().collect())
}

/// [`cpu::attention_rows_many`] of numbered calls, each output with its number.
fn run_rows_many<E: cpu::KvElement>(
    calls: &[(usize, cpu::RowsCall<'_, E>)],
) -> Vec<(usize, Vec<f32>)> {
    if calls.is_empty() {
        return Vec::new();
    }
    let rows: Vec<_> = calls.iter().map(|(_, c)| *c).collect();
    calls
        .iter()
        .map(|(n, _)| *n)
        .zip(cpu::attention_rows_many(&rows))
        .collect()
}

impl CustomOp3 for RopeOp {
    fn name(&self) -> &'static str {
        "capstan-rope-qk"
    }

    fn cpu_fwd(
        &self,
        sq: &CpuStorage,
        lq: &Layout,
        sk: &CpuStorage,
        lk: &Layout,
        sp: &CpuStorage,
        lp: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (b, h, hk, s, d, per_row) = self.dims(lq, lk, lp)?;
        let pos = match sp {
            CpuStorage::U32(v) => {
                let (a, e) = lp.contiguous_offsets().expect("contiguous positions");
                let p = &v[a..e];
                if per_row {
                    p.to_vec()
                } else {
                    p.repeat(b)
                }
            }
            _ => bail!("rope: positions must be u32"),
        };
        let mut q = cpu_f32(sq, lq)?;
        let mut k = cpu_f32(sk, lk)?;
        cpu::rope(&mut q, (b, h, s, d), &pos, &self.inv_freq, self.factor);
        cpu::rope(&mut k, (b, hk, s, d), &pos, &self.inv_freq, self.factor);
        // (b, h + hk, s, d): per batch row, the q heads then the k heads.
        let mut out = Vec::with_capacity(q.len() + k.len());
        let (qs, ks) = (h * s * d, hk * s * d);
        for r in 0..b {
            out.extend_from_slice(&q[r * qs..(r + 1) * qs]);
            out.extend_from_slice(&k[r * ks..(r + 1) * ks]);
        }
        Ok((
            cpu_from_f32(&out, sq.dtype())?,
            Shape::from((b, h + hk, s, d)),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        sq: &candle_core::CudaStorage,
        lq: &Layout,
        sk: &candle_core::CudaStorage,
        lk: &Layout,
        sp: &candle_core::CudaStorage,
        lp: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::rope_fwd(self, sq, lq, sk, lk, sp, lp)
    }
}

/// Parameters of [`rope_qk`]: the rotary frequencies and the linear position scale.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeParams {
    /// `d / 2` inverse frequencies (already rescaled for Llama 3 or a GGUF file's divisors).
    pub inv_freq: Vec<f32>,
    /// Linear scaling factor (position interpolation; 1 = none): angle = position / factor.
    pub factor: f32,
}

impl RopeParams {
    /// Plain RoPE or RoPE ABF: `inv_freq = 1 / base^(2i / dim)`, positions divided by `factor`.
    pub fn from_base(base: f64, dim: usize, factor: f64) -> Self {
        Self {
            inv_freq: cpu::inv_freq(base, dim),
            factor: factor as f32,
        }
    }
}

/// Fused RoPE of `q` `(b, h, s, d)` and `k` `(b, kv_heads, s, d)` at explicit `positions`
/// (u32, `(s)` or `(b, s)`), in one kernel; returns the rotated `(q, k)`.
pub fn rope_qk(
    q: &Tensor,
    k: &Tensor,
    positions: &Tensor,
    params: &RopeParams,
) -> Result<(Tensor, Tensor)> {
    let (_, h, _, d) = q.dims4()?;
    let (_, hk, _, _) = k.dims4()?;
    if params.inv_freq.len() * 2 != d {
        bail!(
            "rope: {} frequencies for head width {d}",
            params.inv_freq.len()
        )
    }
    let op = RopeOp {
        inv_freq: params.inv_freq.clone(),
        factor: params.factor,
    };
    let (q, k) = (q.contiguous()?, k.contiguous()?);
    let p = positions.to_dtype(DType::U32)?.contiguous()?;
    let both = q.apply_op3_no_bwd(&k, &p, &op)?;
    Ok((both.narrow(1, 0, h)?, both.narrow(1, h, hk)?))
}

impl CustomOp3 for RmsNormOp {
    fn name(&self) -> &'static str {
        "capstan-rms-norm-residual"
    }

    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sr: &CpuStorage,
        lr: &Layout,
        sw: &CpuStorage,
        lw: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.dims(lx, lr, lw)?;
        let (sum, normed) = cpu::rms_norm_residual(
            &cpu_f32(sx, lx)?,
            &cpu_f32(sr, lr)?,
            &cpu_f32(sw, lw)?,
            self.eps,
        );
        let mut out = sum;
        out.extend_from_slice(&normed);
        let mut dims = vec![2];
        dims.extend_from_slice(lx.shape().dims());
        Ok((cpu_from_f32(&out, sx.dtype())?, Shape::from(dims)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        sx: &candle_core::CudaStorage,
        lx: &Layout,
        sr: &candle_core::CudaStorage,
        lr: &Layout,
        sw: &candle_core::CudaStorage,
        lw: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::rms_norm_fwd(self, sx, lx, sr, lr, sw, lw)
    }
}

/// RMSNorm with the residual add fused: returns `(x + residual, rms_norm(x + residual) *
/// weight)`; the norm is computed in f32 from the unrounded sum.
pub fn rms_norm_residual(
    x: &Tensor,
    residual: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let op = RmsNormOp { eps: eps as f32 };
    let both = x.contiguous()?.apply_op3_no_bwd(
        &residual.contiguous()?,
        &weight.to_dtype(x.dtype())?.contiguous()?,
        &op,
    )?;
    Ok((both.get(0)?, both.get(1)?))
}
