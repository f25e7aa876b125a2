#!/usr/bin/env python3
"""BM25: Capstan (tantivy postings + Capstan's BM25 scorer) vs bm25s, same run.

Both index the same passages (title + text) with the same k1 and b, English
stop words and the Snowball English stemmer, and answer the same
inverse-cloze queries (a sentence removed from its passage); recall@10 is
whether that passage comes back in the top 10. Query throughput is single
threaded on both sides (bm25s: n_threads=1, batch retrieval including query
tokenisation, its fastest mode; Capstan: one query at a time).

Usage: python3 bench/bm25_vs_bm25s.py --data DIR [--k1 1.2 --b 0.75]
(DIR from `capstan-bench prepare`, see docs/BENCHMARKS.md).
"""
import argparse
import json
import os
import platform
import subprocess
import time

import bm25s
import Stemmer

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--k1", type=float, default=1.2)
ap.add_argument("--b", type=float, default=0.75)
ap.add_argument("--k", type=int, default=10)
ap.add_argument("--bench-bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/capstan/target")), "release", "capstan-bench"))
args = ap.parse_args()

passages = [json.loads(l) for l in open(os.path.join(args.data, "passages.jsonl"))]
queries = [json.loads(l) for l in open(os.path.join(args.data, "queries.jsonl"))]

# Capstan
out = subprocess.run(
    [args.bench_bin, "bm25", "--data", args.data, "--k1", str(args.k1), "--b", str(args.b), "--k", str(args.k)],
    check=True, capture_output=True, text=True,
)
capstan = json.loads(out.stdout)

# bm25s
stemmer = Stemmer.Stemmer("english")
texts = [p["title"] + "\n" + p["text"] for p in passages]
t = time.perf_counter()
corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
retriever = bm25s.BM25(k1=args.k1, b=args.b, method="lucene")
retriever.index(corpus_tokens, show_progress=False)
peer_index_s = time.perf_counter() - t
ids = {p["id"]: i for i, p in enumerate(passages)}
qtexts = [q["text"] for q in queries]
# warm-up
retriever.retrieve(bm25s.tokenize(qtexts[:100], stopwords="en", stemmer=stemmer, show_progress=False), k=args.k, n_threads=1, show_progress=False)
t = time.perf_counter()
qtok = bm25s.tokenize(qtexts, stopwords="en", stemmer=stemmer, show_progress=False)
docs, _scores = retriever.retrieve(qtok, k=args.k, n_threads=1, show_progress=False)
peer_query_s = time.perf_counter() - t
found = sum(1 for q, row in zip(queries, docs) if ids[q["passage_id"]] in set(row.tolist()))
peer = {
    "index_seconds": peer_index_s,
    "queries_per_second": len(queries) / peer_query_s,
    "recall_at_k": found / len(queries),
}

result = {
    "date": time.strftime("%Y-%m-%d"),
    "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    "passages": len(passages),
    "queries": len(queries),
    "k1": args.k1, "b": args.b, "k": args.k,
    "capstan": capstan,
    "bm25s": peer,
    "qps_ratio": capstan["queries_per_second"] / peer["queries_per_second"],
    "index_time_ratio": peer["index_seconds"] / capstan["index_seconds"],
    "recall_diff": capstan["recall_at_k"] - peer["recall_at_k"],
    "bm25s_version": bm25s.__version__,
}
print(json.dumps(result, indent=2))
print(
    f"| BM25 | {len(passages)} passages, {len(queries)} queries | Capstan {capstan['queries_per_second']:.0f} q/s, "
    f"recall@{args.k} {capstan['recall_at_k']:.3f}, index {capstan['index_seconds']:.1f} s | bm25s "
    f"{peer['queries_per_second']:.0f} q/s, recall@{args.k} {peer['recall_at_k']:.3f}, index {peer['index_seconds']:.1f} s | "
    f"{result['qps_ratio']:.2f}x q/s |"
)
