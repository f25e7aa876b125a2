#!/usr/bin/env python3
"""Where a GPU program's time goes, from Nsight Compute's CSV (`ncu --csv --print-units base
--metrics gpu__time_duration.sum`): each kernel's launches and total duration, largest first,
and each one's share of the profiled kernels' time. scripts/gpu-profile.sh writes the CSV;
gpu_report.py puts the summary in results.json (`profile`).

  python3 bench/ncu_summary.py PROFILE.csv [--top 15]   # JSON on stdout
"""
import argparse
import csv
import io
import json
import re

# ncu 2025 writes "ns" (and "us", "ms", "s") where older versions wrote "nsecond" and the like.
UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
         "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def short(name):
    """A kernel's name without its argument list and template arguments' noise."""
    name = re.sub(r"\(.*\)$", "", name.strip())
    return name[:120]


def summarize(text, top=15):
    """The summary of ncu's CSV `text`; {"error": ...} where it is not ncu's CSV."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return {"error": "no ncu CSV header", "first_lines": lines[:5]}
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    need = {"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
    if not rows or not need <= set(rows[0]):
        return {"error": f"columns {sorted(rows[0]) if rows else []}, expected {sorted(need)}"}
    kernels = {}
    launches = set()
    for r in rows:
        # "Duration": the same metric as a section set (--set full) names it.
        if r["Metric Name"] not in ("gpu__time_duration.sum", "Duration"):
            continue
        unit = UNITS.get(r["Metric Unit"].strip())
        if unit is None:
            return {"error": f"unit {r['Metric Unit']!r}"}
        us = float(r["Metric Value"].replace(",", "")) * unit
        launches.add(r["ID"])
        k = kernels.setdefault(short(r["Kernel Name"]), {"launches": 0, "total_us": 0.0})
        k["launches"] += 1
        k["total_us"] += us
    total = sum(k["total_us"] for k in kernels.values())
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1]["total_us"])
    return {
        "launches": len(launches),
        "kernels": len(kernels),
        "total_us": total,
        "top": [{"kernel": name, "launches": k["launches"], "total_us": round(k["total_us"], 3),
                 "mean_us": round(k["total_us"] / k["launches"], 3),
                 "share": round(k["total_us"] / total, 4) if total else None}
                for name, k in ranked[:top]],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    with open(a.csv, errors="replace") as f:
        print(json.dumps(summarize(f.read(), a.top), indent=1))


if __name__ == "__main__":
    main()
