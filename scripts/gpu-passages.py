#!/usr/bin/env python3
"""Passages for the GPU encoder check: the rustdoc set's documents (bench/real_sets.py) cut
into 150-word pieces, as JSONL `{"title", "text"}` on stdout; the first --n."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=5000)
ap.add_argument("--corpus", default=os.path.join(
    os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan")),
    "bench/real/rustdoc/corpus.jsonl"))
args = ap.parse_args()
if not os.path.exists(args.corpus):
    sys.exit(f"gpu-passages: {args.corpus} missing: run python3 bench/real_sets.py first")
n = 0
with open(args.corpus) as f:
    for line in f:
        doc = json.loads(line)
        words = doc["text"].split()
        for i in range(0, len(words), 150):
            print(json.dumps({"title": doc["title"], "text": " ".join(words[i:i + 150])}))
            n += 1
            if n >= args.n:
                sys.exit(0)
