#!/usr/bin/env python3
"""CI check of bench/gpu_report.py (scripts/test.sh): the report of recorded CPU runs of
scripts/gpu-check.sh (bench/tests/gpu-check-raw, plus one step skipped by the time budget) has
every field issues 10 and 39 name, both full-attention paths, rows in order, the ratios against
PyTorch and the skip recorded."""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
with tempfile.TemporaryDirectory() as out:
    subprocess.run([sys.executable, os.path.join(here, "gpu_report.py"), "--raw",
                    os.path.join(here, "tests", "gpu-check-raw"), "--cpu", "1", "--out", out], check=True)
    r = json.load(open(os.path.join(out, "results.json")))
    md = open(os.path.join(out, "results.md")).read()

for key in ("device", "date", "parity", "decode", "prefill", "cape", "encoder", "goals", "steps"):
    assert key in r, key
# Decoding attention on both kernels: every case, both timings, the two kernels' outputs compared.
da = r["decoding_attention"]
assert da["heads"] == 8 and da["kv_heads"] == 2 and list(da["cases"]) == ["1x1k", "4x300"], da
for row in da["cases"].values():
    assert row["per_head_us"] > 0 and row["grouped_us"] > 0 and row["grouped_speedup"] > 0, row
    assert row["max_abs_diff"] == 0.0, row
assert "| batch x context | per head | grouped |" in md, md
assert r["parity"]["fixtures_equal"] == r["parity"]["fixtures_total"] == 16, r["parity"]
assert r["parity"]["kernels_ok"] is True
for shape in ("llama2-tiny", "llama3-tiny"):
    row = r["decode"][shape]["1k"]
    for f in ("tokens_per_s", "roofline_fraction", "transformers_tokens_per_s", "matmul_tokens_per_s"):
        assert isinstance(row[f], float), (shape, f, row)
assert list(r["prefill"]) == ["256", "1k", "2k"], list(r["prefill"])
assert r["prefill"]["1k"]["sdpa_tflops"] > 0 and r["prefill"]["2k"]["model_prefill_matmul_tokens_per_s"] > 0
assert r["cape"]["4k"]["throughput_ratio"] > 0 and r["cape"]["8k"]["full_memory"].startswith("lower bound")
assert r["encoder"]["passages_per_s"] > 0 and r["encoder"]["sentence_transformers_passages_per_s"] > 0
assert r["encoder"]["min_cosine_vs_sentence_transformers"] > 0.999
assert r["failures"] == {"cape_16384": "skipped: time budget spent"}, r.get("failures")
# Issue 39's ratios: Capstan over the PyTorch peers of the same run, every case both ran.
v = r["vs_pytorch"]
assert sorted(v["attention"]) == ["causal_1k", "causal_256", "cross_1k", "scca_1k", "selfextend_1k",
                                  "zebra_1k"], v["attention"]
assert all(isinstance(x, float) and x > 0 for x in v["attention"].values()), v["attention"]
assert list(v["prefill"]) == ["1k", "2k"] and all(x > 0 for x in v["prefill"].values()), v["prefill"]
assert list(v["decode"]) == ["64", "1k"] and all(x > 0 for x in v["decode"].values()), v["decode"]
assert v["batch16_decode"] > 1 and v["batch16_max_rel_diff"] < 1e-3, v
assert v["cape_128k"] == {"memory_ratio": None, "throughput_ratio": None,
                          "context_memory_ratio": None}  # no 128K at tiny shapes
assert v["smollm2_tokens_per_s"] > 0
for goal in ("causal_attention_at_least_0.8x_sdpa", "patterns_at_least_1x_flex_attention",
             "batch16_decode_at_least_12x_one", "cape_128k_throughput_at_least_12x"):
    assert goal in r["goals"], goal
assert r["goals"]["cape_128k_throughput_at_least_12x"] is None
# Profiles: the CPU has no ncu (their commands still ran); where ncu ran, a table of kernels.
assert r["profile"] == {k: {"skipped": "no ncu on this machine"}
                        for k in ("decode_llama3-tiny", "gguf", "prefill")}, r["profile"]
assert "Profile prefill: no ncu on this machine" in md
assert "| attention zebra_1k |" in md
assert "SKIPPED cape_16384" in md and "| llama3-tiny | 1k |" in md
# The fused decoding step never runs on the CPU: no figure of its own, the layers' stand.
assert set(v["decode_step"]) == {"64", "1k"} and all(x is None for x in v["decode_step"].values())
assert v["decode_best"] == v["decode"], (v["decode_best"], v["decode"])
assert v["smollm2_step_tokens_per_s"] is None and v["smollm2_step_tokens_as_layers"] == 128
assert v["batch16_step_decode"] is None and v["batch16_best"] == v["batch16_decode"], v


def copy_recorded(raw):
    """The recorded CPU run's raw records, copied into `raw` (to be marked as a GPU run's)."""
    src = os.path.join(here, "tests", "gpu-check-raw")
    for name in os.listdir(src):
        with open(os.path.join(src, name)) as f, open(os.path.join(raw, name), "w") as g:
            g.write(f.read())


