#!/usr/bin/env python3
"""results.json and results.md of scripts/gpu-check.sh from its raw step outputs.

results.json holds issue 10's fields: device, date, parity {fixtures_equal, fixtures_total,
kernels_ok}, decode {shape: {context: {tokens_per_s, roofline_fraction, ...}}}, prefill
{context: {attention_tflops, sdpa_tflops, ...}}, cape {total: {memory_ratio, throughput_ratio,
...}}, encoder {passages_per_s, sentence_transformers_passages_per_s, ...}, gguf, goals, steps.
"""
import argparse
import datetime
import glob
import json
import os


def load(raw, name):
    try:
        with open(os.path.join(raw, f"{name}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def status(raw, name):
    try:
        with open(os.path.join(raw, f"{name}.status")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"rc": None, "seconds": None}


def tokens(key):
    """`8k` -> 8192, `256` -> 256 (the keys `capstan-bench gpu` writes)."""
    if key.endswith("k") and key[:-1].isdigit():
        return int(key[:-1]) * 1024
    return int(key) if key.isdigit() else 0


def ratio(x, y):
    return x / y if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else None


def merged_model_rows(raw, prefixes):
    """The `model` rows of every `PREFIX<context>.json` step, later prefixes over earlier ones
    (the model's prefill runs one length per step; the peer's step has no `model` rows)."""
    rows = {}
    for prefix in prefixes:
        for p in sorted(glob.glob(os.path.join(raw, prefix + "*.json"))):
            rows.update((load(raw, os.path.basename(p)[:-5]) or {}).get("model", {}))
    return rows


def llama3_rows(raw, step):
    """A step's rows by context, of the Llama-3-8B shape (the GPU) or its tiny one (the CPU)."""
    return (load(raw, f"{step}_llama3-8b") or load(raw, f"{step}_llama3-tiny") or {}).get("contexts", {})


def ratios(ours, peer, field="tokens_per_s"):
    """Capstan's `field` over the peer's, for every context either has."""
    return {k: ratio(ours.get(k, {}).get(field), peer.get(k, {}).get(field))
            for k in sorted(set(ours) | set(peer), key=tokens)}


def best(*xs):
    """The largest of the figures that exist, else None."""
    xs = [x for x in xs if isinstance(x, (int, float))]
    return max(xs) if xs else None


def ran_as_graph(record):
    """Whether a record's fused decoding step ran, captured as a CUDA graph (its `decode_step`
    status Ready with no capture error; on the CPU, or refused, the layers ran instead)."""
    status = str(record.get("decode_step", ""))
    return status.startswith("Ready") and "capture_error: None" in status


# How far a fused step's logits may stray from the layers' (relative to their largest magnitude)
# for its figure to count.
FUSED_TOLERANCE = 0.05


def fused_step_rows(raw, tolerance=FUSED_TOLERANCE, name="fused_decode"):
    """The fused decoding step's rows by context (the CUDA graph), where its first logits were
    within `tolerance` of the layers' (relative to their largest magnitude); `name`: the step."""
    step = (load(raw, f"{name}_llama3-8b") or load(raw, f"{name}_llama3-tiny") or {})
    rows = step.get("by_full_attention", {}).get("step", {})
    return {k: r for k, r in rows.items()
            if isinstance(r.get("step_vs_layers_max_rel_diff"), (int, float))
            and r["step_vs_layers_max_rel_diff"] <= tolerance}


def vs_pytorch(raw, res):
    """Capstan's figures over the PyTorch peers' from the same run (issue 39), each value
    Capstan / peer: attention seconds of the peer over Capstan's (the same useful FLOPs), model
    prefill and decoding tokens/s; batch16_decode (16 sequences over one) and cape_128k (CAPE
    over full context) are Capstan alone; smollm2_tokens_per_s is not a ratio."""
    ours, peer = load(raw, "attention") or {}, load(raw, "attention_peer") or {}
    # The 128K case runs as steps of its own: its rows join the others.
    for name, into in (("attention_long", ours), ("attention_long_peer", peer)):
        into.setdefault("cases", {}).update((load(raw, name) or {}).get("cases", {}))
    attention = {}
    for key in sorted(set(ours.get("cases", {})) | set(peer.get("cases", {})),
                      key=lambda k: (k.split("_")[0] != "causal", k.split("_")[0], tokens(k.split("_")[-1]))):
        o, p = ours.get("cases", {}).get(key, {}), peer.get("cases", {}).get(key, {})
        attention[key] = ratio(p.get("seconds"), o.get("seconds"))
        if o.get("visible_pairs") != p.get("visible_pairs"):
            attention[key] = None  # not the same work (or one side missing): no ratio
    # The model's prefill: the tensor-core runs when the check made them (the candidate default).
    cap_prefill = merged_model_rows(raw, ("prefill_model_", "mma_prefill_model_", "tc_prefill_model_"))
    prefill = ratios(cap_prefill, (load(raw, "prefill_model_peer") or {}).get("contexts", {}))
    dec, graph = llama3_rows(raw, "decode"), llama3_rows(raw, "graph_peer")
    decode = ratios(dec, graph)
    decode_kernel = ratios(llama3_rows(raw, "kernel_decode"), graph)
    fused_rows = fused_step_rows(raw)
    decode_step = ratios(fused_rows, graph)
    # The same step with decoding attention's ranges of 64 keys or more (CAPSTAN_DECODE_SPLIT_KEYS).
    split64 = ratios(fused_step_rows(raw, name="fused_decode_split64"), graph)
    # ... and with 4 keys a slot in the grouped kernel (CAPSTAN_DECODE_GQA_KEYS).
    keys4 = ratios(fused_step_rows(raw, name="fused_decode_keys4"), graph)
    # ... and with decoding attention on tensor cores (CAPSTAN_DECODE_ATTENTION=mma).
    mma = ratios(fused_step_rows(raw, name="fused_decode_mma"), graph)
    # ... and with one sequence's paired products walked one row after the other.
    unpaired = ratios(fused_step_rows(raw, name="fused_decode_unpaired"), graph)
    b16 = llama3_rows(raw, "batch16")
    # 16 sequences through the fused step, against one sequence through it: counted where the
    # batch ran the step as a graph and its logits matched each sequence's alone.
    # The batch counts where its logits are each sequence's through the same step alone (the
    # step alone is held to the layers by the batch-1 check, `step_vs_layers_max_rel_diff`):
    # against the layers the bf16 random model's own packed layers stray 0.078 (2026-11-30), past
    # the tolerance, so the layers cannot be the batch's reference.
    def fused16_row(name):
        fused = load(raw, f"{name}_llama3-8b") or load(raw, f"{name}_llama3-tiny") or {}
        row = fused.get("contexts", {}).get("1k", {})
        same = row.get("packed_vs_alone_same_way_max_rel_diff")
        # Runs before 2026-11-30 recorded the layers' difference only.
        ref = same if same is not None else row.get("packed_vs_alone_max_rel_diff")
        ok = ran_as_graph(fused) and (1 if ref is None else ref) <= FUSED_TOLERANCE
        return row, ok
    f16, f16_ok = fused16_row("fused_batch16")
    # ... and with decoding attention on tensor cores, where it ran and matched: the faster.
    f16_mma, f16_mma_ok = fused16_row("fused_batch16_mma")
    if f16_mma_ok and (f16_mma.get("tokens_per_s") or 0) > (f16.get("tokens_per_s") if f16_ok else 0):
        f16, f16_ok = f16_mma, True
    step1 = fused_rows.get("1k", {})
    batch16_step = ratio(f16.get("tokens_per_s"), step1.get("tokens_per_s")) if f16_ok else None
    # The goal takes the way that decodes 16 sequences faster (what a server would run).
    b16_tps = b16.get("1k", {}).get("tokens_per_s")
    f16_tps = f16.get("tokens_per_s") if f16_ok else None
    batch16_layers = ratio(b16_tps, dec.get("1k", {}).get("tokens_per_s"))
    batch16_best = batch16_step if (f16_tps or 0) > (b16_tps or 0) and batch16_step else batch16_layers
    cape = res.get("cape", {}).get("128k", {})
    gguf = res.get("gguf") or {}
    step_way = (gguf.get("by_way") or {}).get("step", {})
    # The fused step's SmolLM2 figure counts where it generated the layers' tokens (a quantized
    # product's rounding may flip a late one: at least the first half).
    step_same = (step_way.get("tokens_as_first_way") or 0) >= (step_way.get("new_tokens") or 1) / 2
    # ... or where its logits, the first tokens fed back, are those of the weights dequantized
    # to f32 on the CPU.
    forced = step_way.get("forced_vs_cpu_f32_max_rel_diff")
    step_same = step_same or (forced is not None and forced <= FUSED_TOLERANCE)
    # ... and where the step ran as a graph (on the CPU, or refused, the layers ran instead).
    smollm2_step = step_way.get("tokens_per_s") if step_same and ran_as_graph(step_way) else None
    return {"attention": attention, "prefill": prefill, "decode": decode,
            "decode_kernel": decode_kernel,
            "decode_step": decode_step,
            "decode_step_split64": split64,
            "decode_step_keys4": keys4,
            "decode_step_mma": mma,
            "decode_step_unpaired": unpaired,
            "decode_best": {k: best(decode.get(k), decode_step.get(k), split64.get(k), keys4.get(k),
                                    mma.get(k), unpaired.get(k))
                            for k in decode},
            "batch16_decode": batch16_layers,
            "batch16_max_rel_diff": b16.get("1k", {}).get("packed_vs_alone_max_rel_diff"),
            "batch16_step_decode": batch16_step,
            "batch16_step_tokens_per_s": f16_tps,
            "batch16_step_max_rel_diff": f16.get("packed_vs_alone_max_rel_diff"),
            "batch16_best": batch16_best,
            "cape_128k": {"memory_ratio": cape.get("memory_ratio"),
                          "throughput_ratio": cape.get("throughput_ratio"),
                          "context_memory_ratio": cape.get("context_memory_ratio")},
            "smollm2_tokens_per_s": gguf.get("tokens_per_s"),
            "smollm2_step_tokens_per_s": smollm2_step,
            "smollm2_step_tokens_as_layers": step_way.get("tokens_as_first_way"),
            "attention_kernel": ours.get("attention_kernel") or (
                ours.get("tensor_core_attention") and "TensorCores" or (ours and "CudaCores") or None),
            "cudnn_version": ours.get("cudnn_version"),
            "cases_on_cudnn": sorted(k for k, c in ours.get("cases", {}).items() if c.get("on_cudnn")),
            "cudnn_refusals": ours.get("cudnn_refusals", []),
            "peer_errors": {k: c["error"] for k, c in peer.get("cases", {}).items() if "error" in c},
            "peer_decode_cuda_graph": all(r.get("cuda_graph", True) for r in graph.values()) if graph else None}


def issue39_goals(v):
    """Issue 39's goals from vs_pytorch: None where the run has no figure."""
    def at_least(x, t):
        return None if x is None else x >= t

    def every(xs, t):
        return None if not xs or None in xs else all(x >= t for x in xs)

    a = v["attention"]
    of = lambda name: [x for k, x in a.items() if k.split("_")[0] == name]  # noqa: E731
    cape = v["cape_128k"]
    return {
        "causal_attention_at_least_0.8x_sdpa": every(of("causal"), 0.8),
        "patterns_at_least_1x_flex_attention": every(of("zebra") + of("scca") + of("selfextend"), 1.0),
        "cross_attention_at_least_0.8x_sdpa": every(of("cross"), 0.8),
        "prefill_at_least_0.8x_pytorch_eager": every(list(v["prefill"].values()), 0.8),
        "decode_at_least_1x_pytorch_cuda_graph": every(list(v["decode_best"].values()), 1.0),
        "batch16_decode_at_least_12x_one": at_least(v["batch16_best"], 12),
        "cape_128k_memory_at_most_eighth": None if cape["memory_ratio"] is None else cape["memory_ratio"] <= 1 / 8,
        "cape_128k_throughput_at_least_12x": at_least(cape["throughput_ratio"], 12),
        "smollm2_at_least_1000_tokens_per_s": at_least(
            best(v["smollm2_tokens_per_s"], v["smollm2_step_tokens_per_s"]), 1000),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--device-file")
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    raw = a.raw
    device = "cpu (no GPU: a run of the check's CPU side, tiny shapes, no figures)" if a.cpu else "unknown GPU"
    if a.device_file and os.path.exists(a.device_file) and not a.cpu:
        text = open(a.device_file).read().strip()
        if text:
            device = text.splitlines()[0]
    steps = {os.path.basename(p)[:-7]: status(raw, os.path.basename(p)[:-7])
             for p in sorted(glob.glob(os.path.join(raw, "*.status")))}
    res = {"device": device, "date": datetime.date.today().isoformat(), "cpu_only": bool(a.cpu),
           "steps": steps}

    parity = load(raw, "parity") or {}
    res["parity"] = {"fixtures_equal": parity.get("fixtures_equal"),
                     "fixtures_total": parity.get("fixtures_total"),
                     "kernels_ok": steps.get("kernels", {}).get("rc") == 0,
                     "tensor_core_kernels_ok": (steps["kernels_mma"].get("rc") == 0
                                                if "kernels_mma" in steps else None),
                     "failures": [r for r in parity.get("results", []) if not r.get("ok")]}

    res["decode"] = {}
    for p in sorted(glob.glob(os.path.join(raw, "decode_*.json"))):
        name = os.path.basename(p)[:-5]
        if name.startswith("decode_peer_"):
            continue
        shape = name[len("decode_"):]
        ours, peer = load(raw, name) or {}, load(raw, f"decode_peer_{shape}") or {}
        rows = {}
        matmul = ours.get("by_full_attention", {}).get("matmul", {})
        for key, r in ours.get("contexts", {}).items():
            pr = peer.get("contexts", {}).get(key, {})
            mm = matmul.get(key, {})
            rows[key] = {"tokens_per_s": r["tokens_per_s"], "roofline_fraction": r["roofline_fraction"],
                         "roofline_tokens_per_s": r["roofline_tokens_per_s"],
                         "transformers_tokens_per_s": pr.get("tokens_per_s"),
                         "matmul_tokens_per_s": mm.get("tokens_per_s"),
                         "matmul_roofline_fraction": mm.get("roofline_fraction")}
        rows["copy_bandwidth_tb_per_s"] = ours.get("copy_bandwidth_bytes_per_s", 0) / 1e12
        res["decode"][shape] = rows

    pre, sd = load(raw, "prefill") or {}, load(raw, "prefill_peer") or {}
    model_rows, model_shape = dict(pre.get("model", {})), pre.get("model_shape")
    for p in sorted(glob.glob(os.path.join(raw, "prefill_model_*.json"))):
        part = load(raw, os.path.basename(p)[:-5]) or {}
        model_rows.update(part.get("model", {}))
        model_shape = part.get("model_shape") or model_shape
    # The tensor-core kernel's runs (CAPSTAN_ATTENTION_KERNEL=mma), when the check ran them.
    mma = load(raw, "mma_prefill") or {}
    mma_model = merged_model_rows(raw, ("mma_prefill_model_", "tc_prefill_model_"))
    res["prefill"] = {}
    for key in sorted(set(pre.get("kernel", {})) | set(model_rows), key=tokens):
        r = pre.get("kernel", {}).get(key, {"attention_tflops": None})
        s = sd.get("contexts", {}).get(key, {})
        m = model_rows.get(key, {})
        res["prefill"][key] = {"attention_tflops": r["attention_tflops"], "sdpa_tflops": s.get("sdpa_tflops"),
                               "ratio": (r["attention_tflops"] / s["sdpa_tflops"]) if s.get("sdpa_tflops") and r["attention_tflops"] else None,
                               "model_prefill_tokens_per_s": m.get("tokens_per_s"),
                               "model_prefill_matmul_tokens_per_s": m.get("matmul_tokens_per_s"),
                               "model_shape": model_shape}
        tc = mma.get("kernel", {}).get(key, {}).get("attention_tflops")
        res["prefill"][key].update({
            "tensor_core_attention_tflops": tc,
            "tensor_core_ratio": (tc / s["sdpa_tflops"]) if tc and s.get("sdpa_tflops") else None,
            "tensor_core_model_prefill_tokens_per_s": mma_model.get(key, {}).get("tokens_per_s")})

    totals = {}
    for p in sorted(glob.glob(os.path.join(raw, "cape*.json"))):
        totals.update((load(raw, os.path.basename(p)[:-5]) or {}).get("totals", {}))
    cape = {"totals": dict(sorted(totals.items(), key=lambda kv: kv[1].get("total_tokens", 0)))}
    res["cape"] = {k: {f: v.get(f) for f in ("memory_ratio", "throughput_ratio", "context_memory_ratio",
                                             "cape_memory_bytes",
                                             "cape_encoder_context_bytes",
                                             "full_memory_bytes", "full_memory", "cape_seconds", "full_seconds",
                                             "decoder_tokens", "encoder_chunks")}
                   for k, v in cape.get("totals", {}).items()}

    enc, encp = load(raw, "encode") or {}, load(raw, "encode_peer") or {}
    res["encoder"] = {"passages_per_s": enc.get("passages_per_s"),
                      "sentence_transformers_passages_per_s": encp.get("passages_per_s"),
                      "dtype": enc.get("dtype"), "passages": enc.get("passages"),
                      "min_cosine_vs_cpu": enc.get("min_cosine_vs_cpu"),
                      "max_abs_diff_vs_cpu": enc.get("max_abs_diff_vs_cpu"),
                      "min_cosine_vs_sentence_transformers": encp.get("min_cosine_vs_capstan")}
    res["gguf"] = load(raw, "gguf")
    # SmolLM2's fused step with decoding attention's ranges of 32 keys or more.
    res["gguf_split32"] = ((load(raw, "gguf_split32") or {}).get("by_way") or {}).get("step")
    # The same GGUF model with 16 sequences decoding together (continuous batching): each way's
    # tokens/s, over the one-sequence fused step's, and its logits against the sequences alone.
    gb = load(raw, "gguf_batch16") or {}
    one = ((res["gguf"] or {}).get("by_way") or {}).get("step", {}).get("tokens_per_s")
    res["gguf_batch16"] = {
        way: {"tokens_per_s": r.get("contexts", {}).get("1k", {}).get("tokens_per_s"),
              "over_one_sequence_step": ratio(r.get("contexts", {}).get("1k", {}).get("tokens_per_s"), one),
              "packed_vs_alone_max_rel_diff": r.get("contexts", {}).get("1k", {}).get("packed_vs_alone_max_rel_diff"),
              "packed_vs_alone_same_way_max_rel_diff":
                  r.get("contexts", {}).get("1k", {}).get("packed_vs_alone_same_way_max_rel_diff"),
              "decode_step": r.get("decode_step")}
        for way, r in (gb.get("by_way") or {}).items()}
    # Decoding attention alone on both of attention_decode.cu's kernels: the decoding step's
    # kernel chosen by measurement.
    da = load(raw, "decoding_attention") or {}
    res["decoding_attention"] = {f: da.get(f) for f in ("heads", "kv_heads", "dim", "dtype")}
    res["decoding_attention"]["cases"] = {
        c["case"]: {"per_head_us": 1e6 * c["per_head"]["seconds"],
                    "grouped_us": 1e6 * c["grouped"]["seconds"],
                    "per_head_of_copy_bandwidth": c["per_head"]["of_copy_bandwidth"],
                    "grouped_of_copy_bandwidth": c["grouped"]["of_copy_bandwidth"],
                    "grouped_speedup": c["grouped_speedup"], "max_abs_diff": c["max_abs_diff"],
                    # The tensor-core kernel (absent from runs before 2026-11-30's second).
                    "tensor_cores_us": 1e6 * c["tensor_cores"]["seconds"] if "tensor_cores" in c else None,
                    "tensor_cores_of_copy_bandwidth": (c.get("tensor_cores") or {}).get("of_copy_bandwidth"),
                    "tensor_cores_max_abs_diff": c.get("tensor_cores_max_abs_diff")}
        for c in da.get("cases", [])}
    # The grouped kernel with 4 keys a slot (CAPSTAN_DECODE_GQA_KEYS=4), where that step ran.
    dk = load(raw, "decoding_attention_keys4") or {}
    res["decoding_attention"]["grouped_keys4_us"] = {
        c["case"]: 1e6 * c["grouped"]["seconds"] for c in dk.get("cases", [])} or None
    # Where the time went (scripts/gpu-profile.sh: each kernel's duration under Nsight Compute).
    res["profile"] = {os.path.basename(p)[len("profile_"):-5]: load(raw, os.path.basename(p)[:-5])
                      for p in sorted(glob.glob(os.path.join(raw, "profile_*.json")))}
    pc = load(raw, "passage_cache") or {}
    res["passage_cache"] = {f: pc.get(f) for f in ("shape", "requests", "encoder_tokens_ratio_on_off",
                                                   "time_ratio_on_off", "logits_identical",
                                                   "bytes_per_cached_passage")}

    def ge(x, y):
        return None if x is None or y is None else x >= y

    res["vs_pytorch"] = vs_pytorch(raw, res)

    dec_1k = [v.get("1k", {}).get("roofline_fraction") for v in res["decode"].values()]
    big = max(res["cape"].items(), key=lambda kv: tokens(kv[0]), default=(None, {}))[1]
    e = res["encoder"]
    ratios = [r["ratio"] for r in res["prefill"].values() if r["ratio"] is not None]
    res["goals"] = {
        "decode_1k_at_least_70pct_roofline": None if not dec_1k or None in dec_1k else all(f >= 0.7 for f in dec_1k),
        "prefill_attention_at_least_half_sdpa": None if not ratios else all(x >= 0.5 for x in ratios),
        "cape_memory_at_most_eighth_at_largest": None if big.get("memory_ratio") is None else big["memory_ratio"] <= 1 / 8,
        "cape_throughput_at_least_12x_at_largest": ge(big.get("throughput_ratio"), 12),
        **issue39_goals(res["vs_pytorch"]),
        "encoder_at_least_2x_sentence_transformers": None if not e["sentence_transformers_passages_per_s"] or not e["passages_per_s"]
        else e["passages_per_s"] >= 2 * e["sentence_transformers_passages_per_s"],
    }

    md = [f"# gpu-check results: {res['device']}, {res['date']}", ""]
    if a.cpu:
        md += ["CPU run at tiny shapes: proves every step runs; the figures mean nothing for a GPU.", ""]
    p = res["parity"]
    md += [f"Parity: {p['fixtures_equal']}/{p['fixtures_total']} fixture runs within tolerance; kernels "
           f"{'ok' if p['kernels_ok'] else 'FAILED'} (outputs NaN-filled before each kernel).", ""]
    md += ["| decode | context | tokens/s (kernel) | roofline tokens/s | fraction | tokens/s (matmul) | fraction | transformers tokens/s |",
           "|---|---|---|---|---|---|---|---|"]
    for shape, rows in res["decode"].items():
        for k, r in rows.items():
            if isinstance(r, dict):
                t, mt, mf = r["transformers_tokens_per_s"], r["matmul_tokens_per_s"], r["matmul_roofline_fraction"]
                md.append(f"| {shape} | {k} | {r['tokens_per_s']:.1f} | {r['roofline_tokens_per_s']:.1f} | "
                          f"{r['roofline_fraction']:.2f} | {mt and f'{mt:.1f}'} | {mf and f'{mf:.2f}'} | {t and f'{t:.1f}'} |")
    md += ["", "| prefill | attention TFLOP/s | SDPA TFLOP/s | ratio | model prefill tokens/s (kernel) | (matmul) |",
           "|---|---|---|---|---|---|"]
    for k, r in res["prefill"].items():
        rr, sdpa, tok = r["ratio"], r["sdpa_tflops"], r["model_prefill_tokens_per_s"]
        mtok = r["model_prefill_matmul_tokens_per_s"]
        att = r["attention_tflops"]
        md.append(f"| {k} | {att and f'{att:.2f}'} | {sdpa and f'{sdpa:.2f}'} | {rr and f'{rr:.3f}'} | "
                  f"{tok and f'{tok:.0f}'} | {mtok and f'{mtok:.0f}'} |")
    if any(r["tensor_core_attention_tflops"] or r["tensor_core_model_prefill_tokens_per_s"]
           for r in res["prefill"].values()) or p["tensor_core_kernels_ok"] is not None:
        md += ["", f"Tensor-core attention (attention_mma.cu): parity with the CPU reference "
               f"{'ok' if p['tensor_core_kernels_ok'] else 'FAILED or not run'}.", "",
               "| prefill | attention TFLOP/s | ratio to SDPA | model prefill tokens/s |", "|---|---|---|---|"]
        for k, r in res["prefill"].items():
            att, rr = r["tensor_core_attention_tflops"], r["tensor_core_ratio"]
            tok = r["tensor_core_model_prefill_tokens_per_s"]
            md.append(f"| {k} | {att and f'{att:.2f}'} | {rr and f'{rr:.3f}'} | {tok and f'{tok:.0f}'} |")
    md += ["", "| CAPE total tokens | memory CAPE/full | beyond the weights | throughput CAPE/full | full context |",
           "|---|---|---|---|---|"]
    for k, r in res["cape"].items():
        mr, cr, tr = r["memory_ratio"], r["context_memory_ratio"], r["throughput_ratio"]
        md.append(f"| {k} | {mr and f'{mr:.3f}'} | {cr and f'{cr:.3f}'} | {tr and f'{tr:.2f}'} | {r['full_memory']} |")
    fmt = lambda x, p: None if x is None else f"{x:.{p}f}"  # noqa: E731
    md += ["", f"Encoder ({e['dtype']}, {e['passages']} passages): {fmt(e['passages_per_s'], 1)} passages/s vs "
           f"sentence-transformers {fmt(e['sentence_transformers_passages_per_s'], 1)}; min cosine vs CPU "
           f"{fmt(e['min_cosine_vs_cpu'], 5)}, vs sentence-transformers {fmt(e['min_cosine_vs_sentence_transformers'], 5)}.", ""]
    p = res["passage_cache"]
    if p["shape"]:
        md += [f"CAPE passage cache ({p['shape']}, {p['requests']} requests of popular passages): encoder tokens "
               f"{fmt(p['encoder_tokens_ratio_on_off'], 3)}x and time {fmt(p['time_ratio_on_off'], 3)}x of the "
               f"cache off; logits identical: {p['logits_identical']}.", ""]
    if res["gguf"]:
        md += [f"GGUF {res['gguf'].get('model')}: {res['gguf'].get('tokens_per_s'):.1f} tokens/s decoding.", ""]
        md += [f"GGUF way {way}: {fmt(r.get('tokens_per_s'), 1)} tokens/s; logits (prompt, then the first "
               f"tokens fed back) vs f32 on the CPU {fmt(r.get('forced_vs_cpu_f32_max_rel_diff'), 4)}"
               for way, r in (res["gguf"].get("by_way") or {}).items()] + [""]
    if res.get("gguf_split32"):
        r = res["gguf_split32"]
        md += [f"GGUF step, decoding attention's ranges of 32 keys or more: {fmt(r.get('tokens_per_s'), 1)} "
               f"tokens/s; vs f32 on the CPU {fmt(r.get('forced_vs_cpu_f32_max_rel_diff'), 4)}", ""]
    for way, r in res["gguf_batch16"].items():
        md += [f"GGUF, 16 sequences at 1K ({way}): {fmt(r['tokens_per_s'], 1)} tokens/s, "
               f"{fmt(r['over_one_sequence_step'], 2)}x one sequence's fused step; logits vs alone "
               f"{fmt(r['packed_vs_alone_max_rel_diff'], 5)} (through the layers), "
               f"{fmt(r.get('packed_vs_alone_same_way_max_rel_diff'), 5)} (the same way, one at a time).", ""]
    for name, st in steps.items():
        if isinstance(st["rc"], str):
            md.append(f"SKIPPED {name}: {st['rc']}")
            res.setdefault("failures", {})[name] = st["rc"]
        elif st["rc"] != 0:
            try:
                with open(os.path.join(raw, f"{name}.log")) as f:
                    last = [ln.strip() for ln in f if ln.strip()][-1:]
            except OSError:
                last = []
            md.append(f"FAILED {name} (exit {st['rc']}): {last[0] if last else 'no log'}")
            res.setdefault("failures", {})[name] = last[0] if last else None
    v = res["vs_pytorch"]
    f3 = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
    md += ["", f"Against PyTorch on the same card (Capstan / peer; attention kernel: {v['attention_kernel']}, "
           f"cuDNN {v['cudnn_version']} ran {', '.join(v['cases_on_cudnn']) or 'no case'}):", "",
           "| case | ratio |", "|---|---|"]
    md += [f"| attention {k} | {f3(x)} |" for k, x in v["attention"].items()]
    md += [f"| model prefill {k} | {f3(x)} |" for k, x in v["prefill"].items()]
    md += [f"| decode {k} (peer under a CUDA graph) | {f3(x)} |" for k, x in v["decode"].items()]
    md += [f"| decode {k} on the decoding kernel | {f3(x)} |" for k, x in v["decode_kernel"].items()]
    md += [f"| decode {k}, the fused step as a CUDA graph | {f3(x)} |" for k, x in v["decode_step"].items()]
    md += [f"| decode {k}, the fused step, {what} | {f3(x)} |"
           for key, what in (("decode_step_keys4", "4 keys a slot"),
                             ("decode_step_split64", "ranges of 64 keys"),
                             ("decode_step_mma", "decoding attention on tensor cores"),
                             ("decode_step_unpaired", "paired rows one after the other"))
           for k, x in v[key].items()]
    md += [f"| 16 sequences / one, decoding at 1K (Capstan) | {f3(v['batch16_decode'])} |",
           f"| 16 sequences / one, the fused step at 1K (Capstan) | {f3(v['batch16_step_decode'])} |",
           f"| 16 sequences through the fused step, tokens/s | {f3(v['batch16_step_tokens_per_s'])} |",
           f"| CAPE / full context at 128K, memory | {f3(v['cape_128k']['memory_ratio'])} |",
           f"| CAPE / full context at 128K, memory beyond the weights | {f3(v['cape_128k']['context_memory_ratio'])} |",
           f"| CAPE / full context at 128K, throughput | {f3(v['cape_128k']['throughput_ratio'])} |",
           f"| SmolLM2 GGUF decode, tokens/s | {f3(v['smollm2_tokens_per_s'])} |",
           f"| SmolLM2 GGUF decode through the fused step, tokens/s | {f3(v['smollm2_step_tokens_per_s'])} |"]
    da = res["decoding_attention"]
    if da["cases"]:
        md += ["", f"Decoding attention alone ({da['heads']} query heads over {da['kv_heads']}, "
               f"{da['dim']} wide, {da['dtype']}; µs a call, and the caches' bytes a second over the "
               "copy bandwidth):", "",
               "| batch x context | per head | grouped | tensor cores | grouped speed-up | max abs diff |",
               "|---|---|---|---|---|---|"]
        md += [f"| {k} | {r['per_head_us']:.1f} µs ({100 * r['per_head_of_copy_bandwidth']:.0f}%) | "
               f"{r['grouped_us']:.1f} µs ({100 * r['grouped_of_copy_bandwidth']:.0f}%) | "
               + (f"{r['tensor_cores_us']:.1f} µs ({100 * r['tensor_cores_of_copy_bandwidth']:.0f}%, "
                  f"diff {r['tensor_cores_max_abs_diff']:.2g})" if r.get("tensor_cores_us") else "—")
               + f" | {f3(r['grouped_speedup'])} | {r['max_abs_diff']:.2g} |"
               for k, r in da["cases"].items()]
    for name, prof in res["profile"].items():
        prof = prof or {}
        if "top" not in prof:
            md += ["", f"Profile {name}: {prof.get('skipped') or prof.get('error') or 'no result'}"]
            continue
        md += ["", f"Profile {name}: {prof['launches']} kernel launches, {prof['total_us'] / 1e3:.2f} ms of kernels",
               "", "| kernel | launches | total µs | mean µs | share |", "|---|---|---|---|---|"]
        md += [f"| {k['kernel']} | {k['launches']} | {k['total_us']:.1f} | {k['mean_us']:.2f} | "
               f"{100 * (k['share'] or 0):.1f}% |" for k in prof["top"][:10]]
    md += ["", "Goals: " + ", ".join(f"{k} {v}" for k, v in res["goals"].items()), "",
           "Steps: " + ", ".join(f"{k} rc {v['rc']} ({v['seconds']} s)" for k, v in steps.items())]
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
