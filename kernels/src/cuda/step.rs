//! [`DecodeStep`]: decode_step.cu's launches for one token of each of one or more sequences
//! over static buffers, captured as a CUDA graph on candle's stream and replayed (see
//! [`crate::step`]).

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaGraph, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{bail, CudaDevice, CudaStorage, DType, Device, Result, Storage, Tensor};

use super::decode_many::MAXD;
use super::launch::{cuda_of, func};
use crate::op_params::kv_rows;
use crate::step::buffers::{
    f32_bytes, state_bytes, BufferAddrs, CacheTables, LayerCache, SeqState,
};
use crate::step::plan::{Arg, GemvArgs, Layout, RopeArgs};
use crate::step::{StepKv, StepLaunch, StepMatrix, StepModel, StepSeq};

// SAFETY: plain-old-data with the C layout of the kernel's struct.
unsafe impl DeviceRepr for GemvArgs {}
// SAFETY: as GemvArgs.
unsafe impl DeviceRepr for RopeArgs {}

/// The device address of element `at` of a float storage (one stream: every use is ordered
/// after the storage's writes, so the synchronisation guard is not kept).
fn float_address(s: &CudaStorage, at: usize, stream: &CudaStream) -> Result<u64> {
    let base = match &s.slice {
        CudaStorageSlice::F32(x) => x.device_ptr(stream).0,
        CudaStorageSlice::BF16(x) => x.device_ptr(stream).0,
        CudaStorageSlice::F16(x) => x.device_ptr(stream).0,
        _ => bail!(
            "decode step: a {:?} tensor, not f32, bf16 or f16",
            s.dtype()
        ),
    };
    Ok(base + (at * s.dtype().size_in_bytes()) as u64)
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
    float_address(cs, a, &dev.cuda_stream())
}

/// What keeps the step's device memory alive: the model's tensors and GGML blocks read in
/// place, uploaded GGML blocks and biases, the buffers.
#[allow(dead_code)]
enum Keep {
    Tensor(Tensor),
    Blocks(Arc<candle_core::quantized::QTensor>),
    Bytes(CudaSlice<u8>),
    Floats(CudaSlice<f32>),
}

/// A captured graph, movable between threads: CUDA graph objects are not internally
/// synchronised, and every use of this one goes through `&mut DecodeStep` (serialised; the
/// reader keeps the step behind a mutex).
struct Captured(CudaGraph);

// SAFETY: see above; the driver allows a graph to be used from any thread when its uses are
// serialised.
unsafe impl Send for Captured {}

/// One token's decoding step of a [`StepModel`] on a CUDA device, for one sequence or a
/// batch, its launches captured as a CUDA graph per batch size ([`StepLaunch::Graph`]) or
/// launched one by one.
pub struct DecodeStep {
    /// The weights' and buffers' addresses, and the model's sizes.
    layout: Layout,
    dtype: DType,
    dev: CudaDevice,
    stream: Arc<CudaStream>,
    /// The buffers, in [`BufferAddrs`]' field order (the state and the cache tables are
    /// written before each step, the logits copied out after it), sized for `batch_cap`
    /// sequences.
    bufs: Vec<CudaSlice<u8>>,
    batch_cap: usize,
    _keep: Vec<Keep>,
    launch: StepLaunch,
    /// Graphs captured, by (batch, key splits): the caches' addresses are read from the
    /// tables, so a graph stays valid while the buffers do.
    captured: std::collections::HashMap<(usize, usize), Captured>,
    /// The caches as last written to the tables.
    tables: Option<CacheTables>,
    /// Why capture failed, if it did (the step then launches eagerly).
    capture_error: Option<String>,
    graphs: usize,
}

