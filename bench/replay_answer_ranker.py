#!/usr/bin/env python3
"""Replays the fitted answer ranker over dev candidate dumps, to try a rule without a model run.

A dump (`capstan eval qa` with CAPSTAN_DUMP_CANDIDATES) holds each question's candidates with
their features, the ones the generative reader scored flagged. This script picks, per question,
the scored candidate the `full` weights of engine/data/answer_ranker.json rank first, and
reports top-1 exact match (SQuAD-normalised) per set under two variations:

  --shortlist K,...      only the K best by the `lexical` weights are scored (the engine's
                         SHORTLIST is 24); the likelihood's rank and gap features are
                         recomputed within them
  --drop-question-words  also: leave out a plain-word candidate (no - / _ : . @ ( ) [ ] =) whose
                         words all occur in the question ("Aelri was born" for "Where was
                         Urgaud Aelri born?")

In-sample: the weights were fitted on these dumps, so the figures are optimistic; what a rule
changes, not its level, is what they show. Dev splits only.

Usage: python3 bench/replay_answer_ranker.py --pair DUMP QUESTIONS [--pair ...]
           [--shortlist 24,16,12,8] [--drop-question-words]
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_answer_ranker import normalize  # noqa: E402

WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "data",
                       "answer_ranker.json")


def words(s):
    return re.findall(r"[a-z0-9]+", s.lower())


def plain(text):
    return not re.search(r"[-/_:.@()\[\]=]", text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", nargs=2, action="append", required=True,
                    metavar=("DUMP", "QUESTIONS"))
    ap.add_argument("--shortlist", default="24")
    ap.add_argument("--drop-question-words", action="store_true")
    ap.add_argument("--weights", default=WEIGHTS)
    args = ap.parse_args()
    ranker = json.load(open(args.weights))
    full, lexical, names = np.array(ranker["full"]), np.array(ranker["lexical"]), ranker["features"]
    i_mean, i_gap, i_rank = (names.index(n) for n in ("lm_mean", "lm_mean_gap", "lm_rank"))
    sizes = [int(k) for k in args.shortlist.split(",")]
    for dump, questions in args.pair:
        gold = {}
        for line in open(questions):
            q = json.loads(line)
            gold[q["question"]] = [normalize(a) for a in q["answers"]]
        right = {k: 0 for k in sizes}
        n = 0
        for line in open(dump):
            d = json.loads(line)
            answers = gold.get(d["question"])
            if answers is None:
                continue
            n += 1
            asked = set(words(d["question"]))
            cands = [c for c in d["candidates"] if c["scored"]]
            if args.drop_question_words:
                kept = [c for c in cands if not (plain(c["text"]) and set(words(c["text"])) <= asked)]
                cands = kept or cands
            cands.sort(key=lambda c: -float(np.dot(lexical, c["f"])))
            for k in sizes:
                sub = [np.array(c["f"], dtype=float) for c in cands[:k]]
                if not sub:
                    continue
                means = [f[i_mean] for f in sub]
                best = max(means)
                for rank, i in enumerate(sorted(range(len(sub)), key=lambda i: -means[i])):
                    sub[i][i_gap] = means[i] - best
                    sub[i][i_rank] = 1.0 / (1.0 + rank)
                pick = max(range(len(sub)), key=lambda i: float(np.dot(full, sub[i])))
                right[k] += normalize(cands[pick]["text"]) in answers
        figures = ", ".join(f"shortlist {k}: {right[k] / max(n, 1):.3f}" for k in sizes)
        print(f"{questions}: {n} questions; {figures}")


if __name__ == "__main__":
    main()
