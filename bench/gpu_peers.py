#!/usr/bin/env python3
"""The peers of `capstan-bench gpu ...` (scripts/gpu-check.sh), on the same shapes and data.

    python3 bench/gpu_peers.py decode --shape llama2-7b --contexts 1024,32768 --steps 64
    python3 bench/gpu_peers.py sdpa --contexts 8192,32768 --heads 32 --kv-heads 8 --dim 128
    python3 bench/gpu_peers.py encode --passages P.jsonl --encoder DIR --n 5000 --vectors capstan.f32

- decode: transformers' LlamaForCausalLM with random weights made on the device, a DynamicCache
  filled with `context` random positions, batch-1 greedy steps (one `.item()` per step, as
  Capstan's loop reads each token back).
- decode-graph: the same shapes in plain PyTorch (random weights, static KV buffers, SDPA over
  them with a position mask) with each step captured once as a CUDA graph and replayed: the
  peer the GPU issue sets for decoding (its batch-16 row: `--batch 16`). Eager on the CPU.
- prefill-model: that plain-PyTorch model's prefill (eager, causal SDPA), last position's logits.
- sdpa: PyTorch's scaled_dot_product_attention, causal, flash backend on CUDA (the default
  choice on the CPU), grouped-query heads.
- attention: every pattern of `capstan-bench gpu attention` on the same cases (PATTERN:CONTEXT):
  causal and cross-attention through PyTorch's default SDPA (on an H100/H200 it picks cuDNN),
  Zebra's local window, SCCA_fixed and SelfExtend (two passes merged by their log-sum-exp)
  through flex_attention, compiled on CUDA (eager, its unfused reference, on the CPU). Useful
  FLOPs are counted with the same rules as Capstan's (kernels/src/pattern.rs).
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


class PlainLlama:
    """A Llama shape in plain PyTorch with random weights made on the device (fused q/k/v and
    gate/up products, RoPE, SDPA): the eager peer of Capstan's prefill and, captured as a CUDA
    graph, of its decoding."""

    def __init__(self, shape, device, dtype):
        c = SHAPES[shape]
        self.device, self.dtype, self.theta = device, dtype, c["rope_theta"]
        self.hidden, inter = c["hidden_size"], c["intermediate_size"]
        self.nh, self.nkv, self.vocab = (c["num_attention_heads"], c["num_key_value_heads"],
                                         c["vocab_size"])
        self.hd = self.hidden // self.nh
        torch.manual_seed(0)
        mat = lambda o, i: torch.randn(o, i, device=device, dtype=dtype) * 0.02  # noqa: E731
        self.embed, self.head = mat(self.vocab, self.hidden), mat(self.vocab, self.hidden)
        self.norm_w = torch.ones(self.hidden, device=device, dtype=dtype)
        qkv = (self.nh + 2 * self.nkv) * self.hd
        self.layers = [dict(qkv=mat(qkv, self.hidden), o=mat(self.hidden, self.nh * self.hd),
                            gate_up=mat(2 * inter, self.hidden), down=mat(self.hidden, inter))
                       for _ in range(c["num_hidden_layers"])]

    def rope_tables(self, n):
        hd = self.hd
        inv = 1.0 / (self.theta ** (torch.arange(0, hd, 2, device=self.device).float() / hd))
        ang = torch.outer(torch.arange(n, device=self.device).float(), inv)
        ang = torch.cat((ang, ang), -1)
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    def rms(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(self.dtype) * self.norm_w

    def rotate(self, x, cos, sin):
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    def forward_last(self, ids, cos, sin, attend):
        """Logits of the last position of `ids` (b, s); `attend(i, q, k, v)` is layer i's
        attention of the rotated heads (b, heads, s, hd)."""
        import torch.nn.functional as F

        b, s = ids.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        x = self.embed[ids]
        for i, w in enumerate(self.layers):
            q, k, v = (self.rms(x) @ w["qkv"].t()).split((nh * hd, nkv * hd, nkv * hd), -1)
            q = self.rotate(q.view(b, s, nh, hd).transpose(1, 2), cos, sin)
            k = self.rotate(k.view(b, s, nkv, hd).transpose(1, 2), cos, sin)
            a = attend(i, q, k, v.view(b, s, nkv, hd).transpose(1, 2))
            x = x + a.transpose(1, 2).reshape(b, s, nh * hd) @ w["o"].t()
            g, u = (self.rms(x) @ w["gate_up"].t()).chunk(2, -1)
            x = x + (F.silu(g) * u) @ w["down"].t()
        return self.rms(x[:, -1]) @ self.head.t()


def decode_graph(args):
    import torch.nn.functional as F

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    cuda = device.type == "cuda"
    m = PlainLlama(args.shape, device, dtype)
    b = args.batch
    rows = {}
    with torch.inference_mode():
        for ctx in args.contexts:
            cap = ctx + args.steps + 8
            cos_t, sin_t = m.rope_tables(cap)
            kc = [torch.randn(b, m.nkv, cap, m.hd, device=device, dtype=dtype) for _ in m.layers]
            vc = [torch.randn(b, m.nkv, cap, m.hd, device=device, dtype=dtype) for _ in m.layers]
            tok = torch.ones(b, 1, dtype=torch.long, device=device)
            pos = torch.full((1,), ctx, dtype=torch.long, device=device)
            keys = torch.arange(cap, device=device)

            def step():
                mask = (keys <= pos).view(1, 1, 1, cap)

                def attend(i, q, k, v):
                    kc[i].index_copy_(2, pos, k)
                    vc[i].index_copy_(2, pos, v)
                    return F.scaled_dot_product_attention(q, kc[i], vc[i], attn_mask=mask,
                                                          enable_gqa=True)

                logits = m.forward_last(tok, cos_t[pos], sin_t[pos], attend)
                tok.copy_(logits.argmax(-1).view(b, 1))
                pos.add_(1)

            run, graph, captured, why = step, None, False, None
            if cuda:
                try:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            step()
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        step()
                    run, captured = graph.replay, True
                except Exception as e:  # noqa: BLE001 - reported, and the step runs eagerly
                    why = f"{type(e).__name__}: {e}"[:300]
                    torch.cuda.synchronize()
            pos.fill_(ctx)
            for _ in range(3):
                run()
                tok[0, 0].item()
            sync(device)
            start = time.perf_counter()
            for _ in range(args.steps):
                run()
                tok[0, 0].item()  # each step's token read back, as Capstan's loop does
            sync(device)
            seconds = time.perf_counter() - start
            rows[context_key(ctx)] = {"context": ctx, "steps": args.steps, "batch": b,
                                      "tokens_per_s": b * args.steps / seconds,
                                      "steps_per_s": args.steps / seconds,
                                      "cuda_graph": captured, "capture_error": why}
            del kc, vc, graph
            if cuda:
                torch.cuda.empty_cache()
    return {"peer": "torch, CUDA graph" if cuda else "torch, eager", "shape": args.shape,
            "dtype": args.dtype, "device": str(device), "batch": b, "contexts": rows}


def prefill_model(args):
    import torch.nn.functional as F

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    m = PlainLlama(args.shape, device, dtype)
    rows = {}
    with torch.inference_mode():
        for s in args.contexts:
            ids = torch.randint(3, m.vocab, (1, s), device=device)
            cos, sin = m.rope_tables(s)
            attend = lambda i, q, k, v: F.scaled_dot_product_attention(  # noqa: E731
                q, k, v, is_causal=True, enable_gqa=True)
            warm = min(s, 128)
            m.forward_last(ids[:, :warm], cos[:warm], sin[:warm], attend)
            sync(device)
            start = time.perf_counter()
            m.forward_last(ids, cos, sin, attend)
            sync(device)
            seconds = time.perf_counter() - start
            rows[context_key(s)] = {"context": s, "seconds": seconds, "tokens_per_s": s / seconds}
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"peer": "torch eager, SDPA", "shape": args.shape, "dtype": args.dtype,
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


def visible_pairs(name, heads, queries, kv, a):
    """Visible (query, key) pairs over query heads, Capstan's rules (bench/src/gpu/attention.rs)."""
    import numpy as np

    if name == "cross":
        return heads * queries * kv
    i = np.arange(kv - queries, kv, dtype=np.int64)
    if name in ("causal", "selfextend"):
        return int(heads * (i + 1).sum())
    if name == "zebra":
        return int(heads * np.minimum(i + 1, a.window).sum())
    total = 0
    for h in range(heads):  # scca: SCCA_fixed's per-head chunks
        lo, hi = scca_range(h, heads, i, a.chunk)
        total += int((hi - lo).sum())
    return total