/// The step's buffers for batches of up to `batch` sequences, and their addresses.
fn alloc_buffers(
    dev: &CudaDevice,
    model_dims: &crate::step::StepDims,
    layers: usize,
    elem: usize,
    batch: usize,
) -> Result<(Vec<CudaSlice<u8>>, BufferAddrs)> {
    let stream = dev.cuda_stream();
    let sizes = BufferAddrs::sizes(model_dims, layers, elem, batch);
    let mut slices = Vec::with_capacity(sizes.len());
    for n in sizes {
        slices.push(dev.alloc_zeros::<u8>(n.max(16))?);
    }
    let addrs: Vec<u64> = slices.iter().map(|s| s.device_ptr(&stream).0).collect();
    Ok((
        slices,
        BufferAddrs::from_addrs(addrs.try_into().expect("16 buffers")),
    ))
}

impl DecodeStep {
    /// Takes the model's weights in place (uploading what is not on `device`) and allocates
    /// the step's buffers there, for one sequence (they grow with the first larger batch).
    pub fn new(model: &StepModel, device: &Device, launch: StepLaunch) -> Result<Self> {
        model.check()?;
        let Device::Cuda(dev) = device else {
            bail!("decode step: runs on a CUDA device")
        };
        let d = model.dims;
        if d.head_dim > MAXD {
            bail!("decode step: head width {} > {MAXD}", d.head_dim)
        }
        let stream = dev.cuda_stream();
        let elem = model.dtype().size_in_bytes();
        let (mut slices, buf) = alloc_buffers(dev, &d, model.layers.len(), elem, 1)?;
        let held = std::cell::RefCell::new(Vec::new());
        let mut layout = Layout::build(
            model,
            buf,
            |m| match m {
                StepMatrix::Dense(t) => {
                    let t = t.contiguous()?;
                    let ptr = tensor_ptr(&t, dev)?;
                    held.borrow_mut().push(Keep::Tensor(t));
                    Ok(ptr)
                }
                // The model's own blocks in place where they are on this device (no second
                // copy of a quantized model); else uploaded.
                StepMatrix::Ggml(q) if q.device().same_device(&Device::Cuda(dev.clone())) => {
                    let (ptr, _) = q.device_ptr_with_guard(&stream)?;
                    held.borrow_mut().push(Keep::Blocks(q.clone()));
                    Ok(ptr as u64)
                }
                StepMatrix::Ggml(q) => {
                    let blocks = dev.clone_htod(q.data()?.as_ref())?;
                    let ptr = blocks.device_ptr(&stream).0;
                    held.borrow_mut().push(Keep::Bytes(blocks));
                    Ok(ptr)
                }
            },
            |t| tensor_ptr(t, dev),
            |b| {
                let host: Vec<f32> = b.to_dtype(DType::F32)?.to_vec1()?;
                let s = dev.clone_htod(&host)?;
                let ptr = s.device_ptr(&stream).0;
                held.borrow_mut().push(Keep::Floats(s));
                Ok(ptr)
            },
        )?;
        // Older devices (no mma.sync for 16-bit or TF32 inputs) keep a batch's products on
        // CUDA cores.
        let (major, _) = stream.context().compute_capability().w()?;
        layout.tensor_cores = major >= 8;
        let mut keep = held.into_inner();
        // The norms are read in place: hold them.
        keep.push(Keep::Tensor(model.norm.clone()));
        for l in &model.layers {
            keep.push(Keep::Tensor(l.attn_norm.clone()));
            keep.push(Keep::Tensor(l.mlp_norm.clone()));
        }
        let inv_freq = f32_bytes(&model.rope.inv_freq);
        stream
            .memcpy_htod(&inv_freq, &mut slices[BufferAddrs::INV_FREQ])
            .w()?;
        Ok(Self {
            layout,
            dtype: model.dtype(),
            dev: dev.clone(),
            stream,
            bufs: slices,
            batch_cap: 1,
            _keep: keep,
            launch,
            captured: Default::default(),
            tables: None,
            capture_error: None,
            graphs: 0,
        })
    }