def report(raw):
    """gpu_report.py's vs_pytorch for the raw records in `raw`."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, os.path.join(here, "gpu_report.py"), "--raw", raw, "--cpu", "1",
                        "--out", out], check=True)
        return json.load(open(os.path.join(out, "results.json")))["vs_pytorch"]


# Where it ran (the same records, marked as a GPU run would mark them) its figures count: the
# step's rows whose logits matched the layers', SmolLM2's where it ran as a graph.
with tempfile.TemporaryDirectory() as raw:
    copy_recorded(raw)
    fused = json.load(open(os.path.join(raw, "fused_decode_llama3-tiny.json")))
    fused["by_full_attention"]["step"]["1k"]["step_vs_layers_max_rel_diff"] = 0.004
    fused["by_full_attention"]["step"]["64"]["step_vs_layers_max_rel_diff"] = 0.2  # failed its check
    json.dump(fused, open(os.path.join(raw, "fused_decode_llama3-tiny.json"), "w"))
    gguf = json.load(open(os.path.join(raw, "gguf.json")))
    gguf["by_way"]["step"]["decode_step"] = "Ready { graphs: 1, capture_error: None }"
    json.dump(gguf, open(os.path.join(raw, "gguf.json"), "w"))
    # 16 sequences through the fused step, run as graphs and matching each sequence alone,
    # faster than the packed layers: the goal takes the fused step's ratio.
    f16 = json.load(open(os.path.join(raw, "fused_batch16_llama3-tiny.json")))
    f16["decode_step"] = "Ready { graphs: 2, capture_error: None }"
    b16 = json.load(open(os.path.join(raw, "batch16_llama3-tiny.json")))
    f16["contexts"]["1k"]["tokens_per_s"] = 2 * b16["contexts"]["1k"]["tokens_per_s"]
    json.dump(f16, open(os.path.join(raw, "fused_batch16_llama3-tiny.json"), "w"))
    w = report(raw)
    assert w["decode_step"]["64"] is None and w["decode_step"]["1k"] > 0, w["decode_step"]
    assert w["decode_best"]["1k"] == max(w["decode"]["1k"], w["decode_step"]["1k"]), w
    assert w["smollm2_step_tokens_per_s"] == gguf["by_way"]["step"]["tokens_per_s"], w
    step1 = fused["by_full_attention"]["step"]["1k"]["tokens_per_s"]
    assert w["batch16_step_decode"] == f16["contexts"]["1k"]["tokens_per_s"] / step1, w
    assert w["batch16_best"] == w["batch16_step_decode"] != w["batch16_decode"], w
# A fused batch whose logits strayed from the sequences alone gets no figure.
with tempfile.TemporaryDirectory() as raw:
    copy_recorded(raw)
    fused = json.load(open(os.path.join(raw, "fused_decode_llama3-tiny.json")))
    fused["by_full_attention"]["step"]["1k"]["step_vs_layers_max_rel_diff"] = 0.004
    json.dump(fused, open(os.path.join(raw, "fused_decode_llama3-tiny.json"), "w"))
    f16 = json.load(open(os.path.join(raw, "fused_batch16_llama3-tiny.json")))
    f16["decode_step"] = "Ready { graphs: 2, capture_error: None }"
    f16["contexts"]["1k"]["packed_vs_alone_max_rel_diff"] = 0.3
    json.dump(f16, open(os.path.join(raw, "fused_batch16_llama3-tiny.json"), "w"))
    w = report(raw)
    assert w["batch16_step_decode"] is None and w["batch16_best"] == w["batch16_decode"], w
    # ... but one that strays from the layers as far as the layers' own packed rows do, and
    # matches each sequence through the same step alone, counts.
    f16["contexts"]["1k"]["packed_vs_alone_same_way_max_rel_diff"] = 0.01
    json.dump(f16, open(os.path.join(raw, "fused_batch16_llama3-tiny.json"), "w"))
    w = report(raw)
    assert w["batch16_step_decode"] is not None, w
    # ... and one that strays from its own sequences alone does not.
    f16["contexts"]["1k"]["packed_vs_alone_same_way_max_rel_diff"] = 0.2
    json.dump(f16, open(os.path.join(raw, "fused_batch16_llama3-tiny.json"), "w"))
    w = report(raw)
    assert w["batch16_step_decode"] is None, w
# A profile where ncu ran (bench/ncu_summary.py's output) becomes a table in results.md.
with tempfile.TemporaryDirectory() as raw:
    copy_recorded(raw)
    prof = {"launches": 3, "kernels": 2, "total_us": 30.0,
            "top": [{"kernel": "capstan_step_gemv_bf16_bf16", "launches": 2, "total_us": 20.0, "mean_us": 10.0,
                     "share": 0.6667},
                    {"kernel": "capstan_step_rmsnorm_bf16", "launches": 1, "total_us": 10.0, "mean_us": 10.0,
                     "share": 0.3333}]}
    json.dump(prof, open(os.path.join(raw, "profile_prefill.json"), "w"))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, os.path.join(here, "gpu_report.py"), "--raw", raw, "--cpu", "1",
                        "--out", out], check=True)
        md = open(os.path.join(out, "results.md")).read()
        assert json.load(open(os.path.join(out, "results.json")))["profile"]["prefill"] == prof
    assert "Profile prefill: 3 kernel launches, 0.03 ms of kernels" in md, md
    assert "| capstan_step_gemv_bf16_bf16 | 2 | 20.0 | 10.00 | 66.7% |" in md, md
print("gpu_report: ok")
