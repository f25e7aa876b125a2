#!/usr/bin/env python3
"""A held-out test set of narrative real text, read the way a user hands it over: the HTML
pages of "The Debian Administrator's Handbook" (Debian's `debian-handbook` package, its
English pages) as a folder, with questions written by hand.

bench/data/handbook-test.jsonl was written by reading the pages (the derivative
distributions, the case study, the foreword, the project's history and a release's
lifecycle), each answer a verbatim span of the named page, the question worded away from
the sentence that holds it, before Capstan had read the book: it is never fitted on.
bench/data/handbook-dev.jsonl was written the same way afterwards, on other pages (the
preface, the book's structure, Debian's news, its inner workings, why GNU/Linux), for
fitting: its pages are none of the test's.
Its pages carry their headings as a user's files do, so a page's title is a heading
("A.4. Knoppix", "2.2. Master Plan"), not the name of a thing the question asks for.

The package comes from Debian's archive (`apt-get download`, as scripts/fetch-documents.sh
does). Capstan indexes the folder of pages itself (bench/answers.sh); the peer, which
reads no HTML, gets each page's text with its tags taken out (corpus.jsonl).

Usage: python3 bench/handbook_set.py --out DATA
  (writes DATA/handbook/pages/*.html, DATA/handbook/corpus.jsonl, DATA/handbook/{dev,test}.jsonl)
"""
import argparse
import glob
import html
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answer_set_tools as tools  # noqa: E402


def page_text(raw):
    """A page's text: tags, scripts and the navigation footer out, one block to a line."""
    s = re.sub(r"(?s)<(script|style|head)\b.*?</\1>", "", raw)
    s = re.sub(r'(?s)<div class="navfooter".*', "", s)
    s = re.sub(r"<(p|div|h\d|li|br|tr|dt|dd|pre)\b[^>]*>", "\n", s)
    s = html.unescape(re.sub(r"<[^>]+>", "", s)).replace("\u00a0", " ")
    return "\n".join(line.strip() for line in s.splitlines() if line.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--questions", default=os.path.join(os.path.dirname(__file__), "data", "handbook-test.jsonl"))
    ap.add_argument("--dev-questions", default=os.path.join(os.path.dirname(__file__), "data", "handbook-dev.jsonl"))
    args = ap.parse_args()
    out = os.path.join(args.out, "handbook")
    pages = os.path.join(out, "pages")
    os.makedirs(pages, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = tools.unpack_debian_package("debian-handbook", tmp)
        english = os.path.join(root, "usr", "share", "doc", "debian-handbook", "html", "en-US")
        for path in sorted(glob.glob(os.path.join(english, "*.html"))):
            shutil.copy(path, pages)
    texts = {}
    with open(os.path.join(out, "corpus.jsonl"), "w") as f:
        for path in sorted(glob.glob(os.path.join(pages, "*.html"))):
            name = os.path.basename(path)
            raw = open(path, encoding="utf-8").read()
            title = re.search(r"(?s)<title>(.*?)</title>", raw)
            texts[name] = page_text(raw)
            f.write(json.dumps({"_id": name, "title": html.unescape(title.group(1)).strip() if title else name,
                                "text": texts[name]}, ensure_ascii=False) + "\n")
    split_pages = {}
    for split, questions in (("dev", args.dev_questions), ("test", args.questions)):
        kept = 0
        with open(os.path.join(out, f"{split}.jsonl"), "w") as f:
            for n, line in enumerate(open(questions), 1):
                q = json.loads(line)
                text = texts.get(q["doc_id"])
                if text is None:
                    sys.exit(f"{questions}:{n}: doc_id {q['doc_id']!r} is not a page of the handbook")
                if not any(a in text for a in q["answers"]):
                    sys.exit(f"{questions}:{n}: no answer of {q['answers']} is in {q['doc_id']}")
                f.write(json.dumps(q, ensure_ascii=False) + "\n")
                split_pages.setdefault(split, set()).add(q["doc_id"])
                kept += 1
        print(f"handbook: {kept} {split} questions")
    shared = split_pages["dev"] & split_pages["test"]
    if shared:
        sys.exit(f"pages with both dev and test questions: {sorted(shared)}")
    print(f"handbook: {len(texts)} pages -> {out}")


if __name__ == "__main__":
    main()
