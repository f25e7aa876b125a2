//! Throughput of the quantized CPU products on matrices of SmolLM2's shapes, one row and
//! batches of rows: `cargo run --release -p capstan-kernels --example qmatmul_speed [KERNEL]`.
//! (A probe for profiling; benchmarks against peers live in bench/.)

use std::time::Instant;

use capstan_kernels::cpu::qmatmul::{GgmlFormat, QKernel, QMatrix};

fn main() {
    // A kernel by name (`portable`, `avx2`, `avx-vnni`, `avx512-vnni`, `avx512`), else the best.
    let kernel = match std::env::args().nth(1).as_deref() {
        Some("portable") => QKernel::Portable,
        Some("avx2") => QKernel::Avx2,
        Some("avx-vnni") => QKernel::AvxVnni,
        Some("avx512-vnni") => QKernel::Avx512Vnni,
        Some("avx512") => QKernel::Avx512,
        _ => QKernel::best(),
    };
    println!("{kernel:?}");
    // (format, bytes a block, header bytes before the arbitrary ones, rows, cols)
    for (format, block, from, rows, cols) in [
        (GgmlFormat::Q4_1, 20, 4, 1536, 576),
        (GgmlFormat::Q4_1, 20, 4, 576, 1536),
        (GgmlFormat::Q5_0, 22, 2, 1536, 576),
        (GgmlFormat::Q5_0, 22, 2, 576, 1536),
        (GgmlFormat::Q8_0, 34, 2, 49152, 576),
    ] {
        let blocks = rows * cols / 32;
        // Valid blocks: small f16 scales (0x2000 = 2^-7), arbitrary nibbles or bytes.
        let mut data = vec![0u8; blocks * block];
        for (i, b) in data.chunks_exact_mut(block).enumerate() {
            b[1] = 0x20;
            for (j, v) in b[from..].iter_mut().enumerate() {
                *v = ((i * 7 + j * 13) % 251) as u8;
            }
        }
        let m = QMatrix::from_ggml(format, rows, cols, &data).expect("valid blocks");
        // Chunks of many rows on AMX tiles too, where the CPU has them (bf16).
        let amx = m.fits_amx();
        for (n, on_amx) in [(1, false), (4, false), (16, false), (128, false)]
            .into_iter()
            .chain([(16, true), (128, true)].into_iter().filter(|_| amx))
        {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i % 17) as f32 - 8.0) / 8.0)
                .collect();
            let reps = (2_000_000_000 / (rows * cols * n)).max(3);
            let t = Instant::now();
            for _ in 0..reps {
                if on_amx {
                    std::hint::black_box(m.matmul_amx(&x));
                } else {
                    std::hint::black_box(m.matmul_with(&x, kernel));
                }
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            let on = if on_amx { " on AMX tiles" } else { "" };
            println!(
                "{format:?} ({rows}, {cols}) x {n} rows{on}: {:.3} ms, {:.1} GMAC/s, {:.1} GB/s of weights",
                s * 1e3,
                (rows * cols * n) as f64 / s / 1e9,
                m.bytes() as f64 / s / 1e9
            );
        }
    }
}