    /// Buffers for batches of `batch` sequences: reallocated when smaller (for at least 16
    /// sequences, a server's usual batch, or twice as many as before), the graphs over the
    /// old ones dropped.
    fn ensure_batch(&mut self, batch: usize) -> Result<()> {
        if batch <= self.batch_cap {
            return Ok(());
        }
        let cap = batch.max(2 * self.batch_cap).max(16);
        let d = self.layout.dims;
        let layers = self.layout.layers.len();
        let elem = self.dtype.size_in_bytes();
        let (mut slices, buf) = alloc_buffers(&self.dev, &d, layers, elem, cap)?;
        // The RoPE frequencies do not depend on the batch: copied over.
        let freqs = &self.bufs[BufferAddrs::INV_FREQ];
        self.stream
            .memcpy_dtod(freqs, &mut slices[BufferAddrs::INV_FREQ])
            .w()?;
        self.captured.clear();
        self.tables = None;
        self.layout.buf = buf;
        self.bufs = slices;
        self.batch_cap = cap;
        Ok(())
    }

    /// Why graph capture failed (the step launches eagerly since), if it did.
    pub fn capture_error(&self) -> Option<&str> {
        self.capture_error.as_deref()
    }

    /// Graphs captured so far: one per batch size and key split stepped, again after the
    /// buffers grew for a larger batch.
    pub fn graphs_captured(&self) -> usize {
        self.graphs
    }

