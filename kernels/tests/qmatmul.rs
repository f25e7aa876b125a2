//! The quantized CPU products against the f32 product of the dequantized matrix, for every
//! format repacked, on candle's quantization of random weights.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use capstan_kernels::cpu::qmatmul::{GgmlFormat, QKernel, QMatrix};
use rand::{Rng, SeedableRng};

const FORMATS: [(GgmlDType, GgmlFormat); 7] = [
    (GgmlDType::Q5_0, GgmlFormat::Q5_0),
    (GgmlDType::Q5_1, GgmlFormat::Q5_1),
    (GgmlDType::Q4_0, GgmlFormat::Q4_0),
    (GgmlDType::Q4_1, GgmlFormat::Q4_1),
    (GgmlDType::Q8_0, GgmlFormat::Q8_0),
    (GgmlDType::Q4K, GgmlFormat::Q4K),
    (GgmlDType::Q6K, GgmlFormat::Q6K),
];

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// `(QMatrix, candle's dequantized f32 weights)` of a random `(rows, cols)` matrix.
fn matrix(dtype: GgmlDType, format: GgmlFormat, rows: usize, cols: usize) -> (QMatrix, Vec<f32>) {
    let w = Tensor::from_vec(random(rows * cols, 7), (rows, cols), &Device::Cpu).unwrap();
    let qt = QTensor::quantize(&w, dtype).unwrap();
    let bytes = qt.data().unwrap();
    let m = QMatrix::from_ggml(format, rows, cols, &bytes).unwrap();
    let deq = qt
        .dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    (m, deq)
}

#[test]
fn repacked_weights_equal_ggml_dequantization() {
    // 300 x 544: more weights than one piece of the threaded dequantization, an odd number
    // of blocks a row.
    for (rows, cols) in [(8, 512), (300, 544)] {
        for (dtype, format) in FORMATS {
            if cols % format.block().0 != 0 {
                continue;
            }
            let (m, deq) = matrix(dtype, format, rows, cols);
            let ours = m.dequantize();
            let differ = ours.iter().zip(&deq).filter(|(a, b)| a != b).count();
            assert_eq!(
                differ, 0,
                "{format:?} ({rows}, {cols}): {differ} weights differ from candle's"
            );
            // One row at a time, as a token embedding is looked up.
            let mut row = vec![0f32; cols];
            for r in [0, rows / 2, rows - 1] {
                m.dequantize_row(r, &mut row);
                assert_eq!(row, deq[r * cols..(r + 1) * cols], "{format:?} row {r}");
            }
        }
    }
}

/// `|y - x W^T|` is bounded by the activations' rounding: each `x_k` moves at most half a
/// step of its block (`max|x| / 254`), so the error is at most `sum_k |w_k| step_k / 2`.
fn check(m: &QMatrix, w: &[f32], x: &[f32], kernel: QKernel, what: &str) {
    let (rows, cols) = (m.rows(), m.cols());
    let y = m.matmul_with(x, kernel);
    for (i, xr) in x.chunks_exact(cols).enumerate() {
        let half_steps: Vec<f32> = xr
            .chunks_exact(32)
            .flat_map(|b| {
                let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
                std::iter::repeat_n(amax / 254.0, 32)
            })
            .collect();
        for r in 0..rows {
            let wr = &w[r * cols..(r + 1) * cols];
            let exact: f32 = wr.iter().zip(xr).map(|(a, b)| a * b).sum();
            let bound: f32 = wr.iter().zip(&half_steps).map(|(a, s)| a.abs() * s).sum();
            let got = y[i * rows + r];
            assert!(
                (got - exact).abs() <= bound * 1.01 + 1e-4,
                "{what}: row {i} col {r}: {got} vs {exact} (bound {bound})"
            );
        }
    }
}

