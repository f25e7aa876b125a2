#!/usr/bin/env python3
"""A dev set of narrative real text: "A Short History of the Debian Project" (Debian's
`debian-history` package) and its release dedications, with questions written by hand.

The answer sets of bench/answers.sh are mostly definitions, records and reference text; the
sort of text where a person's life, a place and an event are told in sentences (the
encyclopedia, the README demo) had no real-text dev data, and the ranker's weights for
"where", "when" and "what did they do" questions came from a few dozen glossary entries.
This set is for fitting (dev only): the questions in bench/data/history-dev.jsonl were
written by reading the text, each answer a verbatim span of the named document, the
question worded away from the sentence that holds it.

The package comes from Debian's archive (`apt-get download`, as scripts/fetch-documents.sh
does); each numbered section of the history and each dedication becomes one document.

Usage: python3 bench/history_set.py --out DATA   (writes DATA/history/{corpus,dev}.jsonl)
"""
import argparse
import glob
import gzip
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answer_set_tools as tools  # noqa: E402

HEADING = re.compile(r"^(Chapter \d+\.|Appendix [A-Z]\.|[A-Z\d]+(?:\.\d+)*\.) (.+)$")


def sections(text):
    """(title, body) of each numbered section of the plain-text history, past its contents."""
    lines = text.replace("\u00a0", " ").splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("Chapter 1."))
    out, title, body = [], None, []
    for line in lines[start:]:
        m = HEADING.match(line)
        if m and not line.startswith(" "):
            if title and body:
                out.append((title, body))
            title, body = m.group(2).strip(), []
        elif title is not None:
            body.append(line)
    if title and body:
        out.append((title, body))
    return [(t, p) for t, p in ((t, paragraphs(b)) for t, b in out) if p]


def paragraphs(lines):
    """The text of `lines`: paragraphs one to a line, a blank line between them."""
    return "\n\n".join(tools.paragraphs(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--questions", default=os.path.join(os.path.dirname(__file__), "data", "history-dev.jsonl"))
    args = ap.parse_args()
    out = os.path.join(args.out, "history")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = tools.unpack_debian_package("debian-history", tmp)
        doc = os.path.join(root, "usr", "share", "doc", "debian-history")
        history = gzip.open(os.path.join(doc, "docs", "project-history.en.txt.gz"), "rt").read()
        docs = []
        for title, body in sections(history):
            slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
            docs.append({"_id": f"history:{slug}", "title": title, "text": body})
        for path in sorted(glob.glob(os.path.join(doc, "dedication", "dedication-*.txt"))):
            english = re.search(r"dedication-([\d.]+)\.txt$", path)
            if english is None:
                continue  # translations
            version = english.group(1)
            lines = open(path).read().splitlines()
            title = lines[0].strip()
            body = paragraphs([l for l in lines[1:] if not set(l.strip()) <= {"-"} or not l.strip()])
            docs.append({"_id": f"dedication:{version}", "title": title, "text": body})
    with open(os.path.join(out, "corpus.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    by_id = {d["_id"]: d for d in docs}
    kept = 0
    with open(os.path.join(out, "dev.jsonl"), "w") as f:
        for n, line in enumerate(open(args.questions), 1):
            q = json.loads(line)
            d = by_id.get(q["doc_id"])
            if d is None:
                sys.exit(f"{args.questions}:{n}: doc_id {q['doc_id']!r} is not in the history")
            if not any(a in d["text"] for a in q["answers"]):
                sys.exit(f"{args.questions}:{n}: no answer of {q['answers']} is in {q['doc_id']}")
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
            kept += 1
    print(f"history: {len(docs)} documents, {kept} dev questions -> {out}")


if __name__ == "__main__":
    main()
