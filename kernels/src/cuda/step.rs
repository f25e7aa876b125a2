//! [`DecodeStep`]: decode_step.cu's launches for one token over static buffers, captured as a
//! CUDA graph on candle's stream and replayed (see [`crate::step`]).

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{bail, CudaDevice, CudaStorage, DType, Device, Result, Storage, Tensor};

use super::decode_many::{splits, DecodeArgs, MAXD, WARPS as DECODE_WARPS};
use super::launch::{cuda_of, func};
use crate::op_params::kv_rows;
use crate::step::{StepDims, StepKv, StepLaunch, StepMatrix, StepModel};

/// `GemvArgs` of decode_step.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct GemvArgs {
    rows0: i64,
    rows1: i64,
    rows2: i64,
    row_bytes: i64,
    cols: i32,
    mode: i32,
    vec: i32,
}

// SAFETY: plain-old-data with the C layout of the kernel's struct.
unsafe impl DeviceRepr for GemvArgs {}

/// `GEMV_WARPS`: output rows a block.
const GEMV_ROWS: u32 = 8;
/// `STEP_NORM_THREADS`.
const NORM_THREADS: u32 = 1024;

/// A matrix as the kernels read it, and what keeps its memory alive.
struct DevMatrix {
    ptr: u64,
    row_bytes: i64,
    rows: usize,
    cols: usize,
    format: &'static str,
    /// The CUDA module of its format's products.
    module: &'static str,
    /// 16-byte loads: the rows and the input are aligned, `cols` a multiple of 8.
    vec: bool,
    _keep: Keep,
}

/// Held, never read: the memory a matrix's address points into.
#[allow(dead_code)]
enum Keep {
    Tensor(Tensor),
    Blocks(CudaSlice<u8>),
}