#[test]
fn products_match_the_dequantized_product() {
    // 13 rows of x: tiles of 4, 4, 4 and 1; outputs in tiles of 4 (or 2) and a remainder;
    // 544, 576 and 608 inputs: 1, 2 and 3 blocks past a multiple of 4 (the 256-bit tiles read
    // an odd last block alone, the 512-bit ones up to three, masked).
    for (dtype, format) in FORMATS {
        for cols in [512, 544, 576, 608] {
            if cols % format.block().0 != 0 {
                continue;
            }
            // 70 and 71 outputs: a last tile of 2 and of 3 (or 1) matrix rows.
            for rows in [70, 71] {
                let (m, w) = matrix(dtype, format, rows, cols);
                for n in [1, 2, 3, 13] {
                    let x = random(n * cols, n as u64);
                    for kernel in QKernel::ALL.into_iter().filter(|k| k.available()) {
                        let what = format!("{format:?} {rows}x{cols} n={n} {kernel:?}");
                        check(&m, &w, &x, kernel, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn threaded_products_equal_one_thread() {
    // Large enough to run on the thread pool: the same numbers as the tiles computed alone.
    let (m, _) = matrix(GgmlDType::Q4_1, GgmlFormat::Q4_1, 1000, 256);
    let x = random(4 * 256, 3);
    let all = m.matmul(&x);
    for (i, xr) in x.chunks_exact(256).enumerate() {
        assert_eq!(
            m.matmul(xr),
            all[i * 1000..(i + 1) * 1000].to_vec(),
            "row {i}"
        );
    }
}

#[test]
fn wrong_sizes_are_refused() {
    let err = QMatrix::from_ggml(GgmlFormat::Q4_0, 2, 64, &[0u8; 35]).unwrap_err();
    assert!(err.contains("(2, 64)"), "{err}");
    assert!(QMatrix::from_ggml(GgmlFormat::Q4K, 1, 128, &[0u8; 72]).is_err());
}

#[test]
fn stacked_matrices_compute_each_part() {
    let (a, _) = matrix(GgmlDType::Q4K, GgmlFormat::Q4K, 6, 256);
    let (b, _) = matrix(GgmlDType::Q4_0, GgmlFormat::Q4_0, 4, 256);
    let (c, _) = matrix(GgmlDType::Q6K, GgmlFormat::Q6K, 4, 256);
    let (d, _) = matrix(GgmlDType::Q5_0, GgmlFormat::Q5_0, 4, 256);
    assert!(
        QMatrix::stack(&[&a, &c]).is_none(),
        "4-bit and 8-bit layouts do not stack"
    );
    assert!(
        QMatrix::stack(&[&a, &d]).is_none(),
        "4-bit and 5-bit layouts do not stack"
    );
    let (e, _) = matrix(GgmlDType::Q5_1, GgmlFormat::Q5_1, 3, 256);
    let de = QMatrix::stack(&[&d, &e]).unwrap();
    let x5 = random(2 * 256, 5);
    let (yd, ye, yde) = (d.matmul(&x5), e.matmul(&x5), de.matmul(&x5));
    for i in 0..2 {
        assert_eq!(&yde[i * 7..i * 7 + 4], &yd[i * 4..i * 4 + 4]);
        assert_eq!(&yde[i * 7 + 4..i * 7 + 7], &ye[i * 3..i * 3 + 3]);
    }
    let ab = QMatrix::stack(&[&a, &b]).unwrap();
    assert_eq!((ab.rows(), ab.cols()), (10, 256));
    let x = random(3 * 256, 9);
    let (ya, yb, yab) = (a.matmul(&x), b.matmul(&x), ab.matmul(&x));
    for i in 0..3 {
        assert_eq!(&yab[i * 10..i * 10 + 6], &ya[i * 6..i * 6 + 6]);
        assert_eq!(&yab[i * 10 + 6..i * 10 + 10], &yb[i * 4..i * 4 + 4]);
    }
}

/// On AMX tiles every format's product is that of the bf16-rounded weights, to f32's
/// accumulation error (the rows are carried in two bf16 parts): the panels of the layouts packed straight from their blocks (4-bit,
/// signed bytes) and through f32 rows (5-bit) hold each weight as ggml dequantizes it.
#[test]
fn products_on_amx_tiles_equal_the_bf16_rounded_reference() {
    if !capstan_kernels::cpu::amx::available() {
        eprintln!("skipped: this CPU (or kernel) gives no AMX tiles");
        return;
    }
    let bf16 = |v: f32| half::bf16::from_f32(v).to_f64();
    let (rows, cols) = (64, 512);
    for (dtype, format) in FORMATS {
        let (m, w) = matrix(dtype, format, rows, cols);
        for n in [3, 40] {
            let x = random(n * cols, 11 + n as u64);
            let y = m.matmul_amx(&x).expect("64 x 512 is whole panels");
            for (i, xr) in x.chunks_exact(cols).enumerate() {
                for r in 0..rows {
                    let want: f64 = xr
                        .iter()
                        .zip(&w[r * cols..(r + 1) * cols])
                        .map(|(&a, &b)| a as f64 * bf16(b))
                        .sum();
                    let got = y[i * rows + r] as f64;
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{format:?} row {i}, output {r}: {got} against {want}"
                    );
                }
            }
        }
    }
}