    /// The logits `(vocab)` (f32, on the device) after `token` at position `pos`; each
    /// layer's cache gets the token's key and value at row `offset + len` (the caller then
    /// counts one more row). Every cache must have that row free and hold `len` rows.
    pub fn step(&mut self, token: u32, pos: usize, kvs: &[StepKv<'_>]) -> Result<Tensor> {
        self.step_many(&[StepSeq { token, pos, kvs }])?.squeeze(0)
    }

    /// One step of every sequence in `seqs` together: the logits `(seqs, vocab)` (f32, on the
    /// device), each sequence's caches extended as [`DecodeStep::step`] extends one's. Each
    /// sequence has its own caches (no two sequences may share one).
    pub fn step_many(&mut self, seqs: &[StepSeq<'_>]) -> Result<Tensor> {
        let d = self.layout.dims;
        if seqs.is_empty() {
            bail!("decode step: no sequence")
        }
        let mut states = Vec::with_capacity(seqs.len());
        let mut caches = Vec::with_capacity(seqs.len());
        for (n, seq) in seqs.iter().enumerate() {
            let (layers, len) = self.cache_addresses(seq)?;
            if seq.token as usize >= d.vocab {
                bail!(
                    "decode step: sequence {n}'s token {} outside a vocabulary of {}",
                    seq.token,
                    d.vocab
                )
            }
            states.push(SeqState {
                token: seq.token,
                pos: seq.pos,
                len,
            });
            caches.push(layers);
        }
        let tables = CacheTables::new(caches, self.layout.decode_blocks());
        let mut rows: Vec<u64> = tables.seqs.iter().map(|s| s[0].0).collect();
        rows.sort_unstable();
        if rows.windows(2).any(|w| w[0] == w[1]) {
            bail!("decode step: two sequences share a cache")
        }
        self.ensure_batch(seqs.len())?;
        let shape = tables.shape();
        if self.tables.as_ref() != Some(&tables) {
            let bytes = tables.tables();
            for (i, bytes) in [BufferAddrs::KPTR, BufferAddrs::VPTR, BufferAddrs::CAPS]
                .into_iter()
                .zip(&bytes)
            {
                self.stream.memcpy_htod(bytes, &mut self.bufs[i]).w()?;
            }
            self.tables = Some(tables);
        }
        self.stream
            .memcpy_htod(&state_bytes(&states), &mut self.bufs[BufferAddrs::STATE])
            .w()?;
        self.run(shape)?;
        let n = seqs.len() * d.vocab;
        // SAFETY: the logits buffer holds `batch_cap * vocab` f32 values (BufferAddrs::sizes).
        let view = unsafe { self.bufs[BufferAddrs::LOGITS].transmute::<f32>(n) }
            .ok_or_else(|| candle_core::Error::Msg("decode step: logits buffer".into()))?;
        let logits = self.stream.clone_dtod(&view).w()?;
        let storage = CudaStorage::wrap_cuda_slice(logits, self.dev.clone());
        Ok(Tensor::from_storage(
            Storage::Cuda(storage),
            (seqs.len(), d.vocab),
            candle_core::op::BackpropOp::none(),
            false,
        ))
    }

    /// Each layer's cache of `seq` as (keys' first cached row, values', capacity), and the
    /// rows they hold, checked.
    fn cache_addresses(&self, seq: &StepSeq<'_>) -> Result<(Vec<LayerCache>, usize)> {
        let d = self.layout.dims;
        let kvs = seq.kvs;
        if kvs.len() != self.layout.layers.len() {
            bail!(
                "decode step: {} caches for {} layers",
                kvs.len(),
                self.layout.layers.len()
            )
        }
        let len = kvs.first().map_or(0, |kv| kv.len);
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
            // The first cached row of head 0.
            let row = kv.offset * d.head_dim;
            layers.push((
                float_address(cuda_of(&ks)?, ka + row, &self.stream)?,
                float_address(cuda_of(&vs)?, va + row, &self.stream)?,
                cap,
            ));
        }
        Ok((layers, len))
    }

    /// The step's launches for `shape` (batch, key splits): replayed from its graph, captured
    /// first if need be, or launched one by one.
    fn run(&mut self, shape: (usize, usize)) -> Result<()> {
        if self.launch == StepLaunch::Eager || self.capture_error.is_some() {
            return self.launches(shape);
        }
        if !self.captured.contains_key(&shape) {
            // The kernels are loaded (and NVRTC compiled) outside the capture.
            self.launches(shape)?;
            match self.capture(shape) {
                Ok(graph) => {
                    self.graphs += 1;
                    self.captured.insert(shape, Captured(graph));
                }
                Err(e) => self.capture_error = Some(e.to_string()),
            }
            // The eager pass above already computed this step.
            return Ok(());
        }
        self.captured[&shape].0.launch().w()
    }

    fn capture(&self, shape: (usize, usize)) -> Result<CudaGraph> {
        let stream = &self.stream;
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .w()?;
        let launched = self.launches(shape);
        // End the capture whatever happened, so that the stream is usable again.
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        launched?;
        match ended.w()? {
            Some(graph) => Ok(graph),
            None => bail!("decode step: the capture recorded nothing"),
        }
    }

    /// Every launch of one step ([`Layout::plan`]), in order, for `shape` (batch, splits).
    fn launches(&self, shape: (usize, usize)) -> Result<()> {
        for l in self.layout.plan(shape) {
            let f = func(&self.dev, l.module, &l.name)?;
            let mut b = self.stream.launch_builder(&f);
            for a in &l.args {
                match a {
                    Arg::Ptr(x) => b.arg(x),
                    Arg::I32(x) => b.arg(x),
                    Arg::I64(x) => b.arg(x),
                    Arg::F32(x) => b.arg(x),
                    Arg::Gemv(x) => b.arg(x),
                    Arg::Rope(x) => b.arg(x),
                    Arg::Decode(x) => b.arg(x),
                };
            }
            let cfg = LaunchConfig {
                grid_dim: l.grid,
                block_dim: l.block,
                shared_mem_bytes: l.shared,
            };
            // SAFETY: the plan's arguments match each entry point's parameters (plan.rs
            // mirrors decode_step.cu and attention_decode.cu; emulate.rs runs the same plan
            // against the CPU oracle), every address lies in a live buffer, weight or cache
            // with room for what the kernel writes.
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok(())
    }
}
