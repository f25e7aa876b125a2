#!/usr/bin/env python3
"""GPU check and speed peer for capstan-kernels (NOT yet run: written without a GPU).

On the GPU machine (H200, CUDA 13 driver, PyTorch with CUDA):
  1. Correctness: runs the Rust GPU tests (kernels vs CPU reference at bf16/f16/f32 tolerance):
       cargo test --release -p capstan-kernels --features cuda --test gpu -- --nocapture
     (or, without a Rust toolchain there, the test binary built on a dev machine:
       target-cuda/release/deps/gpu-* --nocapture).
  2. Speed peer: times torch SDPA (flash backend) on the same shapes, for comparison with the
     Capstan kernel timings printed by `capstan model generate` (tokens/s) with --device cuda.

Usage: python3 bench/kernels_gpu.py [--gpu-test PATH_TO_TEST_BINARY] [--out results.json]
"""
import argparse
import json
import subprocess
import sys
import time


def sdpa_peer(shapes, dtype_name):
    import torch
    import torch.nn.functional as F

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    rows = []
    for b, h, kvh, s, d in shapes:
        q = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
        k = torch.randn(b, kvh, s, d, device="cuda", dtype=dtype).repeat_interleave(h // kvh, 1)
        v = torch.randn(b, kvh, s, d, device="cuda", dtype=dtype).repeat_interleave(h // kvh, 1)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
            n = 20
            t0 = time.perf_counter()
            for _ in range(n):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / n * 1e3
        flops = 4 * b * h * s * s * d / 2
        rows.append({"shape": [b, h, kvh, s, d], "dtype": dtype_name, "sdpa_flash_ms": ms,
                     "tflops": flops / ms / 1e9})
        print(f"sdpa flash {dtype_name} {(b, h, kvh, s, d)}: {ms:.3f} ms")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu-test", help="prebuilt capstan-kernels gpu test binary")
    ap.add_argument("--out", default="kernels_gpu.json")
    args = ap.parse_args()
    result = {}
    cmd = ([args.gpu_test, "--nocapture"] if args.gpu_test else
           ["cargo", "test", "--release", "-p", "capstan-kernels", "--features", "cuda",
            "--test", "gpu", "--", "--nocapture"])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    result["gpu_test_rc"] = proc.returncode
    shapes = [(1, 32, 8, 4096, 128), (1, 32, 8, 16384, 128), (4, 32, 8, 2048, 128)]
    try:
        result["sdpa"] = sdpa_peer(shapes, "bf16")
    except Exception as e:  # no torch / no GPU: report, do not hide
        result["sdpa_error"] = repr(e)
    json.dump(result, open(args.out, "w"), indent=2)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
