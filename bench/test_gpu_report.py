#!/usr/bin/env python3
"""CI check of bench/gpu_report.py (scripts/test.sh): the report of a recorded CPU run of
scripts/gpu-check.sh (bench/tests/gpu-check-raw, plus one step skipped by the time budget) has
every field issue 10 names, both full-attention paths, rows in order and the skip recorded."""
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
assert "SKIPPED cape_16384" in md and "| llama3-tiny | 1k |" in md
print("gpu_report: ok")
