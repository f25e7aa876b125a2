#!/usr/bin/env python3
"""Llama reader on CPU: Capstan vs Hugging Face transformers (PyTorch), same run, same weights.

A random Llama (hidden 768, 12 layers, 12 heads, intermediate 2048, vocab 32000,
rope_theta 500000, f32, seeded) is saved once with `save_pretrained` under
~/.cache/capstan/bench/llama-100m. Both sides get the same random token ids
(batch 1) and measure
- prefill: the forward over the prompt up to the first greedy token
  (HF: `model(ids, num_logits_to_keep=1)`, Capstan: `Llama::forward_last`);
- decode: the remaining new tokens one by one through the KV cache (greedy).
Both use 2 threads (torch.set_num_threads; RAYON_NUM_THREADS/CANDLE_NUM_THREADS
for candle). `capstan-bench llama` loads the checkpoint once and answers one
request per line, so neither side's timings include start-up or loading.
Each side is warmed up, then trials alternate Capstan and HF `--repeats` times
and the best of each counts (the machine is shared). The greedy tokens of both
sides are compared.

    export CARGO_TARGET_DIR=$HOME/.cache/capstan/target
    cargo build --release -p capstan-bench
    python3 bench/llama_cpu_vs_hf.py
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2
# OpenMP's default active spin-wait makes PyTorch's decode ~8x slower when the 2 cores are
# shared (measured 675 vs 85 ms/token): give the peer its best setting (set before torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
CONFIG = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=12,
    intermediate_size=2048,
    vocab_size=32000,
    rope_theta=500000.0,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    torch_dtype="float32",
)


def target_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


def default_model_dir():
    home = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
    return Path(home) / "bench" / "llama-100m"


def make_checkpoint(path, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if (path / "model.safetensors").is_file() and (path / "config.json").is_file():
        return
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    print(f"wrote {path}", file=sys.stderr)


class Capstan:
    """A `capstan-bench llama` process: one JSON request per line, one JSON answer per line."""

    def __init__(self, binary, model_dir):
        env = dict(os.environ, RAYON_NUM_THREADS=str(THREADS), CANDLE_NUM_THREADS=str(THREADS))
        self.proc = subprocess.Popen(
            [binary, "llama", "--model", str(model_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        self.info = json.loads(self.proc.stdout.readline())

    def run(self, prompt, new_tokens):
        self.proc.stdin.write(json.dumps({"prompt": prompt, "new_tokens": new_tokens}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"capstan-bench llama exited with {self.proc.wait()}")
        out = json.loads(line)
        return out["prefill_seconds"], out["decode_seconds"], out["tokens"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


class HuggingFace:
    def __init__(self, model_dir):
        import torch
        from transformers import DynamicCache, LlamaForCausalLM

        self.torch = torch
        self.new_cache = DynamicCache
        self.model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()

    def run(self, prompt, new_tokens):
        torch = self.torch
        with torch.inference_mode():
            ids = torch.tensor([prompt], dtype=torch.long)
            start = time.perf_counter()
            past = self.new_cache()
            out = self.model(ids, past_key_values=past, use_cache=True, num_logits_to_keep=1)
            nxt = out.logits[:, -1].argmax(-1)
            tokens = [int(nxt)]
            prefill = time.perf_counter() - start
            past = out.past_key_values
            start = time.perf_counter()
            while len(tokens) < new_tokens:
                out = self.model(nxt[:, None], past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1)
                tokens.append(int(nxt))
            decode = time.perf_counter() - start
        return prefill, decode, tokens


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs visible, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=default_model_dir())
    ap.add_argument("--bench", default=str(target_dir() / "release/capstan-bench"))
    ap.add_argument("--before", help="an older capstan-bench binary to measure as well (alternating)")
    ap.add_argument("--lengths", default="512,2048", help="prompt lengths (comma-separated)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    import transformers

    torch.set_num_threads(THREADS)
    make_checkpoint(args.model, args.seed)
    lengths = [int(x) for x in args.lengths.split(",")]
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompts = {n: torch.randint(3, CONFIG["vocab_size"], (n,), generator=gen).tolist() for n in lengths}

    load_before = os.getloadavg()
    sides = {"capstan": Capstan(args.bench, args.model), "hf": HuggingFace(args.model)}
    if args.before:
        sides["before"] = Capstan(args.before, args.model)
    params = sum(p.numel() for p in sides["hf"].model.parameters())
    # Warm-up (allocator, thread pools, weight pages): not counted.
    for side in sides.values():
        side.run(prompts[lengths[0]], 8)

    best = {s: {n: [float("inf"), float("inf")] for n in lengths} for s in sides}
    tokens = {s: {} for s in sides}
    runs = []
    for r in range(args.repeats):
        for n in lengths:
            for name, side in sides.items():
                prefill, decode, toks = side.run(prompts[n], args.new_tokens)
                b = best[name][n]
                b[0], b[1] = min(b[0], prefill), min(b[1], decode)
                if tokens[name].setdefault(n, toks) != toks:
                    print(f"warning: {name} tokens differ between repeats at {n}", file=sys.stderr)
                runs.append({"repeat": r + 1, "side": name, "prompt": n,
                             "prefill_seconds": prefill, "decode_seconds": decode})
                print(f"repeat {r + 1} {name:8} prompt {n:5}: prefill {n / prefill:8.1f} tok/s, "
                      f"decode {(args.new_tokens - 1) / decode:6.2f} tok/s", file=sys.stderr)
    for side in sides.values():
        if isinstance(side, Capstan):
            side.close()
    load_after = os.getloadavg()

    steps = args.new_tokens - 1
    rows = []
    for n in lengths:
        row = {"prompt_tokens": n, "new_tokens": args.new_tokens}
        for name in sides:
            row[f"{name}_prefill_tokens_per_second"] = n / best[name][n][0]
            row[f"{name}_decode_tokens_per_second"] = steps / best[name][n][1]
        row["prefill_ratio"] = row["capstan_prefill_tokens_per_second"] / row["hf_prefill_tokens_per_second"]
        row["decode_ratio"] = row["capstan_decode_tokens_per_second"] / row["hf_decode_tokens_per_second"]
        same = tokens["capstan"][n] == tokens["hf"][n]
        row["greedy_tokens_identical"] = same
        if not same:
            row["first_token_mismatch"] = next(
                i for i, (a, b) in enumerate(zip(tokens["capstan"][n], tokens["hf"][n])) if a != b)
        rows.append(row)

    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    result = {
        "date": date,
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "threads": THREADS,
        "capstan_threads": sides["capstan"].info["threads"],
        "model": str(args.model),
        "parameters": params,
        "config": CONFIG,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hf_attn_implementation": sides["hf"].model.config._attn_implementation,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "rows": rows,
        "runs": runs,
    }
    print(json.dumps(result))
    print(f"\n{date}, {result['machine']}, {THREADS} threads each, load average "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}, best of {args.repeats} alternating; "
          f"{params / 1e6:.0f}M-parameter Llama f32, torch {torch.__version__}, "
          f"transformers {transformers.__version__} ({result['hf_attn_implementation']})\n")
    print("| prompt | Capstan prefill tok/s | HF prefill tok/s | ratio | Capstan decode tok/s "
          "| HF decode tok/s | ratio | greedy tokens identical |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['prompt_tokens']} | {row['capstan_prefill_tokens_per_second']:.1f} "
              f"| {row['hf_prefill_tokens_per_second']:.1f} | {row['prefill_ratio']:.2f} "
              f"| {row['capstan_decode_tokens_per_second']:.2f} "
              f"| {row['hf_decode_tokens_per_second']:.2f} | {row['decode_ratio']:.2f} "
              f"| {'yes' if row['greedy_tokens_identical'] else 'no'} |")
    if "before" in sides:
        for row in rows:
            print(f"before: prompt {row['prompt_tokens']}: prefill "
                  f"{row['before_prefill_tokens_per_second']:.1f} tok/s, decode "
                  f"{row['before_decode_tokens_per_second']:.2f} tok/s")


if __name__ == "__main__":
    main()
