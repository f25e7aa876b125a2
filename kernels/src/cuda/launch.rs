//! What every launch needs: the sources compiled by NVRTC for the device's architecture (once
//! per process and architecture, and kept on disk between processes: `crate::ptx_cache`) and
//! loaded once per device, the type suffix of an entry point, output buffers (NaN-filled under
//! `CAPSTAN_KERNELS_POISON`), and the storages of inputs read in place.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    result, CudaFunction, CudaSlice, DevicePtrMut, DeviceRepr,
};
use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice, WrapErr};
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result, Storage, WithDType};

type PtxCache = Mutex<HashMap<(&'static str, String), String>>;

/// PTX of `module` for the device's compute capability, compiled once per process.
fn ptx(module: &'static str, dev: &CudaDevice) -> Result<String> {
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    let (major, minor) = dev.cuda_stream().context().compute_capability().w()?;
    let arch = format!("compute_{major}{minor}");
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().expect("ptx cache");
    if let Some(p) = map.get(&(module, arch.clone())) {
        return Ok(p.clone());
    }
    let src = crate::SOURCES
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, src)| *src)
        .expect("known module");
    let mut options = vec!["-default-device".to_string()];
    if module == "attention_decode" {
        if let Some(keys) = crate::step::decode_grid::gqa_keys_define() {
            options.push(format!("-DGQA_KEYS={keys}"));
        }
    }
    if module.starts_with("decode_step") {
        if let Some(paired) = crate::step::decode_grid::step_paired_define() {
            options.push(format!("-DSTEP_PAIRED={paired}"));
        }
    }
    let key = [src, &arch, &options.join(" "), &nvrtc_version()];
    let dir = crate::ptx_cache::directory();
    let compiled = crate::ptx_cache::cached(dir.as_deref(), module, &key, || {
        // CompileOptions wants a &'static str: one small leak per module NVRTC compiles.
        let arch_static: &'static str = Box::leak(arch.clone().into_boxed_str());
        let opts = CompileOptions {
            arch: Some(arch_static),
            options: options.clone(),
            name: Some(format!("{module}.cu")),
            ..Default::default()
        };
        compile_ptx_with_opts(src, opts)
            .map(|p| p.to_src())
            .map_err(|e| {
                candle_core::Error::Cuda(format!("NVRTC {module}.cu for {arch}: {e}").into())
            })
    })?;
    map.insert((module, arch), compiled.clone());
    Ok(compiled)
}

/// NVRTC's version, `major.minor` (a cached PTX is NVRTC's output: another version compiles
/// its own); empty if it cannot be asked.
fn nvrtc_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; NVRTC is loaded by cudarc on first use.
    let status = unsafe {
        candle_core::cuda_backend::cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor)
    };
    if status == candle_core::cuda_backend::cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        format!("{major}.{minor}")
    } else {
        String::new()
    }
}

pub(super) fn func(dev: &CudaDevice, module: &'static str, name: &str) -> Result<CudaFunction> {
    let ptx = ptx(module, dev)?;
    Ok(dev
        .get_or_load_custom_func(name, &format!("capstan_{module}"), &ptx)?
        .into_cuda_function())
}

pub(super) fn suffix(s: &CudaStorage) -> Result<&'static str> {
    Ok(match &s.slice {
        CudaStorageSlice::F32(_) => "f32",
        CudaStorageSlice::BF16(_) => "bf16",
        CudaStorageSlice::F16(_) => "f16",
        _ => bail!(
            "capstan-kernels: CUDA kernels take f32, bf16 or f16, got {:?}",
            s.dtype()
        ),
    })
}

/// A kernel's output buffer, left uninitialised (the kernel writes every element) unless
/// `CAPSTAN_KERNELS_POISON` is set: then filled with NaN first, so that an element a kernel
/// fails to write shows up in a comparison (scripts/gpu-check.sh sets it for its parity steps,
/// not for its benchmarks). The fill is a memset on the device's stream: every byte 0xFF is a
/// NaN in f32, bf16 and f16 alike. (It was a host vector of NaN copied over, a transfer as
/// large as the output on every call: the 2026-11-29 H200 run measured that copy, not the
/// kernels, wherever an output was allocated a call.)
pub(super) fn output<T: CudaDType + DeviceRepr + WithDType>(
    dev: &CudaDevice,
    n: usize,
) -> Result<CudaSlice<T>> {
    // SAFETY: every element is written by the kernel (or by the fill below first).
    let mut out = unsafe { dev.alloc::<T>(n) }?;
    if std::env::var_os("CAPSTAN_KERNELS_POISON").is_some() {
        let stream = dev.cuda_stream();
        let bytes = n * std::mem::size_of::<T>();
        let (ptr, _guard) = out.device_ptr_mut(&stream);
        // SAFETY: `ptr` addresses `bytes` bytes of `out`, written in the stream's order.
        unsafe { result::memset_d8_async(ptr, 0xFF, bytes, stream.cu_stream()) }
            .map_err(|e| candle_core::Error::Msg(format!("capstan-kernels: NaN fill: {e}")))?;
    }
    Ok(out)
}

pub(super) fn offsets(l: &Layout) -> Result<(usize, usize)> {
    l.contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("capstan-kernels: non-contiguous {l:?}")))
}

pub(super) fn cuda_of(g: &Storage) -> Result<&CudaStorage> {
    match g {
        Storage::Cuda(s) => Ok(s),
        _ => bail!("capstan-kernels: an extra attention input is not on the CUDA device"),
    }
}
