#!/usr/bin/env python3
"""Compile every CUDA kernel source of capstan-kernels with NVRTC, without a GPU.

Loads libnvrtc.so.13 (from the PyPI wheel nvidia-cuda-nvrtc==13.0.88, or $CAPSTAN_NVRTC) with
ctypes and compiles each source exactly as the Rust side does (common.cuh prepended) for
compute_90 (override with --arch). Exits non-zero on the first failure, printing NVRTC's log.
"""
import argparse
import ctypes
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src", "cuda")
DENSE = ("f32", "bf16", "f16")
# The GGML formats of the decoding step, each its own module (lib.rs: step_ggml_source!).
GGML = {"q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0", "q5_1": "Q5_1", "q8_0": "Q8_0",
        "q4k": "Q4_K", "q6k": "Q6_K"}
# Must match kernels/src/cuda.rs (SOURCES) and the entry points it launches.
SOURCES = {
    "attention.cu": ["capstan_attention_f32", "capstan_attention_bf16", "capstan_attention_f16"],
    "attention_mma.cu": [
        f"capstan_attention_mma_{t}_d{d}{x}"
        for x in ("", "_extend")
        for t in ("bf16", "f16")
        for d in (64, 128)
    ],
    "attention_decode.cu": [f"capstan_attention_decode_{g}{t}" for g in ("", "gqa_")
                           for t in ("f32", "bf16", "f16")]
    + [f"capstan_attention_decode_mma_{t}" for t in ("bf16", "f16")],
    "attention_merge.cu": [
        "capstan_attention_merge_f32",
        "capstan_attention_merge_bf16",
        "capstan_attention_merge_f16",
    ],
    "rope.cu": ["capstan_rope_f32", "capstan_rope_bf16", "capstan_rope_f16"],
    "decode_step.cu": [f"capstan_step_gemv{k}_{w}_{t}" for k in ("", "_norm", "_batch")
                       for w in DENSE for t in DENSE]
    + [f"capstan_step_embed_{w}" for w in DENSE]
    + [f"capstan_step_{k}_{t}" for k in ("rmsnorm", "rope_append", "swiglu") for t in DENSE],
    "rmsnorm.cu": [
        "capstan_rms_norm_residual_f32",
        "capstan_rms_norm_residual_bf16",
        "capstan_rms_norm_residual_f16",
    ],
}

# Headers after common.cuh, as the concat! of kernels/src/lib.rs (SOURCES) puts them.
HEADERS = {"decode_step.cu": ["ggml_units.cuh"],
           "attention_mma.cu": ["attention_rules.cuh", "mma.cuh"],
           "attention_decode.cu": ["attention_rules.cuh", "mma.cuh"]}
# Modules compiled from a source with a line put before common.cuh: (module, file, prefix,
# entry points, headers after common.cuh).
# A GGML format's module also holds its batched products on tensor cores (TF32, f32 inputs).
VARIANTS = [(f"decode_step_{w}", "decode_step.cu", f"#define STEP_GGML(F) F({w}, {t}, false)\n",
             [f"capstan_step_gemv{k}_{w}_{x}" for k in ("", "_norm", "_batch") for x in DENSE]
             + [f"capstan_step_embed_{w}", f"capstan_step_gemv_mma_{w}_f32",
                f"capstan_step_gemv_mma_norm_{w}_f32"],
             ["ggml_units.cuh", "mma.cuh"])
            for w, t in GGML.items()]
# The batched products on tensor cores (sm_80 and up: a module of their own).
VARIANTS.append(("decode_step_mma", "decode_step.cu", "#define STEP_MMA\n",
                 [f"capstan_step_gemv_mma{k}_{t}_{t}" for k in ("", "_norm") for t in ("bf16", "f16")],
                 ["ggml_units.cuh", "mma.cuh"]))

