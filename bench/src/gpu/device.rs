//! The device, timing with synchronisation, copy bandwidth and peak device memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};

/// `cpu` or `cuda` (device 0): the check script runs every step on the CPU at tiny shapes to
/// prove it runs, and on the GPU for the figures.
pub fn open(name: &str) -> anyhow::Result<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0)
            .context("opening CUDA device 0 (capstan-bench must be built with --features cuda)"),
        other => bail!("--device {other:?}: expected cpu or cuda"),
    }
}

/// `f32`, `bf16` or `f16`.
pub fn dtype(name: &str) -> anyhow::Result<DType> {
    match name {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        "f16" => Ok(DType::F16),
        other => bail!("--dtype {other:?}: expected f32, bf16 or f16"),
    }
}

/// A short name of the device for the results.
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => format!(
            "cpu ({} threads)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        Device::Cuda(_) => "cuda:0".into(),
        Device::Metal(_) => "metal".into(),
    }
}

/// Seconds `f` takes, the device synchronised before and after (and `f` [`profiled`]).
pub fn timed<T>(
    device: &Device,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, f64)> {
    device.synchronize()?;
    let start = Instant::now();
    let out = profiled(device, f)?;
    device.synchronize()?;
    Ok((out, start.elapsed().as_secs_f64()))
}

/// `f` with the CUDA profiler recording, under `CAPSTAN_PROFILE_TIMED` on a CUDA device: Nsight
/// Compute started with `--profile-from-start off` (scripts/gpu-profile.sh) then sees only what
/// a benchmark measures, not the model's set-up.
pub fn profiled<T>(device: &Device, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let on = std::env::var_os("CAPSTAN_PROFILE_TIMED").is_some();
    profiler(device, on, true);
    let out = f();
    if on {
        device.synchronize()?;
    }
    profiler(device, on, false);
    out
}

/// Starts or stops the CUDA profiler (best effort: a profiler that is not attached ignores it).
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
fn profiler(device: &Device, on: bool, start: bool) {
    #[cfg(feature = "cuda")]
    if let (true, Device::Cuda(dev)) = (on, device) {
        use candle_core::cuda_backend::cudarc::driver::sys;
        if dev.cuda_stream().context().bind_to_thread().is_ok() {
            // SAFETY: no arguments; the device's context is current on this thread.
            let _ = unsafe {
                if start {
                    sys::cuProfilerStart()
                } else {
                    sys::cuProfilerStop()
                }
            };
        }
    }
}

/// [`timed`], less the seconds spent meanwhile building cuDNN plans for shapes seen for the
/// first time (a server builds a shape's plan once, for every later request), and those
/// seconds: `(out, seconds without plans, plan seconds)`.
pub fn timed_without_plans<T>(
    device: &Device,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, f64, f64)> {
    let before = capstan_kernels::cudnn_stats().plan_seconds;
    let (out, seconds) = timed(device, f)?;
    let plans = capstan_kernels::cudnn_stats().plan_seconds - before;
    Ok((out, seconds - plans, plans))
}

/// Device-to-device copy bandwidth in bytes/s, counting bytes read and written (the way the
/// device tool's notes and gpt-fast's roofline count it): the best of 5 copies of `bytes`.
pub fn copy_bandwidth(device: &Device, bytes: usize) -> anyhow::Result<f64> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        // Into a buffer allocated once: `Tensor::copy` allocates its destination each time, so
        // the probe timed an allocation too (1.1 TB/s on the 2026-11-29 H200 run, where a
        // PyTorch copy moves 4.3 TB/s counted the same way: the device tool's notes).
        let stream = dev.cuda_stream();
        let src = stream.alloc_zeros::<u8>(bytes)?;
        let mut dst = stream.alloc_zeros::<u8>(bytes)?;
        stream.memcpy_dtod(&src, &mut dst)?; // warm-up
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let (_, s) = timed(device, || Ok(stream.memcpy_dtod(&src, &mut dst)?))?;
            best = best.min(s);
        }
        return Ok(2.0 * bytes as f64 / best);
    }
    let src = Tensor::zeros(bytes / 2, DType::BF16, device)?;
    let _ = src.copy()?; // warm-up
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let (_, s) = timed(device, || Ok(src.copy()?))?;
        best = best.min(s);
    }
    Ok(2.0 * bytes as f64 / best)
}

/// Peak device memory in use while it runs, sampled every half millisecond from the driver's
/// free/total (so it counts every allocation of the process, the memory pool's included).
pub struct MemoryPeak {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<usize>>,
    baseline: usize,
}

impl MemoryPeak {
    /// Starts sampling; `None` on a device without such a counter (the CPU).
    pub fn start(device: &Device) -> anyhow::Result<Option<Self>> {
        let Some(used) = used_fn(device) else {
            return Ok(None);
        };
        let baseline = used()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(used().unwrap_or(0));
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            peak.max(used().unwrap_or(0))
        });
        Ok(Some(Self {
            stop,
            handle: Some(handle),
            baseline,
        }))
    }

    /// Bytes in use before sampling started.
    pub fn baseline(&self) -> usize {
        self.baseline
    }

    /// Stops sampling: the peak bytes in use.
    pub fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().map_or(0, |h| h.join().unwrap_or(0))
    }
}

type UsedFn = Box<dyn Fn() -> anyhow::Result<usize> + Send>;

#[cfg(feature = "cuda")]
fn used_fn(device: &Device) -> Option<UsedFn> {
    let Device::Cuda(dev) = device else {
        return None;
    };
    let ctx = dev.cuda_stream().context().clone();
    Some(Box::new(move || {
        let (free, total) = ctx.mem_get_info()?;
        Ok(total - free)
    }))
}

#[cfg(not(feature = "cuda"))]
fn used_fn(_: &Device) -> Option<UsedFn> {
    None
}
