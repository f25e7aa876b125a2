#!/usr/bin/env python3
"""ANN: Capstan's HNSW (graph built by hnsw_rs with Capstan's unit-cosine
distance, searched by Capstan over its frozen links; hnsw_rs's own search of
the same graph reported beside it) vs
faiss-cpu IndexHNSWFlat (inner product on unit vectors), same run, same
vectors, same M / efConstruction / efSearch. Recall@10 against exact search
(numpy), single-thread queries/s; both build with all cores.

Datasets: `--vectors FILE --dim D` (e.g. an index's vectors.f32: real
all-MiniLM-L6-v2 passage vectors; queries = held-out rows) or `--synthetic N
--dim D` (a seeded Gaussian mixture, normalised).

Usage: python3 bench/ann_vs_faiss.py --synthetic 1000000 --dim 64 --queries 1000
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile
import time

import faiss
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--vectors")
ap.add_argument("--synthetic", type=int)
ap.add_argument("--dim", type=int, required=True)
ap.add_argument("--queries", type=int, default=1000)
ap.add_argument("--m", type=int, default=16)
ap.add_argument("--ef-construction", type=int, default=100)
ap.add_argument("--ef", default="16,32,64,128")
ap.add_argument("--k", type=int, default=10)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--bench-bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/capstan/target")), "release", "capstan-bench"))
args = ap.parse_args()
rng = np.random.default_rng(args.seed)

if args.vectors:
    allv = np.fromfile(args.vectors, dtype="<f4").reshape(-1, args.dim)
    perm = rng.permutation(len(allv))
    queries = allv[perm[: args.queries]]
    base = allv[np.sort(perm[args.queries :])]
    source = os.path.basename(args.vectors)
else:
    centers = rng.standard_normal((256, args.dim)).astype("f4")
    def sample(n):
        c = centers[rng.integers(0, len(centers), n)]
        return c + 0.35 * rng.standard_normal((n, args.dim)).astype("f4")
    base = sample(args.synthetic)
    queries = sample(args.queries)
    source = f"synthetic gaussian mixture (256 centres), seed {args.seed}"
base /= np.linalg.norm(base, axis=1, keepdims=True)
queries /= np.linalg.norm(queries, axis=1, keepdims=True)
base = np.ascontiguousarray(base, dtype="<f4")
queries = np.ascontiguousarray(queries, dtype="<f4")

# exact neighbours
truth = np.empty((len(queries), args.k), dtype="<i4")
for s in range(0, len(queries), 100):
    sims = queries[s : s + 100] @ base.T
    top = np.argpartition(-sims, args.k, axis=1)[:, : args.k]
    order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
    truth[s : s + 100] = np.take_along_axis(top, order, axis=1)

tmp = tempfile.mkdtemp()
base.tofile(os.path.join(tmp, "base.f32"))
queries.tofile(os.path.join(tmp, "queries.f32"))
truth.tofile(os.path.join(tmp, "truth.i32"))
out = subprocess.run(
    [args.bench_bin, "ann", "--base", f"{tmp}/base.f32", "--queries", f"{tmp}/queries.f32", "--truth", f"{tmp}/truth.i32",
     "--dim", str(args.dim), "--m", str(args.m), "--ef-construction", str(args.ef_construction), "--ef", args.ef, "--k", str(args.k)],
    check=True, capture_output=True, text=True,
)
capstan = json.loads(out.stdout)

faiss.omp_set_num_threads(os.cpu_count())
index = faiss.IndexHNSWFlat(args.dim, args.m, faiss.METRIC_INNER_PRODUCT)
index.hnsw.efConstruction = args.ef_construction
t = time.perf_counter()
index.add(base)
faiss_build = time.perf_counter() - t
faiss.omp_set_num_threads(1)
runs = []
for ef in [int(e) for e in args.ef.split(",")]:
    index.hnsw.efSearch = max(ef, args.k)
    index.search(queries[:50], args.k)
    t = time.perf_counter()
    for q in queries:  # one query at a time, as Capstan answers them
        _, ids = index.search(q[None, :], args.k)
        pass
    secs = time.perf_counter() - t
    _, ids = index.search(queries, args.k)
    rec = np.mean([len(set(ids[i]) & set(truth[i])) / args.k for i in range(len(queries))])
    runs.append({"ef": ef, "queries_per_second": len(queries) / secs, "recall_at_k": float(rec)})

result = {
    "date": time.strftime("%Y-%m-%d"),
    "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    "source": source, "vectors": int(len(base)), "dim": args.dim, "queries": int(len(queries)),
    "m": args.m, "ef_construction": args.ef_construction,
    "capstan": capstan,
    "faiss": {"build_seconds": faiss_build, "runs": runs, "version": faiss.__version__},
}
print(json.dumps(result, indent=2))
print("| efSearch | Capstan q/s | recall@10 | hnsw_rs search q/s | recall@10 | faiss q/s | recall@10 | Capstan/faiss q/s |")
print("|---|---|---|---|---|---|---|---|")
for c, f in zip(capstan["runs"], runs):
    h = c["hnsw_rs_search"]
    print(f"| {c['ef']} | {c['queries_per_second']:,.0f} | {c['recall_at_k']:.3f} | "
          f"{h['queries_per_second']:,.0f} | {h['recall_at_k']:.3f} | "
          f"{f['queries_per_second']:,.0f} | {f['recall_at_k']:.3f} | {c['queries_per_second']/f['queries_per_second']:.2f}x |")
print(f"build: Capstan (hnsw_rs) {capstan['build_seconds']:.1f} s + freeze {capstan['freeze_seconds']:.1f} s, faiss {faiss_build:.1f} s")