# The decoding step with one sequence's paired products walked one row after the other
# (CAPSTAN_STEP_PAIRED=0: NVRTC's -DSTEP_PAIRED=0).
VARIANTS.append(("decode_step_unpaired", "decode_step.cu", "#define STEP_PAIRED 0\n",
                 SOURCES["decode_step.cu"], ["ggml_units.cuh"]))

# The grouped decoding kernel with 4 keys a slot (CAPSTAN_DECODE_GQA_KEYS=4: NVRTC's -DGQA_KEYS=4).
VARIANTS.append(("attention_decode_keys4", "attention_decode.cu", "#define GQA_KEYS 4\n",
                 [f"capstan_attention_decode_gqa_{t}" for t in ("f32", "bf16", "f16")],
                 ["attention_rules.cuh", "mma.cuh"]))


def find_nvrtc():
    env = os.environ.get("CAPSTAN_NVRTC")
    if env:
        return env
    home = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
    candidates = glob.glob(os.path.join(home, "cuda", "nvidia", "cu13", "lib", "libnvrtc.so.13"))
    try:
        import nvidia  # noqa: F401  (pip wheel nvidia-cuda-nvrtc installed in this Python)

        for p in nvidia.__path__:
            candidates += glob.glob(os.path.join(p, "cu13", "lib", "libnvrtc.so.13"))
    except ImportError:
        pass
    return candidates[0] if candidates else "libnvrtc.so.13"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--arch", default="compute_90")
    ap.add_argument("--ptx-dir", help="also write each module's PTX there (for ptxas -v)")
    args = ap.parse_args()
    path = find_nvrtc()
    try:
        # NVRTC dlopens its builtins library by soname: load it from the same folder first.
        for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.13.*")):
            if ".alt." not in b:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(path)
    except OSError as e:
        sys.exit(f"nvrtc-check: cannot load {path} ({e}); run scripts/setup-cuda.sh or "
                 "pip install nvidia-cuda-nvrtc==13.0.88")
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    common = open(os.path.join(SRC, "common.cuh")).read()
    failed = False
    default = lambda source: HEADERS.get(
        source, ["attention_rules.cuh"] if source.startswith("attention") else [])
    modules = [(name, name, "", entries, default(name)) for name, entries in SOURCES.items()]
    for name, source, prefix, entries, headers in modules + VARIANTS:
        # The attention kernels take their patterns' rules from a shared header.
        rules = "".join(open(os.path.join(SRC, h)).read() for h in headers)
        src = (prefix + common + rules + open(os.path.join(SRC, source)).read()).encode()
        prog = ctypes.c_void_p()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), 0, None, None)
        assert rc == 0, f"nvrtcCreateProgram {rc}"
        for e in entries:
            assert lib.nvrtcAddNameExpression(prog, e.encode()) == 0
        opts = [f"--gpu-architecture={args.arch}".encode(), b"-default-device"]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors="replace").strip()
        if rc != 0:
            print(f"nvrtc-check: {name}: FAILED (nvrtc {rc})\n{text}")
            failed = True
            continue
        ptx_size = ctypes.c_size_t()
        lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx_size))
        ptx = ctypes.create_string_buffer(ptx_size.value)
        lib.nvrtcGetPTX(prog, ptx)
        if args.ptx_dir:
            os.makedirs(args.ptx_dir, exist_ok=True)
            with open(os.path.join(args.ptx_dir, name.replace(".cu", "") + ".ptx"), "wb") as f:
                f.write(ptx.value)
        missing = [e for e in entries if f".entry {e}".encode() not in ptx.raw]
        if missing:
            print(f"nvrtc-check: {name}: entry points missing from PTX: {missing}")
            failed = True
            continue
        warn = f" (log: {text})" if text else ""
        print(f"nvrtc-check: {name}: ok, {ptx_size.value} bytes of PTX for {args.arch}{warn}")
    print(f"nvrtc-check: NVRTC {major.value}.{minor.value}, {path}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
