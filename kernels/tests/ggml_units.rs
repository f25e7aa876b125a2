//! The decode step's GGML block decoding (kernels/src/cuda/ggml_units.cuh) compiled for the
//! host with the system C++ compiler and run on blocks candle quantized: every value equals
//! candle's dequantization (ggml's reference). The CUDA kernels include the same functions, so
//! this checks their reading of every format without a GPU.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

const HARNESS: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned int u32;
static inline float h2f(u16 h) {
    u32 sign = (u32)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 0) {
        if (man == 0) { bits = sign; }
        else { exp = 1; while (!(man & 1024)) { man <<= 1; exp--; } man &= 1023;
               bits = sign | ((exp + 112) << 23) | (man << 13); }
    } else if (exp == 31) { bits = sign | 0x7f800000u | (man << 13); }
    else { bits = sign | ((exp + 112) << 23) | (man << 13); }
    float f; memcpy(&f, &bits, 4); return f;
}
#define CAPSTAN_HD inline
#define CAPSTAN_H2F(x) h2f(x)
#include "ggml_units.cuh"
template <typename Q> void run(const u8* data, int rows, int cols) {
    long long row_bytes = (long long)cols / Q::BLOCK * Q::BYTES;
    float y[32];
    for (int r = 0; r < rows; r++)
        for (int u = 0; u < cols / 32; u++) {
            Q::unit(data + r * row_bytes, u, y);
            fwrite(y, 4, 32, stdout);
            // A lane's eight values (the tensor-core products' B operand) are the unit's.
            for (int t = 0; t < 4; t++) {
                float part[8];
                Q::part8(data + r * row_bytes, u, t, part);
                if (memcmp(part, y + 8 * t, sizeof part) != 0) {
                    fprintf(stderr, "part8: row %d unit %d values %d..%d differ from unit's\n",
                            r, u, 8 * t, 8 * t + 7);
                    exit(3);
                }
            }
        }
}
int main(int argc, char** argv) {
    const char* fmt = argv[1];
    int rows = atoi(argv[2]), cols = atoi(argv[3]);
    std::vector<u8> data;
    int c;
    while ((c = getchar()) != EOF) data.push_back((u8)c);
    if (!strcmp(fmt, "q4_0")) run<Q4_0>(data.data(), rows, cols);
    else if (!strcmp(fmt, "q4_1")) run<Q4_1>(data.data(), rows, cols);
    else if (!strcmp(fmt, "q5_0")) run<Q5_0>(data.data(), rows, cols);
    else if (!strcmp(fmt, "q5_1")) run<Q5_1>(data.data(), rows, cols);
    else if (!strcmp(fmt, "q8_0")) run<Q8_0>(data.data(), rows, cols);
    else if (!strcmp(fmt, "q4k")) run<Q4_K>(data.data(), rows, cols);
    else if (!strcmp(fmt, "q6k")) run<Q6_K>(data.data(), rows, cols);
    else return 2;
    return 0;
}
"#;

fn harness() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ggml_units");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("harness.cpp");
    std::fs::write(&src, HARNESS).unwrap();
    let exe = dir.join("harness");
    let cuda =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("src/cuda");
    let out = Command::new("c++")
        .args(["-O1", "-std=c++14", "-I"])
        .arg(&cuda)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the system C++ compiler (c++) runs");
    assert!(
        out.status.success(),
        "ggml_units.cuh does not compile for the host:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn every_format_decodes_as_candle_dequantizes() {
    let exe = harness();
    let (rows, cols) = (3usize, 512usize);
    // Values of several magnitudes and signs, so that scales, minimums and high bits all vary.
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let x = ((i * 7919) % 1009) as f32 / 1009.0 - 0.4;
            x * (1.0 + (i / 64 % 5) as f32) * if i % 3 == 0 { -1.5 } else { 1.0 }
        })
        .collect();
    let t = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
    for (dtype, name) in [
        (GgmlDType::Q4_0, "q4_0"),
        (GgmlDType::Q4_1, "q4_1"),
        (GgmlDType::Q5_0, "q5_0"),
        (GgmlDType::Q5_1, "q5_1"),
        (GgmlDType::Q8_0, "q8_0"),
        (GgmlDType::Q4K, "q4k"),
        (GgmlDType::Q6K, "q6k"),
    ] {
        assert!(capstan_kernels::step::ggml_supported(dtype));
        let q = QTensor::quantize(&t, dtype).unwrap();
        let want: Vec<f32> = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let bytes = q.data().unwrap();
        let mut child = Command::new(&exe)
            .args([name, &rows.to_string(), &cols.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{name}: harness failed");
        let got: Vec<f32> = out
            .stdout
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{name}: value {i} (row {}, column {}) decoded as {g}, candle says {w}",
                i / cols,
                i % cols
            );
        }
    }
}
