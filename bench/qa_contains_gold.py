#!/usr/bin/env python3
"""Answer quality beyond EM/F1 for sentence answers: the fraction of `capstan eval qa` items
whose prediction contains a gold answer (SQuAD normalisation), with mean F1 and p50 latency,
each run restricted to the questions all runs share (so a subset run compares like for like).

Usage: python3 bench/qa_contains_gold.py QUESTIONS.jsonl EVAL_OUT_DIR [EVAL_OUT_DIR ...]
"""
import json, re, string, sys
def norm(s):
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())
gold = {}
for l in open(sys.argv[1]):
    q = json.loads(l); gold[q["question"]] = q["answers"]
runs = {d: [json.loads(l)["result"] for l in open(d + "/items.jsonl")] for d in sys.argv[2:]}
shared = set.intersection(*({it["question"] for it in items} for items in runs.values()))
for d, items in runs.items():
    items = [it for it in items if it["question"] in shared]
    n = len(items); hit = sum(any(norm(a) in norm(it["prediction"]) for a in gold[it["question"]]) for it in items)
    f1 = sum(it["f1"] for it in items) / n
    lat = sorted(it["total_ms"] for it in items)
    print(f"{d}: n={n} contains-gold={hit/n:.3f} F1={f1:.4f} p50={lat[n//2]:.0f}ms")
