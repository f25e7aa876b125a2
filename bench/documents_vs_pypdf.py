#!/usr/bin/env python3
"""PDF reading (issue 26): Capstan vs pypdf (the converter Haystack uses),
both against poppler's pdftotext, on the real PDFs of
scripts/fetch-documents.sh; then sentences of known pages searched in a
Capstan index of those PDFs.

1. Text per page: token F1 against `pdftotext -f N -l N` (lowercase
   alphanumeric words, multiset overlap), and pages/s. Capstan runs
   `capstan corpus extract --json FILE` (one process per file, as
   `capstan index` parses files: process start included); pypdf runs
   `PdfReader(FILE).pages[i].extract_text()` in this process.
2. Citations: `capstan index PDF_FOLDER --no-sentence-vectors`, then for every
   `--every`-th page with enough text, 12 words from the middle of its
   pdftotext text are searched (`/v1/search`, hybrid, k 5 via `capstan
   serve`): right when a hit is that file with page_start <= page <= page_end.

    python3 bench/documents_vs_pypdf.py [--every 4] [--skip-search]
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from capstan_serve import serve

HOME = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
DOCS = os.environ.get("CAPSTAN_DOCUMENTS", os.path.join(HOME, "documents"))
BIN = os.environ.get("CAPSTAN_BIN", os.path.join(HOME, "target/release/capstan"))
ENCODER = os.environ.get("CAPSTAN_ENCODER", os.path.join(HOME, "models/all-MiniLM-L6-v2"))


def words(text):
    return [w.lower() for w in re.split(r"[^\w]+", text) if w and w != "_"]


def f1(ours, ref):
    if not ours and not ref:
        return 1.0
    overlap = sum((collections.Counter(ours) & collections.Counter(ref)).values())
    if overlap == 0:
        return 0.0
    p, r = overlap / len(ours), overlap / len(ref)
    return 2 * p * r / (p + r)


def pdftotext_pages(path, pages):
    out = []
    for n in range(1, pages + 1):
        out.append(subprocess.run(["pdftotext", "-f", str(n), "-l", str(n), path, "-"],
                                  capture_output=True, text=True, errors="replace").stdout)
    return out


def page_count(path):
    info = subprocess.run(["pdfinfo", path], capture_output=True, text=True).stdout
    return int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))


def capstan_pages(path):
    start = time.perf_counter()
    out = subprocess.run([BIN, "corpus", "extract", "--json", path], capture_output=True, text=True, check=True)
    secs = time.perf_counter() - start
    result = json.loads(out.stdout)
    if "Err" in result:
        return None, secs, str(result["Err"])
    doc = result["Ok"]
    text, starts = doc["text"], doc["layout"].get("page_starts", [])
    pages = [text[s:(starts[i + 1] if i + 1 < len(starts) else len(text))] for i, s in enumerate(starts)]
    return pages, secs, None


def pypdf_pages(path):
    import pypdf
    start = time.perf_counter()
    try:
        reader = pypdf.PdfReader(path)
        pages = []
        for page in reader.pages:
            try:
                pages.append(page.extract_text() or "")
            except Exception:  # one bad page, as Capstan loses only that page
                pages.append("")
    except Exception as e:
        return None, time.perf_counter() - start, repr(e)
    return pages, time.perf_counter() - start, None


def search_pages(folder, refs, every, index_dir):
    with tempfile.TemporaryDirectory() as tmp:
        index = index_dir or os.path.join(tmp, "index")
        start = time.perf_counter()
        # An existing index of the same files is recognised as up to date.
        subprocess.run([BIN, "index", folder, "--out", index, "--encoder", ENCODER,
                        "--no-sentence-vectors", "-q"], check=True)
        print(f"indexed {folder} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        with serve(index) as port:
            right = total = 0
            misses = []
            for name, pages in sorted(refs.items()):
                for n in range(1, len(pages) + 1, every):
                    w = words(pages[n - 1])
                    if len(w) < 60:
                        continue
                    query = " ".join(w[len(w) // 2:][:12])
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/search",
                                                 data=json.dumps({"query": query, "k": 5}).encode(),
                                                 headers={"Content-Type": "application/json"})
                    hits = json.load(urllib.request.urlopen(req, timeout=60))["hits"]
                    total += 1
                    ok = any(h["doc_id"] == name and h.get("page_start", 0) <= n <= h.get("page_end", 0)
                             for h in hits)
                    right += ok
                    if not ok:
                        misses.append((name, n, query, [(h["doc_id"], h.get("page_start"), h.get("page_end"))
                                                         for h in hits[:2]]))
            return right, total, misses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=4, help="search a sentence of every N-th page")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--index", help="keep the index of the PDFs in this folder (reused when up to date)")
    args = ap.parse_args()
    folder = os.path.join(DOCS, "pdf")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".pdf"))
    rows, refs = [], {}
    totals = {"capstan": [0, 0.0, []], "pypdf": [0, 0.0, []]}
    for name in files:
        path = os.path.join(folder, name)
        n = page_count(path)
        ref = pdftotext_pages(path, n)
        refs[name] = ref
        row = [name, n]
        for engine, fn in (("capstan", capstan_pages), ("pypdf", pypdf_pages)):
            pages, secs, err = fn(path)
            if pages is None:
                scores = [0.0] * n
            else:
                pages = (pages + [""] * n)[:n]
                scores = [f1(words(p), words(r)) for p, r in zip(pages, ref)]
            totals[engine][0] += n
            totals[engine][1] += secs
            totals[engine][2] += scores
            row += [sum(scores) / n, n / secs, err]
        rows.append(row)
    print("| file | pages | Capstan F1 | pypdf F1 | Capstan pages/s | pypdf pages/s |")
    print("|---|---|---|---|---|---|")
    for name, n, cf, cs, ce, pf, ps, pe in rows:
        print(f"| {name} | {n} | {cf:.3f}{' (' + ce + ')' if ce else ''} | {pf:.3f}{' (' + pe + ')' if pe else ''} "
              f"| {cs:.0f} | {ps:.0f} |")
    c, p = totals["capstan"], totals["pypdf"]
    cf, pf = sum(c[2]) / len(c[2]), sum(p[2]) / len(p[2])
    print(f"| **all** | {c[0]} | **{cf:.3f}** | **{pf:.3f}** | **{c[0] / c[1]:.0f}** | **{p[0] / p[1]:.0f}** |")
    share = lambda s: sum(x >= 0.9 for x in s) / len(s)
    print(f"\npages with F1 >= 0.9: Capstan {share(c[2]):.1%}, pypdf {share(p[2]):.1%}; "
          f"speed ratio Capstan/pypdf {(c[0] / c[1]) / (p[0] / p[1]):.2f}x")
    if not args.skip_search:
        right, total, misses = search_pages(folder, refs, args.every, args.index)
        print(f"\nsentences of known pages found on the right file and page by search -k 5: "
              f"{right}/{total} = {right / total:.1%}")
        for m in misses[:15]:
            print("  miss:", m, file=sys.stderr)


if __name__ == "__main__":
    main()
