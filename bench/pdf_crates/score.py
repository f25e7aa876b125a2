#!/usr/bin/env python3
"""Score per-page extraction (out/{engine}/{stem}.json) against
`pdftotext -f N -l N FILE -` (reading-order mode), cached in out/ref/{stem}.json.

Tokens: lowercase, split on non-alphanumerics (Unicode-aware; '_' is a separator).
Page F1: multiset (Counter) overlap. Pages the engine lacks score 0; both-empty scores 1.
Extra diagnostics: bigram F1 (order proxy), glued tokens (engine token == two adjacent
reference tokens concatenated: missing space), split tokens (reference token == two adjacent
engine tokens: spurious space), ligature codepoints U+FB00-FB06, U+FFFD, hyphen-at-EOL count.
usage: score.py [engines...]
"""
import json, os, re, subprocess, sys, glob
from collections import Counter

OUT = os.environ.get("PDFCMP_OUT", "/tmp/pdfcmp/out")
PDFS = sorted(glob.glob(os.path.join(os.environ["PDFCMP_PDFS"], "*.pdf")))
TOK = re.compile(r"[^\W_]+", re.UNICODE)


def toks(s):
    return TOK.findall(s.lower())


def f1(a, b):
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    ov = sum((Counter(a) & Counter(b)).values())
    if ov == 0:
        return 0.0
    p, r = ov / len(a), ov / len(b)
    return 2 * p * r / (p + r)


def pdfinfo_pages(f):
    o = subprocess.run(["pdfinfo", f], capture_output=True, text=True).stdout
    return int(re.search(r"^Pages:\s+(\d+)", o, re.M).group(1))


def ref(f):
    stem = os.path.splitext(os.path.basename(f))[0]
    p = f"{OUT}/ref/{stem}.json"
    if os.path.exists(p):
        return json.load(open(p))
    n = pdfinfo_pages(f)
    pages = [subprocess.run(["pdftotext", "-f", str(i), "-l", str(i), f, "-"],
                            capture_output=True, text=True, errors="replace").stdout
             for i in range(1, n + 1)]
    os.makedirs(f"{OUT}/ref", exist_ok=True)
    json.dump({"n_pages": n, "pages": pages}, open(p, "w"))
    return {"n_pages": n, "pages": pages}


def diag(h, r):
    ht, rt = toks(h), toks(r)
    rset, hset = set(rt), set(ht)
    rcat = {rt[i] + rt[i + 1] for i in range(len(rt) - 1)}
    hcat = {ht[i] + ht[i + 1] for i in range(len(ht) - 1)}
    glued = sum(1 for t in ht if t not in rset and t in rcat)
    split = sum(1 for t in rt if t not in hset and t in hcat)
    return glued, split, len(ht)


def main(engines):
    rows = []
    for eng in engines:
        pf1, pbf1, npages, secs = [], [], 0, 0.0
        glued = split = ntok = lig = fffd = hyph = 0
        fails, count_mismatch = [], []
        per_file = {}
        for f in PDFS:
            stem = os.path.splitext(os.path.basename(f))[0]
            R = ref(f)
            npages += R["n_pages"]
            j = json.load(open(f"{OUT}/{eng}/{stem}.json"))
            secs += j.get("secs", 0.0)
            why = j.get("error") or (j.get("panic") and "PANIC: " + j["panic"]) \
                or (j.get("hang") and "HANG") or j.get("crash")
            if why:
                fails.append(f"{stem}: {why}")
            if j.get("page_errors"):
                fails.append(f"{stem}: {len(j['page_errors'])} page errors, e.g. {j['page_errors'][0]}")
            if j["n_pages"] != R["n_pages"]:
                count_mismatch.append(f"{stem} {j['n_pages']}/{R['n_pages']}")
            fs = []
            for i in range(R["n_pages"]):
                h = j["pages"][i] if i < len(j["pages"]) else ""
                r = R["pages"][i]
                a, b = toks(h), toks(r)
                fs.append(f1(a, b))
                pbf1.append(f1(list(zip(a, a[1:])), list(zip(b, b[1:]))))
                g, s, n = diag(h, r)
                glued += g; split += s; ntok += n
                lig += sum(1 for c in h if "\ufb00" <= c <= "\ufb06")
                fffd += h.count("\ufffd")
                hyph += len(re.findall(r"\w-\n\w", h))
            pf1 += fs
            per_file[stem] = sum(fs) / len(fs)
        ok_pages = sum(1 for x in pf1 if x >= 0.9)
        rows.append(dict(engine=eng, mean_f1=sum(pf1) / len(pf1), frac90=ok_pages / len(pf1),
                         bigram_f1=sum(pbf1) / len(pbf1), pages=npages, secs=secs,
                         pps=npages / secs if secs else 0, glued_per_1k=1000 * glued / max(ntok, 1),
                         split_per_1k=1000 * split / max(ntok, 1), lig=lig, fffd=fffd, hyph_eol=hyph,
                         fails=fails, count_mismatch=count_mismatch, per_file=per_file))
    # reference hyphen count for comparison
    rh = sum(len(re.findall(r"\w-\n\w", p)) for f in PDFS for p in ref(f)["pages"])
    print(f"reference (pdftotext): pages={sum(ref(f)['n_pages'] for f in PDFS)} hyph_eol={rh}")
    print(f"{'engine':12} {'meanF1':>7} {'F1>=.9':>7} {'bigrF1':>7} {'pages/s':>8} {'glue/1k':>8} {'split/1k':>8} {'lig':>5} {'fffd':>5} {'hyphEOL':>7}")
    for r in rows:
        print(f"{r['engine']:12} {r['mean_f1']:7.3f} {r['frac90']:7.3f} {r['bigram_f1']:7.3f} {r['pps']:8.0f} "
              f"{r['glued_per_1k']:8.2f} {r['split_per_1k']:8.2f} {r['lig']:5d} {r['fffd']:5d} {r['hyph_eol']:7d}")
    for r in rows:
        print(f"\n[{r['engine']}] extraction secs={r['secs']:.2f}; page-count mismatches: {r['count_mismatch'] or 'none'}")
        for x in r["fails"]:
            print("  FAIL", x)
        print("  per-file mean F1:", " ".join(f"{k}={v:.2f}" for k, v in r["per_file"].items()))
    json.dump(rows, open(f"{OUT}/scores.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:] or ["lopdf", "pdfextract", "oxide", "oxide_plain"])
