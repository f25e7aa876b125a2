#!/usr/bin/env python3
"""Generative reader on the CPU: Capstan vs llama.cpp (llama-cpp-python), same GGUF, same run.

Both read the same .gguf (SmolLM2-135M-Instruct Q4_1 by default: Q4_1 matrices, Q8_0 token
embedding, tied output), the same prompt token ids (made from the SmolLM2 parity fixture's
RAG prompt, repeated and cut to N tokens with llama.cpp's tokenizer of the same file), with
2 threads each (Capstan: RAYON_NUM_THREADS=2 on a 2-core machine; llama.cpp: n_threads=2).
Prefill tokens/s = N / time to the first new token; decode tokens/s over the next tokens,
greedy, no stop. Each side loads (and warms) its model before timing. With --repeat N the two
sides alternate N times per length and each figure is the median of its N runs (this VM's
speed drifts by tens of percent within minutes; alternating keeps both sides on the same
drift).

Usage: python3 bench/llm_vs_llamacpp.py [--gguf PATH] [--lengths 512,2048] [--new 64] [--repeat 1]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time

from llama_cpp import Llama

here = os.path.dirname(os.path.abspath(__file__))
home = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
ap = argparse.ArgumentParser()
ap.add_argument("--gguf", default=os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--lengths", default="512,2048")
ap.add_argument("--new", type=int, default=64)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=1)
ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(home, "target")), "release", "capstan"))
args = ap.parse_args()

text = json.load(open(os.path.join(here, "..", "reader", "tests", "fixtures", "smollm2", "inputs.json")))["prompt_text"]
lengths = [int(x) for x in args.lengths.split(",")]
llm = Llama(model_path=args.gguf, n_ctx=max(lengths) + args.new + 8, n_threads=args.threads,
            n_threads_batch=args.threads, n_batch=512, verbose=False)
base = llm.tokenize(text.encode(), add_bos=False, special=True)



def llama_cpp_run(ids):
    """llama.cpp: prefill, then greedy decode one token at a time."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    tok = llm.sample(temp=0.0)
    for _ in range(args.new - 1):
        llm.eval([tok])
        tok = llm.sample(temp=0.0)
    t2 = time.perf_counter()
    return {"prefill_tokens_per_s": len(ids) / (t1 - t0), "decode_tokens_per_s": (args.new - 1) / (t2 - t1)}


def capstan_run(ids):
    """Capstan: the same ids through `capstan model generate` (quantized, the default)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"input_ids": [ids]}, f)
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    out = subprocess.run([args.bin, "model", "generate", "--model", args.gguf, "--input", f.name,
                          "--max-new-tokens", str(args.new), "--device", "cpu"],
                         check=True, capture_output=True, text=True, env=env)
    os.unlink(f.name)
    m = re.search(r"time to first token ([\d.]+) ms, ([\d.]+) tokens/s", out.stderr)
    return {"prefill_tokens_per_s": len(ids) / (float(m.group(1)) / 1000),
            "decode_tokens_per_s": float(m.group(2))}


def median(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


results = []
for n in lengths:
    ids = (base * (n // len(base) + 1))[:n]
    lc_runs, cap_runs = [], []
    for _ in range(args.repeat):
        lc_runs.append(llama_cpp_run(ids))
        cap_runs.append(capstan_run(ids))
    lc, cap = median(lc_runs), median(cap_runs)
    row = {"prompt_tokens": n, "capstan": cap, "llama_cpp": lc,
           "prefill_ratio": cap["prefill_tokens_per_s"] / lc["prefill_tokens_per_s"],
           "decode_ratio": cap["decode_tokens_per_s"] / lc["decode_tokens_per_s"],
           "runs": args.repeat, "capstan_runs": cap_runs, "llama_cpp_runs": lc_runs}
    results.append(row)
    print(json.dumps(row))

print(json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                  "gguf": os.path.basename(args.gguf), "threads": args.threads, "new_tokens": args.new, "repeat": args.repeat,
                  "results": results}, indent=1))
