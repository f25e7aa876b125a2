#!/usr/bin/env python3
"""Fits the answer ranker's weights (engine/data/answer_ranker.json) on dev splits.

Input: pairs of a candidates dump and its questions. A dump is what `capstan eval qa` writes
with CAPSTAN_DUMP_CANDIDATES=FILE: per question, its candidate spans (the best 200 by the
current lexical weights, plus every one the generative reader scored) with their feature
vectors. A candidate is right when its SQuAD-normalised text equals a normalised gold answer.

Model: a conditional logit (softmax over one question's candidates, the right ones'
probability maximised; L2-regularised), fitted twice:
  lexical  on every dumped candidate, without the reader's likelihood features and without
           `in_context` (the extractive reader has no context): the extractive reader's
           answer, and the shortlist the generative reader scores;
  full     on the candidates the reader scored, every feature.
The regularisation is chosen by 5-fold cross-validation over questions (folds by question
order, which the dev files shuffled by document), then the weights are fitted on all of it.

A questions file may come with several dumps, each made under other weights (its shortlist,
the candidates the reader scored, is chosen by the lexical weights of the build that dumped
it): they are pooled per question, so that the full weights learn from the competitors every
shortlist brought, not only the last one's (a refit on its own last round's dumps alone can
forget what an earlier shortlist taught it).

Only dev splits go in: the test splits are never read here.

A kind of text the ranker was not fitted to is what a user's corpus is: --leave-one-out also
reports each pair's top-1 under weights fitted on the other pairs alone.

Usage: python3 bench/fit_answer_ranker.py --pair DUMP QUESTIONS [--pair ...] \\
           [--out engine/data/answer_ranker.json] [--drop a,b] [--leave-one-out]
"""
import argparse
import json
import re
import string
import sys

import numpy as np

LM = ["lm_mean", "lm_first", "lm_end", "lm_mean_gap", "lm_rank"]
NOT_LEXICAL = LM + ["in_context", "relation_similarity", "relation_similarity_gap"]


def normalize(s):
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation) and c not in "‘’“”–—…«»¿¡")
    return " ".join(w for w in s.split() if w not in ("a", "an", "the"))


def load(pairs):
    """One group a question: (X_all, y_all, scored_mask). Dumps of the same questions file
    (several rounds, each shortlisted by other weights) are pooled: a question's candidates
    from every round, a candidate dumped twice with the same features kept once."""
    merged = {}  # (questions, question) -> {(text, features): (features, right, scored)}
    for dump, questions in pairs:
        gold = {}
        for line in open(questions):
            q = json.loads(line)
            gold[q["question"]] = [normalize(a) for a in q["answers"]]
        for line in open(dump):
            d = json.loads(line)
            answers = gold.get(d["question"])
            if answers is None:
                continue
            rows = merged.setdefault((questions, d["question"]), {})
            for c in d["candidates"]:
                key = (c["text"], tuple(c["f"]))
                right = normalize(c["text"]) in answers
                scored = c["scored"] or (key in rows and rows[key][2])
                rows[key] = (c["f"], right, scored)
    groups = []
    for rows in merged.values():
        f, y, scored = zip(*rows.values())
        groups.append((np.array(f, dtype=np.float64), np.array(y), np.array(scored)))
    return groups


def fit(groups, mask, lam, iters=600, lr=0.05, start=None):
    """Weights of `mask`'s features fitted; the others stay as `start` gives them (zeros)."""
    d = groups[0][0].shape[1]
    base = np.zeros(d) if start is None else start
    w = base.copy()
    m = np.zeros(d)
    v = np.zeros(d)
    usable = [(X, X[:, mask], y) for X, y, *_ in groups if y.any() and not y.all()]
    for t in range(1, iters + 1):
        g = lam * w[mask] * 2
        for X_all, X, y in usable:
            s = X_all @ w
            s -= s.max()
            p = np.exp(s)
            p /= p.sum()
            q = p * y
            q /= q.sum()
            g += X.T @ (p - q) / len(usable)
        m = 0.9 * m
        v = 0.999 * v
        m[mask] += 0.1 * g
        v[mask] += 0.001 * g * g
        w -= lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        w[~mask] = base[~mask]
    return w


def top1(groups, w):
    """Share of all questions whose best-scored candidate is right (questions without a right
    candidate count as misses)."""
    hits = 0
    for X, y, *_ in groups:
        hits += bool(y[int(np.argmax(X @ w))])
    return hits / max(1, len(groups))


def choose(groups, mask, lams, start=None):
    folds = 5
    best = None
    for lam in lams:
        acc = []
        for k in range(folds):
            train = [g for i, g in enumerate(groups) if i % folds != k]
            test = [g for i, g in enumerate(groups) if i % folds == k]
            acc.append(top1(test, fit(train, mask, lam, iters=300, start=start)))
        mean = float(np.mean(acc))
        print(f"  lambda {lam:g}: cross-validated top-1 {mean:.3f}", file=sys.stderr)
        if best is None or mean > best[1]:
            best = (lam, mean)
    return best


