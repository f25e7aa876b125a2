#!/usr/bin/env python3
"""Checks that span answers hold no text absent from the corpus: every non-empty prediction of
`capstan eval qa --answer span` runs must occur verbatim (case-sensitive) in some document's
title or text. (The server test checks the stronger property per answer: the span's characters
in its cited passage are the answer.) Also prints EM/F1/contains on the first N questions, to
compare with a peer run on the same questions.

Usage: python3 bench/span_check.py CORPUS.jsonl EVAL_OUT_DIR [--first N]
"""
import json, sys

corpus, run = sys.argv[1], sys.argv[2]
first = int(sys.argv[sys.argv.index("--first") + 1]) if "--first" in sys.argv else None
docs = []
for line in open(corpus):
    d = json.loads(line)
    docs.append(d.get("title", "") + "\n" + d["text"])
blob = "\n\x00\n".join(docs)
items = [json.loads(l) for l in open(f"{run}/items.jsonl")]
items.sort(key=lambda it: int(it["key"][1:]))
absent = [it["result"]["prediction"] for it in items
          if it["result"]["prediction"] and it["result"]["prediction"] not in blob]
print(f"{run}: {len(items)} answers, {len(absent)} not verbatim in the corpus {absent[:5]}")
if first:
    sel = [it["result"] for it in items[:first]]
    n = len(sel)
    print(f"first {n}: EM {sum(r['em'] for r in sel)/n:.3f} F1 {sum(r['f1'] for r in sel)/n:.3f} "
          f"contains {sum(r.get('contains', False) for r in sel)/n:.3f}")
