"""What every real answer set shares: Debian files, paragraphs, the checks every candidate passes,
and picking and writing the dev and test splits.

Used by bench/real_answer_sets.py and by the glossary, people, package records and history sets'
builders (bench/*_set.py).
"""

import collections
import glob
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_qa as rq  # noqa: E402

MAX_ANSWER_DOCS = 20


# ---------------------------------------------------------------- shared


def unpack_debian_package(package, folder):
    """Fetches `package` with `apt-get download` into `folder` and unpacks it there
    (dpkg-deb) into `folder/package`, which is returned."""
    subprocess.run(["apt-get", "download", package], cwd=folder, check=True, stdout=subprocess.DEVNULL)
    deb = sorted(glob.glob(os.path.join(folder, f"{package}_*.deb")))[-1]
    root = os.path.join(folder, package)
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return root


def debian_file(package, path, cache):
    """`/path` of a Debian package where the package is installed; else the package is fetched
    once into `cache` and unpacked there (`unpack_debian_package`), and its copy of the file
    is returned."""
    if os.path.exists("/" + path):
        return "/" + path
    unpacked = os.path.join(cache, package, path)
    if os.path.exists(unpacked):
        return unpacked
    return os.path.join(unpack_debian_package(package, cache), path)


def paragraphs(lines):
    """Lines joined into paragraphs (at blank lines), each on one line, white space closed up."""
    paras, cur = [], []
    for line in lines + [""]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    return paras


def whole(a, s):
    """a occurs in s as a whole word (case-insensitive)."""
    return re.search(r"(?<![\w])" + re.escape(a.lower()) + r"(?![\w])", s.lower()) is not None


def check(cand, doc, grams):
    """The common filters: answers verbatim in the text, none in the question,
    no 6-word run shared with the document."""
    q = cand["question"]
    if not cand["answers"] or not all(a and a in doc["text"] for a in cand["answers"]):
        return False
    if any(whole(a, q) or a.lower() in q.lower() for a in cand["answers"]):
        return False
    return not (rq.ngrams(rq.words(q)) & grams)


def split_arguments(ap):
    """Adds the arguments pick_and_write reads: the output folder, the seed, the dev and test
    sizes and the corpus cap."""
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dev", type=int, default=150)
    ap.add_argument("--test", type=int, default=250)
    ap.add_argument("--max-docs", type=int, default=4000)


def debian_cache_argument(ap):
    """Adds --cache, where debian_file keeps the packages it downloads."""
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/capstan/bench/debs"))


def pick_and_write(name, docs, cands, args, strict):
    """One question per document (the least used template first, preferring
    answers in at most MAX_ANSWER_DOCS documents; strict: requiring it), the
    seeded split, the corpus cap, and the files."""
    adocs = rq.AnswerDocs(docs)
    rng = random.Random(f"{args.seed}-{name}-qa")
    order = sorted(cands)
    rng.shuffle(order)
    used, picked = collections.Counter(), []
    want = args.dev + args.test
    for doc_id in order:
        if len(picked) == want:
            break
        cs = list(cands[doc_id])
        for c in cs:
            c["rare"] = max(adocs.count(a) for a in c["answers"]) <= MAX_ANSWER_DOCS
        if strict:
            cs = [c for c in cs if c["rare"]]
        if not cs:
            continue
        rng.shuffle(cs)
        best = min(cs, key=lambda c: (used[c["template"]], not c["rare"]))
        used[best["template"]] += 1
        picked.append(best)

    rng_split = random.Random(f"{args.seed}-{name}-split")
    rng_split.shuffle(picked)
    n_dev = min(args.dev, len(picked) * args.dev // want)
    splits = {"dev": picked[:n_dev], "test": picked[n_dev:n_dev + args.test]}

    keep = {c["doc_id"] for qs in splits.values() for c in qs}
    rest = [d for d in docs if d["_id"] not in keep]
    room = max(0, args.max_docs - len(keep))
    if len(rest) > room:
        rest = random.Random(f"{args.seed}-{name}-docs").sample(rest, room)
    corpus = sorted([d for d in docs if d["_id"] in keep] + rest, key=lambda d: d["_id"])

    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "corpus.jsonl"), "w") as f:
        for d in corpus:
            f.write(json.dumps({"_id": d["_id"], "title": d["title"], "text": d["text"]},
                               ensure_ascii=False) + "\n")
    for part, qs in splits.items():
        with open(os.path.join(out, f"{part}.jsonl"), "w") as f:
            for c in qs:
                f.write(json.dumps({"question": c["question"], "answers": c["answers"],
                                    "doc_id": c["doc_id"], "template": c["template"]},
                                   ensure_ascii=False) + "\n")
    available = collections.Counter(c["template"] for cs in cands.values() for c in cs)
    print(f"{name}: corpus {len(corpus)} documents (of {len(docs)})")
    print(f"  candidates: " + ", ".join(f"{t} {n}" for t, n in sorted(available.items())))
    for part, qs in splits.items():
        per = collections.Counter(c["template"] for c in qs)
        print(f"  {part}: {len(qs)} questions, {len({c['doc_id'] for c in qs})} documents; "
              + ", ".join(f"{t} {n}" for t, n in sorted(per.items())))
    by_t = collections.defaultdict(list)
    for c in splits["dev"] + splits["test"]:
        by_t[c["template"]].append(c)
    for t in sorted(by_t):
        for c in by_t[t][:3]:
            print(f"    [{t}] {c['question']}  ->  {c['answers']}  ({c['doc_id']})")
    sys.stdout.flush()
