//! Decoding attention alone, on each of attention_decode.cu's kernels
//! ([`capstan_kernels::DecodeKernel`]): each sequence's query row per head against its own
//! cache, every sequence in one launch (`attention_decode_many`), at `BATCHxCONTEXT` cases.
//! Reports seconds a call and the caches' bytes read a second against the copy bandwidth, so
//! that the kernel the decoding step uses is chosen by measurement. A call also copies two
//! small tables to the device and allocates its partial rows (the fused step keeps them in
//! static buffers): the same cost on both kernels, which weighs most where the caches are
//! small.

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};
use capstan_kernels::{attention_decode_many, decode_kernel, set_decode_kernel, DecodeKernel};
use serde_json::{json, Value};

use super::decode::context_key;
use super::device::{copy_bandwidth, timed};
use super::Heads;

/// One case: `BATCHxCONTEXT`, e.g. `1x32768`, `16x8192`.
#[derive(Debug, Clone)]
pub struct Case {
    pub batch: usize,
    pub context: usize,
}

impl std::str::FromStr for Case {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (b, c) = s
            .split_once('x')
            .with_context(|| format!("case {s:?}: expected BATCHxCONTEXT, e.g. 16x8192"))?;
        let parse = |x: &str, what: &str| -> anyhow::Result<usize> {
            match x.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => bail!("case {s:?}: the {what} {x:?} is not a positive whole number"),
            }
        };
        Ok(Case {
            batch: parse(b, "batch")?,
            context: parse(c, "context")?,
        })
    }
}

/// Calls timed a case and kernel (after one untimed).
const CALLS: usize = 20;

pub fn run(
    cases: &[Case],
    run_heads @ Heads {
        query: heads,
        kv_heads,
        dim,
    }: Heads,
    device: &Device,
    dtype: DType,
) -> anyhow::Result<Value> {
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        bail!("--heads {heads} is not a multiple of --kv-heads {kv_heads}")
    }
    let probe = if device.is_cuda() { 1 << 30 } else { 64 << 20 };
    let bandwidth = copy_bandwidth(device, probe)?;
    let elem = dtype.size_in_bytes();
    // The process's choice, restored at the end.
    let chosen = decode_kernel();
    let mut rows = Vec::new();
    for case in cases {
        let (n, len) = (case.batch, case.context);
        let q = Tensor::randn(0f32, 1.0, (n, heads, 1, dim), device)?.to_dtype(dtype)?;
        let kvs: Vec<(Tensor, Tensor)> = (0..n)
            .map(|_| -> anyhow::Result<_> {
                let k = Tensor::randn(0f32, 1.0, (1, kv_heads, len, dim), device)?;
                let v = Tensor::randn(0f32, 1.0, (1, kv_heads, len, dim), device)?;
                Ok((k.to_dtype(dtype)?, v.to_dtype(dtype)?))
            })
            .collect::<anyhow::Result<_>>()?;
        let bytes = (2 * n * kv_heads * len * dim * elem) as f64;
        let mut row = json!({
            "case": format!("{n}x{}", context_key(len)),
            "batch": n,
            "context": len,
            "cache_bytes": bytes,
        });
        let (mut outputs, mut per_call) = (Vec::new(), Vec::new());
        for (name, kernel) in [
            ("per_head", DecodeKernel::PerHead),
            ("grouped", DecodeKernel::Grouped),
            ("tensor_cores", DecodeKernel::TensorCores),
        ] {
            set_decode_kernel(kernel);
            outputs.push(attention_decode_many(&q, &kvs, None)?);
            let ((), seconds) = timed(device, || {
                for _ in 0..CALLS {
                    attention_decode_many(&q, &kvs, None)?;
                }
                Ok(())
            })?;
            let s = seconds / CALLS as f64;
            row[name] = json!({
                "seconds": s,
                "bytes_per_s": bytes / s,
                "of_copy_bandwidth": bytes / s / bandwidth,
            });
            per_call.push(s);
        }
        // The kernels sum in different orders (the tensor-core kernel's weights rounded to
        // the activations' type): equal to rounding.
        let diff = |a: &Tensor, b: &Tensor| -> anyhow::Result<f32> {
            Ok((a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?)
        };
        row["max_abs_diff"] = json!(diff(&outputs[0], &outputs[1])?);
        row["tensor_cores_max_abs_diff"] = json!(diff(&outputs[0], &outputs[2])?);
        row["grouped_speedup"] = json!(per_call[0] / per_call[1]);
        row["tensor_cores_over_grouped"] = json!(per_call[1] / per_call[2]);
        rows.push(row);
    }
    set_decode_kernel(chosen);
    Ok(run_heads.result(
        device,
        dtype,
        json!({"copy_bandwidth_bytes_per_s": bandwidth, "calls": CALLS, "cases": rows}),
    ))
}