def scca_shift(h, heads, i, chunk):
    """SCCA_fixed's shift of head `h` at query positions `i` (kernels/src/pattern.rs): half the
    heads shifted by half a chunk, unless the shifted chunk would lie wholly before position 0."""
    shift = chunk // 2 if h < heads // 2 else 0
    return (((i // chunk) + 1) * chunk > shift) * shift


def scca_range(h, heads, i, chunk):
    s = scca_shift(h, heads, i, chunk)
    c = i // chunk
    lo = (c * chunk - s).clip(min=0)
    hi = ((c + 1) * chunk - s).clip(max=i + 1)
    return lo, hi


def timed_call(call, device):
    """Seconds a call, after a warm-up (compilation): about a second of calls, 1 to 20."""
    with torch.inference_mode():
        call()
        sync(device)
        start = time.perf_counter()
        call()
        sync(device)
        first = time.perf_counter() - start
        reps = max(1, min(20, int(1.0 / max(first, 1e-9))))
        start = time.perf_counter()
        for _ in range(reps):
            call()
        sync(device)
        return (time.perf_counter() - start) / reps, reps


def attention(args):
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    cuda = device.type == "cuda"
    flex = torch.compile(flex_attention, dynamic=False) if cuda else flex_attention
    heads, dim = args.heads, args.dim
    rows, masks = {}, {}
    for case in args.cases:
        name, context = case.split(":")
        s = int(context)
        cross = name == "cross"
        queries, kvh = (min(args.cross_queries, s), heads) if cross else (s, args.kv_heads)
        rnd = lambda h, n: torch.randn(1, h, n, dim, device=device, dtype=dtype)  # noqa: E731
        q, k, v = rnd(heads, queries), rnd(kvh, s), rnd(kvh, s)
        w, chunk, nb = args.window, args.chunk, args.neighbor

        if name in ("causal", "cross"):
            # SDPA at full heads (the keys repeated once, outside the timing): its fastest form.
            kf = k.repeat_interleave(heads // kvh, 1)
            vf = v.repeat_interleave(heads // kvh, 1)
            call = lambda: F.scaled_dot_product_attention(q, kf, vf, is_causal=not cross)  # noqa: E731
        elif name == "zebra":
            masks[name] = lambda b, h, qi, ki: (qi >= ki) & (qi - ki < w)  # noqa: E731
            bm = create_block_mask(masks[name], None, None, s, s, device=device)
            call = lambda: flex(q, k, v, block_mask=bm, enable_gqa=True)  # noqa: E731
        elif name == "scca":
            def scca_rule(qi, ki, shift):
                shift = torch.where((qi // chunk + 1) * chunk <= shift, 0, shift)
                return (ki <= qi) & ((ki + shift) // chunk == qi // chunk)

            def scca_mask(b, h, qi, ki):
                return scca_rule(qi, ki, torch.where(h < heads // 2, chunk // 2, 0))
            masks[name] = scca_mask
            # The rule depends on the head only through "in the shifted half": one block mask a
            # half, each broadcast over its heads. A mask over all heads at once is materialized
            # head by head before its blocks are found (create_block_mask uncompiled): at 32K,
            # 32 heads of 32K x 32K int64 (256 GiB; the 2026-11-29 H200 run ran out of memory).
            half = heads // 2
            group = heads // kvh
            if half % group:
                raise SystemExit(f"--cases {case}: half the heads ({half}) are not whole groups of {group}")

            def half_mask(shift):
                return create_block_mask(lambda b, h, qi, ki: scca_rule(qi, ki, shift), None, None,
                                         s, s, device=device)

            shifted, plain = half_mask(chunk // 2), half_mask(0)
            kh = half // group

            def two_halves():
                flex(q[:, :half], k[:, :kh], v[:, :kh], block_mask=shifted, enable_gqa=True)
                flex(q[:, half:], k[:, kh:], v[:, kh:], block_mask=plain, enable_gqa=True)
            call = two_halves
        elif name == "selfextend":
            qg, kg = rnd(heads, queries), rnd(kvh, s)
            near = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < nb), None, None,
                                     s, s, device=device)
            far = create_block_mask(lambda b, h, qi, ki: qi - ki >= nb, None, None, s, s,
                                    device=device)

            def two_passes(q, k, v, qg, kg):
                o1, l1 = flex(q, k, v, block_mask=near, enable_gqa=True, return_lse=True)
                o2, l2 = flex(qg, kg, v, block_mask=far, enable_gqa=True, return_lse=True)
                m = torch.maximum(l1, l2)  # l1 is finite: every query sees itself
                w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
                return (o1 * w1[..., None] + o2 * w2[..., None]) / (w1 + w2)[..., None]

            merged = torch.compile(two_passes, dynamic=False) if cuda else two_passes
            call = lambda: merged(q, k, v, qg, kg)  # noqa: E731
        else:
            raise SystemExit(f"--cases {case}: unknown pattern {name}")
        pairs = visible_pairs(name, heads, queries, s, args)
        if not cuda and name in ("zebra", "scca"):
            # At the CPU check's tiny shapes: the mask given to flex_attention keeps exactly the
            # pairs Capstan's rules count (the same work on both sides).
            dense = create_mask(masks[name], 1, heads, s, s, device=device)
            assert int(dense.sum()) == pairs, (name, int(dense.sum()), pairs)
        try:
            per_call, reps = timed_call(call, device)
        except Exception as e:  # noqa: BLE001 - one case's failure (compilation, memory) is
            # recorded and the other cases still run.
            rows[f"{name}_{context_key(s)}"] = {"pattern": name, "context": s,
                                                "error": f"{type(e).__name__}: {e}"[:300]}
            if cuda:
                torch.cuda.empty_cache()
            continue
        rows[f"{name}_{context_key(s)}"] = {
            "pattern": name, "context": s, "queries": queries, "kv_heads": kvh,
            "visible_pairs": pairs, "seconds": per_call, "reps": reps,
            "useful_tflops": 4.0 * dim * pairs / per_call / 1e12,
            "peer": "sdpa (default backend)" if name in ("causal", "cross") else
            ("flex_attention (compiled)" if cuda else "flex_attention (eager)")}
        del q, k, v
        if cuda:
            torch.cuda.empty_cache()
    return {"peer": "torch", "torch": torch.__version__, "device": str(device),
            "dtype": args.dtype, "heads": heads, "kv_heads": args.kv_heads, "dim": dim,
            "cases": rows}


def cudnn_log(args):
    """PyTorch's own cuDNN SDPA call (bf16, causal, 32 heads of 128, 1,024 positions) under
    cuDNN's API log: the descriptor sequence cudnn-frontend builds on this machine's cuDNN, to
    set beside Capstan's when cuDNN refuses Capstan's graph."""
    import os
    import subprocess
    import sys

    code = ("import torch, torch.nn.functional as F\n"
            "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
            "q, k, v = (torch.randn(1, 32, 1024, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3))\n"
            "with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):\n"
            "    F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "torch.cuda.synchronize()\n")
    env = dict(os.environ, CUDNN_LOGLEVEL_DBG="3", CUDNN_LOGDEST_DBG=args.out,
               CUDNN_LOGINFO_DBG="1")
    rc = subprocess.run([sys.executable, "-c", code], env=env).returncode
    return {"peer": "torch sdpa (cuDNN backend) under cuDNN's API log", "rc": rc, "log": args.out}


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
    g = sub.add_parser("decode-graph")
    g.add_argument("--shape", required=True, choices=sorted(SHAPES))
    g.add_argument("--contexts", type=ints, default=[1024, 32768])
    g.add_argument("--steps", type=int, default=64)
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--device", default="cuda")
    g.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    pm = sub.add_parser("prefill-model")
    pm.add_argument("--shape", required=True, choices=sorted(SHAPES))
    pm.add_argument("--contexts", type=ints, default=[8192, 32768])
    pm.add_argument("--device", default="cuda")
    pm.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    s = sub.add_parser("sdpa")
    s.add_argument("--contexts", type=ints, default=[8192, 32768])
    s.add_argument("--heads", type=int, default=32)
    s.add_argument("--kv-heads", type=int, default=8)
    s.add_argument("--dim", type=int, default=128)
    s.add_argument("--device", default="cuda")
    s.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    at = sub.add_parser("attention")
    at.add_argument("--cases", type=lambda s: s.split(","),
                    default="causal:8192,causal:32768,causal:131072,zebra:32768,scca:32768,"
                            "selfextend:32768,cross:32768".split(","))
    at.add_argument("--heads", type=int, default=32)
    at.add_argument("--kv-heads", type=int, default=8)
    at.add_argument("--dim", type=int, default=128)
    at.add_argument("--window", type=int, default=512)
    at.add_argument("--chunk", type=int, default=2048)
    at.add_argument("--neighbor", type=int, default=512)
    at.add_argument("--group", type=int, default=8)
    at.add_argument("--cross-queries", type=int, default=4096)
    at.add_argument("--device", default="cuda")
    at.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    cl = sub.add_parser("cudnn-log")
    cl.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--passages", required=True)
    e.add_argument("--encoder", required=True)
    e.add_argument("--n", type=int, default=5000)
    e.add_argument("--batch-size", type=int, default=128)
    e.add_argument("--vectors")
    e.add_argument("--device", default="cuda")
    e.add_argument("--dtype", default="f16", choices=sorted(DTYPES))
    args = ap.parse_args()
    out = {"decode": decode, "decode-graph": decode_graph, "prefill-model": prefill_model, "sdpa": sdpa, "encode": encode, "attention": attention,
           "cudnn-log": cudnn_log}[args.cmd](args)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