/// The device address of a contiguous float tensor's first element.
fn tensor_ptr(t: &Tensor, dev: &CudaDevice) -> Result<u64> {
    let (s, l) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*s else {
        bail!("decode step: a weight is not on the CUDA device")
    };
    let Some((a, _)) = l.contiguous_offsets() else {
        bail!("decode step: a weight is not contiguous")
    };
    let stream = dev.cuda_stream();
    let elem = t.dtype().size_in_bytes() as u64;
    // One stream: every use is ordered after the tensor's writes.
    let base = match &cs.slice {
        CudaStorageSlice::F32(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::BF16(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::F16(s) => s.device_ptr(&stream).0,
        _ => bail!("decode step: a {:?} weight", t.dtype()),
    };
    Ok(base + a as u64 * elem)
}

impl DevMatrix {
    fn new(m: &StepMatrix, dev: &CudaDevice) -> Result<Self> {
        let (rows, cols) = m.dims()?;
        let format = m.format()?;
        let module = m.module()?;
        Ok(match m {
            StepMatrix::Dense(t) => {
                let t = t.contiguous()?;
                let ptr = tensor_ptr(&t, dev)?;
                let elem = t.dtype().size_in_bytes();
                Self {
                    ptr,
                    row_bytes: (cols * elem) as i64,
                    rows,
                    cols,
                    format,
                    module,
                    vec: ptr % 16 == 0 && cols % 8 == 0,
                    _keep: Keep::Tensor(t),
                }
            }
            StepMatrix::Ggml { bytes, .. } => {
                let blocks = dev.clone_htod(bytes.as_ref())?;
                let ptr = blocks.device_ptr(&dev.cuda_stream()).0;
                Self {
                    ptr,
                    row_bytes: (bytes.len() / rows.max(1)) as i64,
                    rows,
                    cols,
                    format,
                    module,
                    vec: true,
                    _keep: Keep::Blocks(blocks),
                }
            }
        })
    }
}

struct DevLayer {
    attn_norm: u64,
    q: DevMatrix,
    k: DevMatrix,
    v: DevMatrix,
    /// f32 biases of q, k and v (addresses; 0: none), and their buffers.
    bias: [u64; 3],
    _bias: Option<[CudaSlice<f32>; 3]>,
    o: DevMatrix,
    mlp_norm: u64,
    gate: DevMatrix,
    up: DevMatrix,
    down: DevMatrix,
    /// The norms' weights, held: their addresses are read in place.
    _norms: [Tensor; 2],
}

/// The static buffers, as device addresses (the slices are kept in [`Buffers::_keep`]).
struct Buffers {
    /// f32 residual stream `(hidden)`.
    x: u64,
    /// A normed activation `(max(hidden, heads * head_dim))`, the model's type.
    h: u64,
    /// f32 q, k and v products.
    qkv: u64,
    /// Rotated queries, the model's type.
    q: u64,
    /// Attention output, the model's type.
    attn: u64,
    /// f32 gate and up products (when their formats differ).
    gu: u64,
    /// SwiGLU output `(intermediate)`, the model's type.
    act: u64,
    /// f32 logits `(vocab)`.
    logits: CudaSlice<f32>,
    /// Attention's per-split partial results.
    partial: u64,
    /// `StepState`: token, position, cache row, keys after the step.
    state: CudaSlice<i32>,
    /// Per layer: keys' and values' first cached row, and the buffers' capacities.
    kptr: CudaSlice<u64>,
    vptr: CudaSlice<u64>,
    caps: CudaSlice<i32>,
    inv_freq: CudaSlice<f32>,
    /// The addresses of the slices above, taken once: nothing between a capture's begin and end
    /// may touch a slice (with cudarc's stream synchronisation on, that records events).
    ptrs: BufferPtrs,
    _keep: Vec<CudaSlice<u8>>,
}

#[derive(Debug, Clone, Copy)]
struct BufferPtrs {
    logits: u64,
    state: u64,
    kptr: u64,
    vptr: u64,
    caps: u64,
    inv_freq: u64,
}

/// A captured graph, movable between threads: CUDA graph objects are not internally
/// synchronised, and every use of this one goes through `&mut DecodeStep` (serialised; the
/// reader keeps the step behind a mutex).
struct Captured(CudaGraph);

// SAFETY: see above; the driver allows a graph to be used from any thread when its uses are
// serialised.
unsafe impl Send for Captured {}

/// Where the caches were when the graph was captured: a moved cache needs a new capture.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CacheKey {
    layers: Vec<(u64, u64, usize)>,
    splits: usize,
}

/// One token's decoding step of a [`StepModel`] on a CUDA device, its launches captured as a
/// CUDA graph ([`StepLaunch::Graph`]) or launched one by one.
pub struct DecodeStep {
    /// The model's sizes, rotation scaling and float type (the model's host copies of quantized
    /// blocks are dropped once uploaded).
    dims: StepDims,
    factor: f32,
    dtype: DType,
    dev: CudaDevice,
    stream: Arc<CudaStream>,
    suffix: &'static str,
    embed: DevMatrix,
    layers: Vec<DevLayer>,
    norm: u64,
    _norm: Tensor,
    lm_head: DevMatrix,
    buf: Buffers,
    launch: StepLaunch,
    captured: Option<(CacheKey, Captured)>,
    /// The caches as last given (the tables hold their addresses).
    key: Option<CacheKey>,
    /// Why capture failed, if it did (the step then launches eagerly).
    capture_error: Option<String>,
    graphs: usize,
}

/// A float buffer of `n` elements' bytes of `dtype`, zeroed, kept in `keep`.
fn raw(dev: &CudaDevice, bytes: usize, keep: &mut Vec<CudaSlice<u8>>) -> Result<u64> {
    let s = dev.alloc_zeros::<u8>(bytes.max(16))?;
    let ptr = s.device_ptr(&dev.cuda_stream()).0;
    keep.push(s);
    Ok(ptr)
}

impl DecodeStep {
    /// Uploads the model's quantized blocks and allocates the step's buffers on `device`.
    pub fn new(model: &StepModel, device: &Device, launch: StepLaunch) -> Result<Self> {
        model.check()?;
        let Device::Cuda(dev) = device else {
            bail!("decode step: runs on a CUDA device")
        };
        let suffix = match model.dtype() {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            d => bail!("decode step: a {d:?} model"),
        };
        let d = model.dims;
        if d.head_dim > MAXD {
            bail!("decode step: head width {} > {MAXD}", d.head_dim)
        }
        let mat = |m: &StepMatrix| DevMatrix::new(m, dev);
        let layers = model
            .layers
            .iter()
            .map(|l| {
                let bias = match &l.qkv_bias {
                    Some(b) => {
                        let f = |t: &Tensor| -> Result<CudaSlice<f32>> {
                            let host: Vec<f32> = t.to_dtype(DType::F32)?.to_vec1()?;
                            dev.clone_htod(&host)
                        };
                        Some([f(&b[0])?, f(&b[1])?, f(&b[2])?])
                    }
                    None => None,
                };
                let bias_ptr = match &bias {
                    Some(b) => [0, 1, 2].map(|j| ptr_of(&b[j], dev)),
                    None => [0; 3],
                };
                Ok(DevLayer {
                    bias: bias_ptr,
                    _bias: bias,
                    attn_norm: tensor_ptr(&l.attn_norm, dev)?,
                    q: mat(&l.q)?,
                    k: mat(&l.k)?,
                    v: mat(&l.v)?,
                    o: mat(&l.o)?,
                    mlp_norm: tensor_ptr(&l.mlp_norm, dev)?,
                    gate: mat(&l.gate)?,
                    up: mat(&l.up)?,
                    down: mat(&l.down)?,
                    _norms: [l.attn_norm.clone(), l.mlp_norm.clone()],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let elem = model.dtype().size_in_bytes();
        let (qw, kvw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let mut keep = Vec::new();
        let max_splits = splits(d.heads, usize::MAX / 2);
        let mut buf = Buffers {
            x: raw(dev, 4 * d.hidden, &mut keep)?,
            h: raw(dev, elem * d.hidden.max(qw), &mut keep)?,
            qkv: raw(dev, 4 * (qw + 2 * kvw), &mut keep)?,
            q: raw(dev, elem * qw, &mut keep)?,
            attn: raw(dev, elem * qw, &mut keep)?,
            gu: raw(dev, 4 * 2 * d.intermediate, &mut keep)?,
            act: raw(dev, elem * d.intermediate, &mut keep)?,
            logits: dev.alloc_zeros::<f32>(d.vocab)?,
            partial: raw(dev, 4 * d.heads * max_splits * (2 + d.head_dim), &mut keep)?,
            state: dev.alloc_zeros::<i32>(4)?,
            kptr: dev.alloc_zeros::<u64>(layers.len().max(1))?,
            vptr: dev.alloc_zeros::<u64>(layers.len().max(1))?,
            caps: dev.alloc_zeros::<i32>(layers.len().max(1))?,
            inv_freq: dev.clone_htod(&model.rope.inv_freq)?,
            ptrs: BufferPtrs {
                logits: 0,
                state: 0,
                kptr: 0,
                vptr: 0,
                caps: 0,
                inv_freq: 0,
            },
            _keep: keep,
        };
        buf.ptrs = BufferPtrs {
            logits: ptr_of(&buf.logits, dev),
            state: ptr_of(&buf.state, dev),
            kptr: ptr_of(&buf.kptr, dev),
            vptr: ptr_of(&buf.vptr, dev),
            caps: ptr_of(&buf.caps, dev),
            inv_freq: ptr_of(&buf.inv_freq, dev),
        };
        let (hidden_aligned, inter_aligned) =
            (d.hidden.is_multiple_of(8), d.intermediate.is_multiple_of(8));
        let mut layers = layers;
        // The input of a product is aligned (fresh buffers are); its width decides the rest.
        for l in &mut layers {
            for m in [&mut l.q, &mut l.k, &mut l.v, &mut l.gate, &mut l.up] {
                m.vec &= hidden_aligned;
            }
            l.o.vec &= qw % 8 == 0;
            l.down.vec &= inter_aligned;
        }
        let mut lm_head = mat(&model.lm_head)?;
        lm_head.vec &= hidden_aligned;
        Ok(Self {
            embed: mat(&model.embed)?,
            norm: tensor_ptr(&model.norm, dev)?,
            _norm: model.norm.clone(),
            lm_head,
            layers,
            buf,
            suffix,
            dev: dev.clone(),
            stream: dev.cuda_stream(),
            dims: model.dims,
            factor: model.rope.factor,
            dtype: model.dtype(),
            launch,
            captured: None,
            key: None,
            capture_error: None,
            graphs: 0,
        })
    }

    /// Why graph capture failed (the step launches eagerly since), if it did.
    pub fn capture_error(&self) -> Option<&str> {
        self.capture_error.as_deref()
    }

    /// Graphs captured so far (one, plus one each time a cache moved).
    pub fn graphs_captured(&self) -> usize {
        self.graphs
    }

    /// The logits `(vocab)` (f32, on the device) after `token` at position `pos`; each
    /// layer's cache gets the token's key and value at row `offset + len` (the caller then
    /// counts one more row). Every cache must have that row free and hold `len` rows.
    pub fn step(&mut self, token: u32, pos: usize, kvs: &[StepKv<'_>]) -> Result<Tensor> {
        let d = self.dims;
        if token as usize >= d.vocab {
            bail!(
                "decode step: token {token} outside a vocabulary of {}",
                d.vocab
            )
        }
        if kvs.len() != self.layers.len() {
            bail!(
                "decode step: {} caches for {} layers",
                kvs.len(),
                self.layers.len()
            )
        }
        let len = kvs.first().map_or(0, |kv| kv.len);
        let stream = self.dev.cuda_stream();
        let mut layers = Vec::with_capacity(kvs.len());
        for (i, kv) in kvs.iter().enumerate() {
            if kv.len != len {
                bail!(
                    "decode step: layer {i} caches {} rows, layer 0 {len}",
                    kv.len
                )
            }
            let (ks, kl) = kv.k.storage_and_layout();
            let (vs, vl) = kv.v.storage_and_layout();
            let (Some((ka, cap)), Some((va, vcap))) = (kv_rows(kl), kv_rows(vl)) else {
                bail!("decode step: layer {i}'s cache is not readable in place")
            };
            let dims = kl.shape().dims();
            if dims != [1, d.kv_heads, dims[2], d.head_dim]
                || vl.shape().dims() != dims
                || cap != vcap
                || kv.k.dtype() != self.dtype
                || kv.v.dtype() != self.dtype
            {
                bail!(
                    "decode step: layer {i}'s cache is {:?} {:?} of capacity {cap}",
                    dims,
                    kv.k.dtype()
                )
            }
            if kv.offset + kv.len + 1 > dims[2] {
                bail!("decode step: layer {i}'s cache has no free row")
            }
            let elem = self.dtype.size_in_bytes() as u64;
            let row = (kv.offset * d.head_dim) as u64 * elem;
            let ptr = |s: &CudaStorage, a: usize| -> Result<u64> {
                Ok(match &s.slice {
                    CudaStorageSlice::F32(x) => x.device_ptr(&stream).0,
                    CudaStorageSlice::BF16(x) => x.device_ptr(&stream).0,
                    CudaStorageSlice::F16(x) => x.device_ptr(&stream).0,
                    _ => bail!("decode step: a cache of another type"),
                } + a as u64 * elem)
            };
            layers.push((
                ptr(cuda_of(&ks)?, ka)? + row,
                ptr(cuda_of(&vs)?, va)? + row,
                cap,
            ));
        }
        let key = CacheKey {
            splits: splits(d.heads, layers.iter().map(|l| l.2).min().unwrap_or(1)),
            layers,
        };
        if self.key.as_ref() != Some(&key) {
            let col = |f: fn(&(u64, u64, usize)) -> u64| -> Vec<u64> {
                key.layers.iter().map(f).collect()
            };
            stream.memcpy_htod(&col(|l| l.0), &mut self.buf.kptr).w()?;
            stream.memcpy_htod(&col(|l| l.1), &mut self.buf.vptr).w()?;
            let caps: Vec<i32> = key.layers.iter().map(|l| l.2 as i32).collect();
            stream.memcpy_htod(&caps, &mut self.buf.caps).w()?;
            self.key = Some(key.clone());
        }
        let state = [token as i32, pos as i32, len as i32, len as i32 + 1];
        stream.memcpy_htod(&state, &mut self.buf.state).w()?;
        self.run(&key)?;
        let logits = stream.clone_dtod(&self.buf.logits).w()?;
        let storage = CudaStorage::wrap_cuda_slice(logits, self.dev.clone());
        Ok(Tensor::from_storage(
            Storage::Cuda(storage),
            d.vocab,
            candle_core::op::BackpropOp::none(),
            false,
        ))
    }

    /// The step's launches: replayed from the graph for these caches, captured first if need
    /// be, or launched one by one.
    fn run(&mut self, key: &CacheKey) -> Result<()> {
        if self.launch == StepLaunch::Eager || self.capture_error.is_some() {
            return self.launches(key);
        }
        if self.captured.as_ref().map(|(k, _)| k) != Some(key) {
            self.captured = None;
            // The kernels are loaded (and NVRTC compiled) outside the capture.
            self.launches(key)?;
            match self.capture(key) {
                Ok(graph) => {
                    self.graphs += 1;
                    self.captured = Some((key.clone(), Captured(graph)));
                    // The eager pass above already computed this step.
                    return Ok(());
                }
                Err(e) => {
                    self.capture_error = Some(e.to_string());
                    return Ok(());
                }
            }
        }
        let (_, graph) = self.captured.as_ref().expect("captured above");
        graph.0.launch().w()
    }

    fn capture(&self, key: &CacheKey) -> Result<CudaGraph> {
        let stream = self.dev.cuda_stream();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .w()?;
        let launched = self.launches(key);
        // End the capture whatever happened, so that the stream is usable again.
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        launched?;
        match ended.w()? {
            Some(graph) => Ok(graph),
            None => bail!("decode step: the capture recorded nothing"),
        }
    }

    fn f(&self, name: &str) -> Result<CudaFunction> {
        func(&self.dev, "decode_step", name)
    }

    /// Every launch of one step, in order, for the caches of `key`.
    fn launches(&self, key: &CacheKey) -> Result<()> {
        let d = self.dims;
        let b = &self.buf;
        let sfx = self.suffix;
        let p = b.ptrs;
        let state = p.state;
        self.embed_launch(state)?;
        let (qw, kvw) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        let (kptr, vptr, caps, inv_freq) = (p.kptr, p.vptr, p.caps, p.inv_freq);
        for (i, l) in self.layers.iter().enumerate() {
            self.norm_launch(b.x, l.attn_norm, b.h)?;
            let bias = |j: usize| l.bias[j];
            if l.q.format == l.k.format && l.k.format == l.v.format {
                self.gemv(
                    [&l.q, &l.k, &l.v],
                    [bias(0), bias(1), bias(2)],
                    b.h,
                    b.qkv,
                    0,
                    0,
                )?;
            } else {
                for (j, (m, at)) in [(&l.q, 0), (&l.k, qw), (&l.v, qw + kvw)]
                    .into_iter()
                    .enumerate()
                {
                    self.gemv1(m, bias(j), b.h, b.qkv + 4 * at as u64, 0)?;
                }
            }
            let (kc, vc, cap) = key.layers[i];
            let pairs = ((d.heads + 2 * d.kv_heads) * d.head_dim / 2) as u32;
            let f = self.f(&format!("capstan_step_rope_append_{sfx}"))?;
            let mut a = self.stream.launch_builder(&f);
            let (heads, kv_heads, dim, cap_i) = (
                d.heads as i32,
                d.kv_heads as i32,
                d.head_dim as i32,
                cap as i32,
            );
            a.arg(&b.qkv)
                .arg(&inv_freq)
                .arg(&state)
                .arg(&b.q)
                .arg(&kc)
                .arg(&vc);
            a.arg(&heads)
                .arg(&kv_heads)
                .arg(&dim)
                .arg(&cap_i)
                .arg(&self.factor);
            // SAFETY: matches capstan_step_rope_append_*; the cache row `slot` is free.
            unsafe { a.launch(LaunchConfig::for_num_elems(pairs)) }.w()?;
            self.attention(
                kptr + 8 * i as u64,
                vptr + 8 * i as u64,
                state + 12,
                caps + 4 * i as u64,
                key.splits,
            )?;
            self.gemv1(&l.o, 0, b.attn, b.x, 1)?;
            self.norm_launch(b.x, l.mlp_norm, b.h)?;
            if l.gate.format == l.up.format {
                self.gemv([&l.gate, &l.up, &l.up], [0, 0, 0], b.h, 0, b.act, 2)?;
            } else {
                self.gemv1(&l.gate, 0, b.h, b.gu, 0)?;
                self.gemv1(&l.up, 0, b.h, b.gu + 4 * d.intermediate as u64, 0)?;
                let f = self.f(&format!("capstan_step_swiglu_{sfx}"))?;
                let mut a = self.stream.launch_builder(&f);
                let up = b.gu + 4 * d.intermediate as u64;
                let n = d.intermediate as i32;
                a.arg(&b.gu).arg(&up).arg(&b.act).arg(&n);
                // SAFETY: matches capstan_step_swiglu_*.
                unsafe { a.launch(LaunchConfig::for_num_elems(n as u32)) }.w()?;
            }
            self.gemv1(&l.down, 0, b.act, b.x, 1)?;
        }
        self.norm_launch(b.x, self.norm, b.h)?;
        self.gemv1(&self.lm_head, 0, b.h, p.logits, 0)
    }

    fn embed_launch(&self, state: u64) -> Result<()> {
        let m = &self.embed;
        let f = func(
            &self.dev,
            m.module,
            &format!("capstan_step_embed_{}", m.format),
        )?;
        let mut a = self.stream.launch_builder(&f);
        let cols = m.cols as i32;
        a.arg(&m.ptr)
            .arg(&m.row_bytes)
            .arg(&cols)
            .arg(&state)
            .arg(&self.buf.x);
        let units = (m.cols / 32) as u32;
        // SAFETY: matches capstan_step_embed_*; the token was checked against the vocabulary.
        unsafe { a.launch(LaunchConfig::for_num_elems(units)) }.w()?;
        Ok(())
    }

    fn norm_launch(&self, x: u64, w: u64, out: u64) -> Result<()> {
        let f = self.f(&format!("capstan_step_rmsnorm_{}", self.suffix))?;
        let mut a = self.stream.launch_builder(&f);
        let dim = self.dims.hidden as i32;
        let eps = self.dims.eps as f32;
        a.arg(&x).arg(&w).arg(&out).arg(&dim).arg(&eps);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (NORM_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches capstan_step_rmsnorm_*.
        unsafe { a.launch(cfg) }.w()?;
        Ok(())
    }

    fn gemv1(&self, m: &DevMatrix, bias: u64, x: u64, out: u64, mode: i32) -> Result<()> {
        self.gemv_rows([(m, bias), (m, 0), (m, 0)], [m.rows, 0, 0], x, out, 0, mode)
    }

    /// `mode` 0 or 1 over the stacked rows of `ms`, or 2 (SwiGLU of `ms[0]` and `ms[1]`).
    fn gemv(
        &self,
        ms: [&DevMatrix; 3],
        bias: [u64; 3],
        x: u64,
        out_f32: u64,
        out_t: u64,
        mode: i32,
    ) -> Result<()> {
        let rows = if mode == 2 {
            [ms[0].rows, ms[1].rows, 0]
        } else {
            [ms[0].rows, ms[1].rows, ms[2].rows]
        };
        self.gemv_rows(
            [(ms[0], bias[0]), (ms[1], bias[1]), (ms[2], bias[2])],
            rows,
            x,
            out_f32,
            out_t,
            mode,
        )
    }

    fn gemv_rows(
        &self,
        ms: [(&DevMatrix, u64); 3],
        rows: [usize; 3],
        x: u64,
        out_f32: u64,
        out_t: u64,
        mode: i32,
    ) -> Result<()> {
        let m0 = ms[0].0;
        let f = func(
            &self.dev,
            m0.module,
            &format!("capstan_step_gemv_{}_{}", m0.format, self.suffix),
        )?;
        let args = GemvArgs {
            rows0: rows[0] as i64,
            rows1: rows[1] as i64,
            rows2: rows[2] as i64,
            row_bytes: m0.row_bytes,
            cols: m0.cols as i32,
            mode,
            vec: ms.iter().all(|(m, _)| m.vec) as i32,
        };
        let out_rows = if mode == 2 {
            rows[0]
        } else {
            rows.iter().sum()
        };
        let mut a = self.stream.launch_builder(&f);
        a.arg(&ms[0].0.ptr).arg(&ms[1].0.ptr).arg(&ms[2].0.ptr);
        a.arg(&ms[0].1).arg(&ms[1].1).arg(&ms[2].1);
        a.arg(&x).arg(&out_f32).arg(&out_t).arg(&args);
        let cfg = LaunchConfig {
            grid_dim: ((out_rows as u32).div_ceil(GEMV_ROWS), 1, 1),
            block_dim: (32 * GEMV_ROWS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches capstan_step_gemv_*; every matrix has `cols` columns of one format
        // and the output buffer room for the rows.
        unsafe { a.launch(cfg) }.w()?;
        Ok(())
    }

    fn attention(&self, kptr: u64, vptr: u64, lens: u64, caps: u64, splits: usize) -> Result<()> {
        let d = self.dims;
        let b = &self.buf;
        let args = DecodeArgs {
            heads: d.heads as i32,
            kv_heads: d.kv_heads as i32,
            dim: d.head_dim as i32,
            scale: 1.0 / (d.head_dim as f32).sqrt(),
            splits: splits as i32,
        };
        let stream = self.dev.cuda_stream();
        let sfx = self.suffix;
        let f = func(
            &self.dev,
            "attention_decode",
            &format!("capstan_attention_decode_{sfx}"),
        )?;
        let cfg = LaunchConfig {
            grid_dim: (d.heads as u32, 1, splits as u32),
            block_dim: (32 * DECODE_WARPS as u32, 1, 1),
            shared_mem_bytes: (DECODE_WARPS * (2 + d.head_dim) * 4) as u32,
        };
        let mut a = stream.launch_builder(&f);
        a.arg(&b.q)
            .arg(&kptr)
            .arg(&vptr)
            .arg(&lens)
            .arg(&caps)
            .arg(&b.attn)
            .arg(&b.partial);
        a.arg(&args);
        // SAFETY: matches capstan_attention_decode_*: the tables hold one live cache each.
        unsafe { a.launch(cfg) }.w()?;
        if splits > 1 {
            let f = func(
                &self.dev,
                "attention_decode",
                &format!("capstan_attention_decode_merge_{sfx}"),
            )?;
            let cfg = LaunchConfig {
                grid_dim: (d.heads as u32, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut a = stream.launch_builder(&f);
            a.arg(&b.partial).arg(&b.attn).arg(&args);
            // SAFETY: matches capstan_attention_decode_merge_*.
            unsafe { a.launch(cfg) }.w()?;
        }
        Ok(())
    }
}

fn ptr_of<T>(s: &CudaSlice<T>, dev: &CudaDevice) -> u64 {
    s.device_ptr(&dev.cuda_stream()).0
}
