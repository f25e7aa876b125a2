//! Decoding attention of many sequences together: each sequence's new query row against its
//! own KV cache, as a continuous-batching step needs it. On CUDA one launch for all of them
//! (attention_decode.cu; a launch per sequence and layer costs more than the attention of a
//! decoding row); elsewhere [`crate::attention`] per sequence, which is also the reference.

use candle_core::{bail, CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

use crate::op_params::kv_rows;
use crate::{attention, AttentionOptions, Pattern};

/// The op on the packed queries; the caches ride along (read in place in `cuda_fwd`, the only
/// reader: without the `cuda` feature the op is never applied).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct DecodeManyOp {
    pub(crate) kvs: Vec<(Tensor, Tensor)>,
    pub(crate) scale: f32,
}

impl CustomOp1 for DecodeManyOp {
    fn name(&self) -> &'static str {
        "capstan-attention-decode-many"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        // `attention_decode_many` runs the CPU per sequence and never applies the op there.
        bail!("attention_decode_many: the packed op runs on CUDA only")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        q: &candle_core::CudaStorage,
        lq: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::decode_many::forward(&self.kvs, self.scale, q, lq)
    }
}

/// Attention of `q` `(n, heads, 1, dim)`, one decoding row of each of `n` sequences, each the
/// last position of its cache `kvs[i]` (keys and values `(1, kv_heads, len_i, dim)`, views of
/// buffers of any capacity): `(n, heads, 1, dim)`. `scale`: `None` for `1 / sqrt(dim)`.
///
/// On CUDA one launch for every sequence, where the keys and values are read in place in `q`'s
/// dtype (each sequence's keys and values in buffers of one capacity); otherwise (and for
/// caches of another layout, dtype or capacity) [`attention`] per sequence.
pub fn attention_decode_many(
    q: &Tensor,
    kvs: &[(Tensor, Tensor)],
    scale: Option<f32>,
) -> Result<Tensor> {
    let (n, heads, rows, dim) = q.dims4()?;
    if rows != 1 || n != kvs.len() {
        bail!(
            "attention_decode_many: {n} sequences of {rows} rows for {} caches; one row each expected",
            kvs.len()
        )
    }
    let kv_heads = kvs.first().map_or(Ok(heads), |(k, _)| k.dim(1))?;
    let packable = q.device().is_cuda()
        && kvs.iter().all(|(k, v)| {
            let fits = |t: &Tensor| {
                t.dtype() == q.dtype()
                    && t.dims4()
                        .is_ok_and(|(b, h, _, d)| b == 1 && h == kv_heads && d == dim)
                    && kv_rows(t.layout()).is_some()
            };
            // The kernel reads both through one capacity (their head stride).
            let capacity = |t: &Tensor| kv_rows(t.layout()).map(|(_, cap)| cap);
            fits(k) && fits(v) && k.dim(2).ok() == v.dim(2).ok() && capacity(k) == capacity(v)
        })
        && heads.is_multiple_of(kv_heads.max(1));
    let scale = scale.unwrap_or(1.0 / (dim as f32).sqrt());
    if !packable {
        let rows = kvs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| {
                let mut opts = AttentionOptions::new(Pattern::Causal);
                opts.q_pos0 = k.dim(2)?.saturating_sub(1) as u64;
                opts.scale = Some(scale);
                attention(&q.narrow(0, i, 1)?, k, v, opts)
            })
            .collect::<Result<Vec<_>>>()?;
        return Tensor::cat(&rows, 0);
    }
    q.contiguous()?.apply_op1_no_bwd(&DecodeManyOp {
        kvs: kvs.to_vec(),
        scale,
    })
}

#[cfg(all(test, target_arch = "x86_64"))]
#[path = "decode_many_host_tests.rs"]
mod host_tests;

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    /// The CPU path (the CUDA kernel's reference) against softmax(q k^T / sqrt(d)) v written
    /// out, for caches of different lengths read from buffers of larger capacity, grouped heads.
    #[test]
    fn each_sequence_attends_to_its_own_cache() {
        let (h, kvh, d) = (4, 2, 8);
        let lens = [1usize, 5, 13];
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (lens.len(), h, 1, d), &dev).unwrap();
        let bufs: Vec<(Tensor, Tensor)> = lens
            .iter()
            .map(|&n| {
                let r = || Tensor::randn(0f32, 1.0, (1, kvh, n + 3, d), &dev).unwrap();
                (r(), r())
            })
            .collect();
        let kvs: Vec<_> = bufs
            .iter()
            .zip(lens)
            .map(|((k, v), n)| (k.narrow(2, 0, n).unwrap(), v.narrow(2, 0, n).unwrap()))
            .collect();
        let out = super::attention_decode_many(&q, &kvs, None).unwrap();
        // Sequence `s`, head `h` of a `(n, heads, 1, dim)` tensor.
        let row = |t: &Tensor, s: usize, h: usize| -> Vec<f32> {
            t.get(s)
                .unwrap()
                .get(h)
                .unwrap()
                .get(0)
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        assert_eq!(out.dims(), &[lens.len(), h, 1, d]);
        for (s, (k, v)) in kvs.iter().enumerate() {
            for head in 0..h {
                let kh = head / (h / kvh);
                let qv = row(&q, s, head);
                let ks: Vec<Vec<f32>> = k.get(0).unwrap().get(kh).unwrap().to_vec2().unwrap();
                let vs: Vec<Vec<f32>> = v.get(0).unwrap().get(kh).unwrap().to_vec2().unwrap();
                let scores: Vec<f32> = ks
                    .iter()
                    .map(|kr| {
                        kr.iter().zip(&qv).map(|(a, b)| a * b).sum::<f32>() / (d as f32).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = scores.iter().map(|x| (x - m).exp()).collect();
                let total: f32 = e.iter().sum();
                let got = row(&out, s, head);
                for (j, g) in got.iter().enumerate() {
                    let want: f32 = e.iter().zip(&vs).map(|(w, vr)| w * vr[j]).sum::<f32>() / total;
                    assert!(
                        (g - want).abs() < 1e-5,
                        "sequence {s} head {head}: {g} vs {want}"
                    );
                }
            }
        }
    }
}
