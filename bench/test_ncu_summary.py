#!/usr/bin/env python3
"""bench/ncu_summary.py on Nsight Compute's CSV as `ncu --csv --print-units base` writes it."""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from ncu_summary import summarize  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, kernel, unit, value, metric="gpu__time_duration.sum"):
    return (f'"{i}","7","capstan-bench","127.0.0.1","{kernel}","1","7","(256, 1, 1)","(120, 1, 1)",'
            f'"0","9.0","Command line profiler metrics","{metric}","{unit}","{value}"')


text = "\n".join([
    "==PROF== Connected to process 7",
    HEADER,
    row(0, "capstan_step_gemv_bf16_bf16(const unsigned char *, ...)", "nsecond", "12,000"),
    row(1, "capstan_step_rmsnorm_bf16", "nsecond", "2000"),
    row(2, "capstan_step_gemv_bf16_bf16(const unsigned char *, ...)", "usecond", "8"),
    row(2, "capstan_step_gemv_bf16_bf16(const unsigned char *, ...)", "byte", "5", metric="dram__bytes.sum"),
])
s = summarize(text)
assert s["launches"] == 3 and s["kernels"] == 2, s
assert abs(s["total_us"] - 22.0) < 1e-9, s
top = s["top"][0]
assert top["kernel"] == "capstan_step_gemv_bf16_bf16" and top["launches"] == 2, top
assert top["total_us"] == 20.0 and top["mean_us"] == 10.0 and abs(top["share"] - 20 / 22) < 1e-3, top
# ncu 2025 (the H200 machines' 2025.3) writes "ns" and "us": the same figures.
short = text.replace('"nsecond"', '"ns"').replace('"usecond"', '"us"')
assert summarize(short) == s, summarize(short)
# A section set's CSV (--set full) names the duration "Duration", among other metrics.
full = "\n".join([HEADER, row(0, "k", "ns", "1500", metric="Duration"),
                  row(0, "k", "%", "40", metric="Achieved Occupancy")])
assert summarize(full)["total_us"] == 1.5, summarize(full)
# Not ncu's CSV, or a unit it does not know: an error, not a figure.
assert "error" in summarize("ncu: no kernels were profiled")
assert "error" in summarize("\n".join([HEADER, row(0, "k", "cycle", "3")]))
# The script prints the same as JSON.
with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write(text)
out = subprocess.run([sys.executable, os.path.join(here, "ncu_summary.py"), f.name], check=True,
                     capture_output=True, text=True).stdout
os.unlink(f.name)
assert json.loads(out) == json.loads(json.dumps(s)), out
print("ncu_summary: ok")
