#!/usr/bin/env python3
"""Short-passage corpus for the 100K-passage index benchmark: each passage of
`capstan-bench prepare`'s passages.jsonl cut to its first WORDS words, as a
BEIR corpus.jsonl (one document = one passage). Passages of fewer than 4
words are dropped (6 of the 100,000 Rust-doc passages).

Usage: python3 bench/shorten_passages.py PASSAGES.jsonl OUT.jsonl [--words 40] [--limit N]
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("passages")
ap.add_argument("out")
ap.add_argument("--words", type=int, default=40)
ap.add_argument("--limit", type=int, help="keep the first N passages written")
args = ap.parse_args()

written = 0
with open(args.passages, encoding="utf-8") as src, open(args.out, "w", encoding="utf-8") as dst:
    for line in src:
        if not line.strip():
            continue
        p = json.loads(line)
        words = p["text"].split()
        if len(words) < 4:
            continue
        dst.write(json.dumps({"_id": p["id"], "title": p["title"], "text": " ".join(words[: args.words])}) + "\n")
        written += 1
        if args.limit and written >= args.limit:
            break
print(f"{written} passages -> {args.out}")
