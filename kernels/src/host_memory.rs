//! Device memory on the host, for tests that run launches without a GPU (the step's emulator,
//! the CUDA sources compiled for the host): regions of real memory, each ending just before a
//! page no access is allowed to, their addresses what the kernels are given.

use candle_core::{DType, Tensor};

use crate::step::buffers::f32_bytes;

/// Device memory on the host (a kernel run by `crate::host_kernels` reading or writing past a
/// buffer faults).
pub(crate) struct Memory {
    /// (address, bytes, the mapping, its bytes)
    regions: Vec<(u64, usize, *mut libc::c_void, usize)>,
}

impl Drop for Memory {
    fn drop(&mut self) {
        for &(_, _, map, len) in &self.regions {
            // SAFETY: mapped by `alloc`, unmapped once.
            unsafe { libc::munmap(map, len) };
        }
    }
}

impl Memory {
    pub(crate) fn new() -> Self {
        Self {
            regions: Vec::new(),
        }
    }

    /// A zeroed region of `n` bytes, 16-byte aligned (what the kernels' vector loads need),
    /// ending less than 16 bytes before a guard page.
    pub(crate) fn alloc(&mut self, n: usize) -> u64 {
        let n = n.max(16);
        let page = 4096;
        let data = n.div_ceil(page) * page;
        let len = data + page;
        // SAFETY: a fresh anonymous mapping; the guard page is its last.
        let map = unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(map != libc::MAP_FAILED, "no memory for {n} bytes");
            libc::mprotect(map.cast::<u8>().add(data).cast(), page, libc::PROT_NONE);
            map
        };
        let base = (map as u64 + data as u64 - n as u64) & !15;
        self.regions.push((base, n, map, len));
        base
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) -> u64 {
        let a = self.alloc(bytes.len());
        self.write(a, bytes);
        a
    }

    /// Panics unless `n` bytes at `addr` lie within one region.
    pub(crate) fn check(&self, addr: u64, n: usize) {
        let inside = self
            .regions
            .iter()
            .any(|&(base, len, ..)| addr >= base && addr + n as u64 <= base + len as u64);
        assert!(inside, "{n} bytes at {addr:#x} lie outside every buffer");
    }

    pub(crate) fn read(&self, addr: u64, n: usize) -> &[u8] {
        self.check(addr, n);
        // SAFETY: within a live region (checked); nothing writes it while the slice lives
        // (writes take `&mut self`).
        unsafe { std::slice::from_raw_parts(addr as *const u8, n) }
    }

    pub(crate) fn write(&mut self, addr: u64, bytes: &[u8]) {
        self.check(addr, bytes.len());
        // SAFETY: within a live region (checked), which no slice borrows (`&mut self`).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
    }

    pub(crate) fn i32(&self, addr: u64) -> i32 {
        i32::from_le_bytes(self.read(addr, 4).try_into().unwrap())
    }

    pub(crate) fn u64(&self, addr: u64) -> u64 {
        u64::from_le_bytes(self.read(addr, 8).try_into().unwrap())
    }

    pub(crate) fn f32s(&self, addr: u64, n: usize) -> Vec<f32> {
        self.read(addr, 4 * n)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    pub(crate) fn put_f32s(&mut self, addr: u64, v: &[f32]) {
        self.write(addr, &f32_bytes(v));
    }

    /// `n` values of type `t` (`f32`, `bf16`, `f16`).
    pub(crate) fn floats(&self, t: &str, addr: u64, n: usize) -> Vec<f32> {
        match t {
            "f32" => self.f32s(addr, n),
            _ => self
                .read(addr, 2 * n)
                .chunks_exact(2)
                .map(|b| half_to_f32(t, u16::from_le_bytes([b[0], b[1]])))
                .collect(),
        }
    }

    pub(crate) fn put_floats(&mut self, t: &str, addr: u64, v: &[f32]) {
        let bytes: Vec<u8> = match t {
            "f32" => f32_bytes(v),
            _ => v
                .iter()
                .flat_map(|&x| f32_to_half(t, x).to_le_bytes())
                .collect(),
        };
        self.write(addr, &bytes);
    }
}

/// Bytes of one value of type `t` (`f32`, `bf16`, `f16`).
pub(crate) fn elem_bytes(t: &str) -> usize {
    if t == "f32" {
        4
    } else {
        2
    }
}

/// `x` rounded to type `t` (`f32`, `bf16`, `f16`).
pub(crate) fn round_to(t: &str, x: f32) -> f32 {
    match t {
        "f32" => x,
        _ => half_to_f32(t, f32_to_half(t, x)),
    }
}

fn half_to_f32(t: &str, h: u16) -> f32 {
    match t {
        "bf16" => half::bf16::from_bits(h).to_f32(),
        _ => half::f16::from_bits(h).to_f32(),
    }
}

fn f32_to_half(t: &str, x: f32) -> u16 {
    match t {
        "bf16" => half::bf16::from_f32(x).to_bits(),
        _ => half::f16::from_f32(x).to_bits(),
    }
}

/// The bytes of a float tensor as stored.
pub(crate) fn tensor_bytes(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec1::<half::f16>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::U8 => t.to_vec1::<u8>().unwrap(),
        DType::I64 => t
            .to_vec1::<i64>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        d => panic!("{d:?}"),
    }
}

/// A float tensor's values as f32, in order.
pub(crate) fn f32_values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .unwrap()
}
