#!/usr/bin/env python3
"""The peers of `capstan-bench gpu ...` (scripts/gpu-check.sh), on the same shapes and data.

    python3 bench/gpu_peers.py decode --shape llama2-7b --contexts 1024,32768 --steps 64
    python3 bench/gpu_peers.py sdpa --contexts 8192,32768 --heads 32 --kv-heads 8 --dim 128
    python3 bench/gpu_peers.py encode --passages P.jsonl --encoder DIR --n 5000 --vectors capstan.f32

- decode: transformers' LlamaForCausalLM with random weights made on the device, a DynamicCache
  filled with `context` random positions, batch-1 greedy steps (one `.item()` per step, as
  Capstan's loop reads each token back).
- sdpa: PyTorch's scaled_dot_product_attention, causal, flash backend on CUDA (the default
  choice on the CPU), grouped-query heads.
- encode: sentence-transformers on the same passages (`title. text`), in the same dtype; its
  vectors against Capstan's (`--vectors`, little-endian f32 rows).
Each prints one JSON object. `--device cpu` runs them at tiny shapes for the CPU check.
"""

import argparse
import json
import time

import torch

SHAPES = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                      rope_theta=10000.0),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      rope_theta=500000.0),
    "llama2-tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, vocab_size=512,
                        rope_theta=10000.0),
    "llama3-tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                        rope_theta=500000.0),
}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def context_key(n):
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def decode(args):
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    cfg = LlamaConfig(**SHAPES[args.shape], rms_norm_eps=1e-5, max_position_embeddings=131072)
    try:
        cfg._attn_implementation = "sdpa"
    except (AttributeError, ValueError):
        pass  # transformers 5 picks sdpa by default
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(prev)
    kvh, hd = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    rows = {}
    with torch.inference_mode():
        for ctx in args.contexts:
            cache = DynamicCache()
            for layer in range(cfg.num_hidden_layers):
                k = torch.randn(1, kvh, ctx, hd, device=device, dtype=dtype)
                v = torch.randn(1, kvh, ctx, hd, device=device, dtype=dtype)
                cache.update(k, v, layer)
            token = torch.ones(1, 1, dtype=torch.long, device=device)

            def step(token):
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1].argmax(-1).item()
                return torch.tensor([[nxt]], device=device)

            for _ in range(3):
                token = step(token)
            sync(device)
            start = time.perf_counter()
            for _ in range(args.steps):
                token = step(token)
            sync(device)
            seconds = time.perf_counter() - start
            rows[context_key(ctx)] = {"context": ctx, "steps": args.steps,
                                      "tokens_per_s": args.steps / seconds}
            del cache
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"peer": "transformers", "shape": args.shape, "dtype": args.dtype,
            "device": str(device), "contexts": rows}


def sdpa(args):
    import torch.nn.functional as F

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    rows = {}
    for s in args.contexts:
        q = torch.randn(1, args.heads, s, args.dim, device=device, dtype=dtype)
        k = torch.randn(1, args.kv_heads, s, args.dim, device=device, dtype=dtype)
        v = torch.randn(1, args.kv_heads, s, args.dim, device=device, dtype=dtype)
        if args.heads != args.kv_heads:
            rep = args.heads // args.kv_heads
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

        def call():
            if device.type == "cuda":
                from torch.nn.attention import SDPBackend, sdpa_kernel
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        call()
        reps = 10 if device.type == "cuda" else 2
        sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            call()
        sync(device)
        per_call = (time.perf_counter() - start) / reps
        flops = 4.0 * args.heads * args.dim * s * s / 2.0
        rows[context_key(s)] = {"context": s, "seconds": per_call,
                                "sdpa_tflops": flops / per_call / 1e12}
    return {"peer": "torch sdpa (flash)" if device.type == "cuda" else "torch sdpa",
            "device": str(device), "dtype": args.dtype, "contexts": rows}


def encode(args):
    import numpy as np
    from sentence_transformers import SentenceTransformer

    texts = []
    with open(args.passages) as f:
        for line in f:
            if len(texts) >= args.n:
                break
            p = json.loads(line)
            texts.append(f"{p['title']}. {p['text']}" if p.get("title") else p["text"])
    model = SentenceTransformer(args.encoder, device=args.device)
    if args.dtype == "f16":
        model.half()
    elif args.dtype == "bf16":
        model.to(torch.bfloat16)
    device = torch.device(args.device)
    model.encode(texts[:256], batch_size=args.batch_size)
    sync(device)
    start = time.perf_counter()
    vecs = model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
    sync(device)
    seconds = time.perf_counter() - start
    out = {"peer": "sentence-transformers", "device": str(device), "dtype": args.dtype,
           "passages": len(texts), "seconds": seconds, "passages_per_s": len(texts) / seconds,
           "batch_size": args.batch_size}
    if args.vectors:
        ours = np.fromfile(args.vectors, dtype="<f4").reshape(-1, vecs.shape[1])
        n = min(len(ours), len(vecs))
        a = ours[:n] / np.linalg.norm(ours[:n], axis=1, keepdims=True)
        b = vecs[:n].astype(np.float32)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        cos = (a * b).sum(1)
        out.update({"compared": n, "min_cosine_vs_capstan": float(cos.min()),
                    "mean_cosine_vs_capstan": float(cos.mean())})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    d = sub.add_parser("decode")
    d.add_argument("--shape", required=True, choices=sorted(SHAPES))
    d.add_argument("--contexts", type=ints, default=[1024, 32768])
    d.add_argument("--steps", type=int, default=64)
    d.add_argument("--device", default="cuda")
    d.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    s = sub.add_parser("sdpa")
    s.add_argument("--contexts", type=ints, default=[8192, 32768])
    s.add_argument("--heads", type=int, default=32)
    s.add_argument("--kv-heads", type=int, default=8)
    s.add_argument("--dim", type=int, default=128)
    s.add_argument("--device", default="cuda")
    s.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    e = sub.add_parser("encode")
    e.add_argument("--passages", required=True)
    e.add_argument("--encoder", required=True)
    e.add_argument("--n", type=int, default=5000)
    e.add_argument("--batch-size", type=int, default=128)
    e.add_argument("--vectors")
    e.add_argument("--device", default="cuda")
    e.add_argument("--dtype", default="f16", choices=sorted(DTYPES))
    args = ap.parse_args()
    out = {"decode": decode, "sdpa": sdpa, "encode": encode}[args.cmd](args)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