def leave_one_out(pairs, mask, lam, start=None):
    """Each questions file's top-1 (full weights, scored candidates) fitted on the other files'
    alone (a file's dumps pooled)."""
    files = list(dict.fromkeys(q for _, q in pairs))
    sets = [[(X[s], y[s], s[s]) for X, y, s in load([p for p in pairs if p[1] == f])
             if s.any()] for f in files]
    scores = []
    for i, questions in enumerate(files):
        train = [g for j, groups in enumerate(sets) if j != i for g in groups]
        scores.append(top1(sets[i], fit(train, mask, lam, iters=300, start=start)))
        print(f"  left out {questions}: top-1 {scores[-1]:.3f}", file=sys.stderr)
    print(f"  leave-one-out mean top-1 {np.mean(scores):.3f}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", nargs=2, action="append", required=True, metavar=("DUMP", "QUESTIONS"))
    ap.add_argument("--out", default="engine/data/answer_ranker.json")
    ap.add_argument("--names", default="engine/data/answer_ranker.json")
    ap.add_argument("--lambdas", default="0.0001,0.001,0.01")
    ap.add_argument("--drop", default="",
                    help="comma-separated features left out (weight 0): to compare feature sets")
    ap.add_argument("--keep", default="",
                    help="a weights file whose features keep its weights: only the features it "
                         "lacks are fitted (a new feature added to a ranker without refitting "
                         "what the earlier rounds' data taught it)")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="also report each pair's top-1 under full weights fitted on the other "
                         "pairs: how the ranker does on a kind of text it was not fitted to")
    args = ap.parse_args()
    # The feature names of the code, as the weights file in the repository lists them.
    names = json.load(open(args.names))["features"]
    groups = load(args.pair)
    lams = [float(x) for x in args.lambdas.split(",")]
    dropped = set(filter(None, args.drop.split(",")))
    unknown = dropped - set(names)
    if unknown:
        sys.exit(f"--drop: no such features {sorted(unknown)}")
    kept = {}
    if args.keep:
        k = json.load(open(args.keep))
        kept = {n: (a, b) for n, a, b in zip(k["features"], k["lexical"], k["full"])}
    start_lex = np.array([kept[n][0] if n in kept else 0.0 for n in names]) if kept else None
    start_full = np.array([kept[n][1] if n in kept else 0.0 for n in names]) if kept else None
    free = np.array([n not in kept for n in names])
    lexical_mask = free & np.array([n not in NOT_LEXICAL and n not in dropped for n in names])
    print(f"{len(groups)} questions, {sum(g[1].any() for g in groups)} with a right candidate",
          file=sys.stderr)
    print("lexical:", file=sys.stderr)
    lam, cv = choose(groups, lexical_mask, lams, start_lex)
    w_lex = fit(groups, lexical_mask, lam, start=start_lex)
    print(f"  chosen lambda {lam:g}; fitted top-1 {top1(groups, w_lex):.3f}", file=sys.stderr)
    scored_groups = [(X[s], y[s], s[s]) for X, y, s in groups if s.any()]
    full_mask = free & np.array([n not in dropped for n in names])
    print(f"full ({len(scored_groups)} questions with scored candidates, "
          f"{sum(g[1].any() for g in scored_groups)} with a right one):", file=sys.stderr)
    lam_f, cv_f = choose(scored_groups, full_mask, lams, start_full)
    w_full = fit(scored_groups, full_mask, lam_f, start=start_full)
    print(f"  chosen lambda {lam_f:g}; fitted top-1 {top1(scored_groups, w_full):.3f}",
          file=sys.stderr)
    out = {
        "about": (
            "Fitted by bench/fit_answer_ranker.py on the dev splits "
            + ", ".join(dict.fromkeys(q for _, q in args.pair))
            + f"; cross-validated top-1: lexical {cv:.3f} (lambda {lam:g}), "
            f"full {cv_f:.3f} (lambda {lam_f:g})"
            + (f"; the weights of the features of {args.keep} kept." if args.keep else ".")
        ),
        "features": names,
        "lexical": [round(float(x), 5) for x in w_lex],
        "full": [round(float(x), 5) for x in w_full],
    }
    if args.leave_one_out:
        leave_one_out(args.pair, full_mask, lam_f, start_full)
    json.dump(out, open(args.out, "w"), indent=1)
    print(f"wrote {args.out}", file=sys.stderr)
    for n, a, b in sorted(zip(names, w_lex, w_full), key=lambda t: -abs(t[2])):
        if abs(a) > 0.05 or abs(b) > 0.05:
            print(f"  {n:<32} lexical {a:+.3f}  full {b:+.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
