#!/usr/bin/env python3
"""Retrieval evaluation sets in BEIR format from real text already on this machine.

The retrieval benchmarks so far ran on text and questions this project made
itself, which can flatter whatever was tuned on them. This script builds sets
from text nobody here wrote, present on any Debian machine with a Rust
toolchain, so the numbers can be reproduced offline:

  manpages  the manual pages in /usr/share/man/man{1,5,8}, rendered with groff;
            id = page name and section (`ls.1`), title = the command name(s) of
            the NAME line, text = the page after its NAME section. Pages of
            --skip-packages are left out: by default google-cloud-cli, which
            is not Debian's (Google's own repository, installed in this
            machine image) and whose 16,600 generated, near-template gcloud
            pages would be 91% of the documents and 80% of the passages,
            making the set mostly about one tool and its embedding take hours
            on two cores.
  rustdoc   the Rust book, reference, Cargo book, rustc book, edition guide and
            Rust by Example (the HTML shipped with the toolchain; not the API
            docs, which are near-duplicates of each other); title = first <h1>.

Each set gets two kinds of queries, because they test different things:

  known-item     what a person who knows the page would type: a man page's NAME
                 description with the command name taken out (the description
                 is not in the corpus text), or a section heading (h2/h3, at
                 least 3 words) of a Rust doc page. Mostly lexical, short.
  inverse-cloze  a sentence of 8-40 words taken at random from a document and
                 removed from it in the corpus, so the answer has to be found
                 from the surrounding text rather than by matching the sentence.

A query is kept only if its text occurs verbatim (as a substring, case- and
whitespace-insensitive) in no document but its own, so the single relevant
document in the qrels is the only right answer. Each kind's queries are split 50/50 into
dev and test: fusion defaults are chosen on dev and reported on test.

Layout (one corpus per set, with every inverse-cloze sentence removed; the
known-item queries do not depend on those sentences):

  OUT/<set>/corpus.jsonl                      {"_id","title","text"}
  OUT/<set>/<kind>/corpus.jsonl -> ../corpus.jsonl
  OUT/<set>/<kind>/queries.jsonl              {"_id","text"}
  OUT/<set>/<kind>/qrels/{dev,test}.tsv       query-id, corpus-id, score (1)

Deterministic for a given --seed (same toolchain and Debian packages).

Usage: python3 bench/real_sets.py --out DIR [--sets manpages,rustdoc]
       [--max-docs 30000] [--queries 1000] [--seed 13]
       [--skip-packages google-cloud-cli]
"""
import argparse
import collections
import glob
import gzip
import html.parser
import json
import multiprocessing
import os
import random
import re
import subprocess
import sys

MAN_SECTIONS = ("man1", "man5", "man8")
RUST_BOOKS = ("book", "reference", "cargo", "rustc", "edition-guide", "rust-by-example")
# Stubs pointing at old editions, and translations (the sets are English).
RUST_SKIP_DIRS = ("book/first-edition", "book/second-edition", "book/2018-edition",
                  "rust-by-example/es", "rust-by-example/ja", "rust-by-example/ko",
                  "rust-by-example/zh")
# mdBook's whole-book page and table of contents repeat every chapter.
RUST_SKIP_FILES = ("print.html", "toc.html", "404.html")

MIN_DOC_CHARS = 300
DEDUPE_PREFIX = 2000
SENTENCE_WORDS = (8, 40)
MIN_HEADING_WORDS = 3
MIN_DESCRIPTION_WORDS = 2

# groff without a pager: no hyphenation, and a line length no paragraph
# reaches, so each paragraph comes out as one line. -man loads the man macros
# only at the first .TH, so the preamble loads them itself before emptying the
# header and footer hooks (PT, BT).
GROFF = ["groff", "-k", "-t", "-Tutf8", "-P-cbou", "-rLL=5000n", "-rHY=0"]
GROFF_PREAMBLE = b".mso an-old.tmac\n.de1 PT\n..\n.de1 BT\n..\n"
PAGE_END = "CAPSTANPAGEEND"
MAN_BATCH = 50
# groff -Tutf8 writes hyphens and minus signs as Unicode characters; option
# names read better (and tokenise the same as a query) with ASCII '-'.
# Likewise the bar of option alternatives ([-v | --verbose]).
ASCII = str.maketrans({"\u2010": "-", "\u2011": "-", "\u2212": "-", "\u00ad": None, "\u23aa": "|"})


def squash(s):
    return " ".join(s.split())


def norm(s):
    """The form in which documents are compared for duplicates and queries are
    looked up in documents."""
    return squash(s).lower()


# ---------------------------------------------------------------- man pages

def man_page_source(path):
    """The roff source, or None for an alias page (`.so other.1`)."""
    src = gzip.open(path).read()
    lines = [l for l in src.splitlines() if l.strip() and not l.startswith((b'.\\"', b"'\\\""))]
    if len(lines) <= 2 and any(l.startswith(b".so ") for l in lines):
        return None
    return src


def groff(macros, source):
    res = subprocess.run(GROFF + [macros], input=source, capture_output=True)
    return res.stdout.decode("utf-8", "replace")


def render_batch(paths):
    """Render man pages with one groff process for the whole batch (a process
    per page costs more than the rendering). Pages are separated by a marker
    line; when a page leaves groff in a state that swallows the marker, the
    batch is rendered again a page at a time. mdoc (BSD) pages are always
    rendered alone, with their own macros, which keep their header and footer
    lines (dropped here) and wrap lines at 78 columns. Returns {path: text or
    None}."""
    out, man = {}, {}
    for p in paths:
        src = man_page_source(p)
        if src is None:
            out[p] = None
        elif re.search(rb"^\.Dd", src, re.M):
            lines = [l for l in groff("-mandoc", src).splitlines() if l.strip()]
            out[p] = "\n".join(lines[1:-1])
        else:
            man[p] = src
    marker = b"\n.PP\n" + PAGE_END.encode() + b"\n"
    batch = groff("-man", GROFF_PREAMBLE + b"".join(src + marker for src in man.values()))
    pages = re.split(r"^\s*" + PAGE_END + r"\s*$", batch, flags=re.M)
    if len(pages) == len(man) + 1:
        out.update(zip(man, pages))
    else:
        out.update((p, groff("-man", GROFF_PREAMBLE + src)) for p, src in man.items())
    return out


def man_document(path, rendered):
    """(doc, description) from a rendered page: the NAME section gives the
    title (the names before ' - ') and the description (after it)."""
    name = os.path.basename(path)[:-len(".gz")]
    lines = [squash(l.translate(ASCII)) for l in rendered.splitlines()]
    heading = [bool(l) and not l[0].isspace() for l in rendered.splitlines()]
    title, description, body = name.rsplit(".", 1)[0], None, []
    i = 0
    while i < len(lines):
        if heading[i] and lines[i] == "NAME":
            j = i + 1
            while j < len(lines) and not heading[j]:
                j += 1
            m = re.match(r"(.+?)\s+[-\u2013\u2014]+\s+(.+)", " ".join(l for l in lines[i + 1:j] if l))
            if m:
                title, description = m.group(1), m.group(2)
            i = j
            continue
        if lines[i]:
            body.append(lines[i])
        i += 1
    return {"_id": name, "title": title, "text": "\n".join(body)}, description


def man_candidates(doc, description):
    """The known-item query of a man page: its description without the
    command name(s), which would otherwise match the title outright."""
    if not description:
        return []
    q = description
    names = [doc["title"]] + [n.strip() for n in doc["title"].split(",")]
    for n in sorted({n for n in names if n}, key=len, reverse=True):
        q = re.sub(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", " ", q, flags=re.I)
    q = squash(q).strip(" ,;:-")
    return [q] if len(q.split()) >= MIN_DESCRIPTION_WORDS else []


def package_files(packages):
    files = set()
    for pkg in packages:
        for listing in glob.glob(f"/var/lib/dpkg/info/{pkg}.list") + glob.glob(f"/var/lib/dpkg/info/{pkg}:*.list"):
            with open(listing) as f:
                files.update(l.rstrip("\n") for l in f)
    return files


def load_manpages(args):
    found = sorted(p for s in MAN_SECTIONS for p in glob.glob(f"/usr/share/man/{s}/*.gz")
                   if not os.path.islink(p))
    skipped = package_files(args.skip_packages)
    paths = [p for p in found if p not in skipped]
    batches = [paths[i:i + MAN_BATCH] for i in range(0, len(paths), MAN_BATCH)]
    rendered = {}
    # Two processes: the machine has two cores and is shared.
    with multiprocessing.Pool(2) as pool:
        for part in pool.imap_unordered(render_batch, batches):
            rendered.update(part)
    docs, candidates = [], {}
    for p in paths:
        if rendered[p] is None:
            continue
        doc, description = man_document(p, rendered[p])
        docs.append(doc)
        candidates[doc["_id"]] = man_candidates(doc, description)
    return docs, candidates, (f"{len(found)} pages, {len(found) - len(paths)} of them from "
                              f"{','.join(args.skip_packages) or 'no'} skipped, "
                              f"{len(paths) - len(docs)} alias pages skipped")


# ---------------------------------------------------------------- Rust docs

class PageText(html.parser.HTMLParser):
    """Visible text of an mdBook page: the <main> element when there is one
    (the menu bar outside it has an <h1> of its own), block elements on their
    own lines, the first <h1> as title, the h2/h3 texts."""

    SKIP_TAGS = {"script", "style", "nav", "svg", "button", "noscript", "template", "head"}
    # The reference's rule anchors ([expr.closure.syntax]) and railroad
    # diagrams are navigation, not text.
    SKIP_CLASSES = {"rule", "grammar-railroad"}
    BLOCKS = {"p", "div", "li", "ul", "ol", "pre", "br", "tr", "table", "blockquote", "dt", "dd",
              "dl", "section", "article", "main", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "details",
              "summary", "figure", "figcaption", "header", "footer"}
    HEADINGS = {"h1", "h2", "h3"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.skip_tag, self.skip_depth = None, 0
        self.in_main, self.in_pre = False, 0
        self.parts = {"main": [], "all": []}
        self.heading, self.heading_text = None, []
        self.h1 = {"main": None, "all": None}
        self.subheadings = {"main": [], "all": []}

    def handle_starttag(self, tag, attrs):
        if self.skip_tag:
            self.skip_depth += tag == self.skip_tag
            return
        classes = set((dict(attrs).get("class") or "").split())
        if tag in self.SKIP_TAGS or classes & self.SKIP_CLASSES:
            self.skip_tag, self.skip_depth = tag, 1
            return
        if tag == "main":
            self.in_main = True
        self.in_pre += tag == "pre"
        if tag in self.HEADINGS:
            self.heading, self.heading_text = tag, []
        if tag in self.BLOCKS:
            self._emit("\n")
        elif tag in ("td", "th"):
            self._emit(" ")

    def handle_endtag(self, tag):
        if self.skip_tag:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if not self.skip_depth:
                    self.skip_tag = None
            return
        if tag == self.heading:
            text = squash("".join(self.heading_text))
            for part in ("main", "all") if self.in_main else ("all",):
                if tag != "h1":
                    self.subheadings[part].append(text)
                elif self.h1[part] is None:
                    self.h1[part] = text
            self.heading = None
        if tag in self.BLOCKS:
            self._emit("\n")
        if tag == "main":
            self.in_main = False
        self.in_pre -= tag == "pre" and self.in_pre > 0

    def handle_data(self, data):
        if self.skip_tag:
            return
        if not self.in_pre:
            # Outside <pre>, a newline in the source is just a space.
            data = data.replace("\n", " ")
        if self.heading:
            self.heading_text.append(data)
        self._emit(data)

    def _emit(self, s):
        self.parts["all"].append(s)
        if self.in_main:
            self.parts["main"].append(s)

    def result(self):
        """(title, text, h2/h3 texts)"""
        part = "main" if self.parts["main"] else "all"
        raw = "".join(self.parts[part])
        text = "\n".join(l for l in (squash(l) for l in raw.splitlines()) if l)
        return self.h1[part], text, self.subheadings[part]


def rust_document(args):
    root, path = args
    page = PageText()
    with open(path, encoding="utf-8", errors="replace") as f:
        page.feed(f.read())
    page.close()
    doc_id = os.path.relpath(path, root)[:-len(".html")]
    h1, text, subheadings = page.result()
    title = h1 or doc_id
    # The title is a field of its own; leave it out of the text so that the
    # text of stub pages (and their duplicates) compares equal.
    if h1 and text.startswith(h1):
        text = text[len(h1):].lstrip("\n")
    headings = [h for h in subheadings
                if len(h.split()) >= MIN_HEADING_WORDS and norm(h) != norm(title)]
    return {"_id": doc_id, "title": title, "text": text}, headings


def load_rustdoc(args):
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], check=True, capture_output=True,
                             text=True).stdout.strip()
    root = os.path.join(sysroot, "share", "doc", "rust", "html")
    paths = []
    for book in RUST_BOOKS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, book)):
            rel = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if os.path.join(rel, d) not in RUST_SKIP_DIRS)
            paths += [os.path.join(dirpath, f) for f in sorted(filenames)
                      if f.endswith(".html") and f not in RUST_SKIP_FILES]
    with multiprocessing.Pool(2) as pool:
        parsed = pool.map(rust_document, [(root, p) for p in paths], chunksize=32)
    return [d for d, _ in parsed], {d["_id"]: h for d, h in parsed}, f"{len(paths)} pages"


# ---------------------------------------------------------------- set building

def dedupe(docs):
    """Drop short documents, exact duplicates, and documents whose first
    DEDUPE_PREFIX characters equal an earlier one's (docs come sorted by id,
    so which copy survives is fixed)."""
    seen_full, seen_prefix, kept = set(), set(), []
    for d in docs:
        t = norm(d["text"])
        if len(t) < MIN_DOC_CHARS or t in seen_full or t[:DEDUPE_PREFIX] in seen_prefix:
            continue
        seen_full.add(t)
        seen_prefix.add(t[:DEDUPE_PREFIX])
        kept.append(d)
    return kept


class Occurrences:
    """Which documents contain a phrase verbatim (case- and whitespace-
    insensitive). An inverted index of words narrows the documents to scan."""

    def __init__(self, docs):
        self.ids = [d["_id"] for d in docs]
        self.texts = [norm(d["title"] + "\n" + d["text"]) for d in docs]
        self.postings = collections.defaultdict(list)
        for i, t in enumerate(self.texts):
            for w in set(re.findall(r"\w+", t)):
                self.postings[w].append(i)

    def count(self, phrase):
        """{doc_id: occurrences} for the documents containing phrase, as a
        substring ("configuration tool" is in "configuration tools")."""
        p = norm(phrase)
        words = re.findall(r"\w+", p)
        # Only words with a non-word character on both sides within the phrase
        # must be whole words of a document that contains it.
        if words and re.match(r"\w", p):
            words = words[1:]
        if words and re.search(r"\w$", p):
            words = words[:-1]
        if words:
            lists = sorted((self.postings.get(w, []) for w in words), key=len)
            cand = set(lists[0]).intersection(*lists[1:])
        else:
            cand = range(len(self.texts))
        return {self.ids[i]: self.texts[i].count(p) for i in sorted(cand) if p in self.texts[i]}


def sentences(text):
    """Sentences of 8-40 words within one line each, starting with a capital
    letter and ending in . ! or ? (which leaves out most code, option lists
    and fragments)."""
    out = []
    for line in text.splitlines():
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", line):
            if (s[0].isupper() and s[-1] in ".!?"
                    and SENTENCE_WORDS[0] <= len(s.split()) <= SENTENCE_WORDS[1]):
                out.append(s)
    return out


def pick_queries(docs, candidates, occ, n, rng, once_in_own):
    """Up to n (doc_id, query) pairs: documents in random order, for each a
    random candidate that is no other document's candidate too and that no
    other document contains (once_in_own: that its own document contains
    exactly once, so that removing it leaves no copy). Only as many candidates
    are checked as needed."""
    duplicates = collections.Counter(norm(q) for qs in candidates.values() for q in set(qs))
    order = [d["_id"] for d in docs]
    rng.shuffle(order)
    picked = []
    for doc_id in order:
        if len(picked) == n:
            break
        cands = list(candidates.get(doc_id, []))
        rng.shuffle(cands)
        for q in cands:
            if duplicates[norm(q)] > 1:
                continue
            found = occ.count(q)
            if set(found) - {doc_id} or (once_in_own and found.get(doc_id) != 1):
                continue
            picked.append((doc_id, q))
            break
    return picked


def remove_sentence(text, s):
    """text without s, what stood either side of it joined by one space, or by
    the line break that was there."""
    i = text.index(s)
    before, after = text[:i].rstrip(" "), text[i + len(s):].lstrip(" ")
    if before and after and not before.endswith("\n") and not after.startswith("\n"):
        return before + " " + after
    return (before + after).replace("\n\n", "\n").strip("\n")


def write_set(out_dir, name, docs, queries, seed):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "corpus.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    for kind, picked in queries.items():
        kdir = os.path.join(out_dir, kind)
        os.makedirs(os.path.join(kdir, "qrels"), exist_ok=True)
        link = os.path.join(kdir, "corpus.jsonl")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.join("..", "corpus.jsonl"), link)
        prefix = "ki" if kind == "known-item" else "ic"
        rows = [(f"{prefix}-{i:04d}", doc_id, q) for i, (doc_id, q) in enumerate(picked)]
        with open(os.path.join(kdir, "queries.jsonl"), "w") as f:
            for qid, _, q in rows:
                f.write(json.dumps({"_id": qid, "text": q}, ensure_ascii=False) + "\n")
        split = rows[:]
        random.Random(f"{seed}-{name}-{kind}-split").shuffle(split)
        half = len(split) // 2
        for part, part_rows in (("dev", split[:half]), ("test", split[half:])):
            with open(os.path.join(kdir, "qrels", f"{part}.tsv"), "w") as f:
                f.write("query-id\tcorpus-id\tscore\n")
                for qid, doc_id, _ in sorted(part_rows):
                    f.write(f"{qid}\t{doc_id}\t1\n")


def build(name, loader, args):
    docs, known_item, found = loader(args)
    docs.sort(key=lambda d: d["_id"])
    before = len(docs)
    docs = dedupe(docs)
    after = len(docs)
    if len(docs) > args.max_docs:
        docs = sorted(random.Random(f"{args.seed}-{name}-docs").sample(docs, args.max_docs),
                      key=lambda d: d["_id"])
    occ = Occurrences(docs)

    # Inverse-cloze first: its sentences are removed from the corpus, and the
    # known-item check against the unmodified texts stays valid (removing text
    # cannot add an occurrence).
    cloze = {d["_id"]: sentences(d["text"]) for d in docs}
    picked_cloze = pick_queries(docs, cloze, occ, args.queries,
                                random.Random(f"{args.seed}-{name}-inverse-cloze"), True)
    by_id = {d["_id"]: d for d in docs}
    for doc_id, s in picked_cloze:
        by_id[doc_id]["text"] = remove_sentence(by_id[doc_id]["text"], s)

    ki = {i: known_item.get(i, []) for i in by_id}
    picked_ki = pick_queries(docs, ki, occ, args.queries,
                             random.Random(f"{args.seed}-{name}-known-item"), False)

    write_set(os.path.join(args.out, name), name, docs,
              {"known-item": picked_ki, "inverse-cloze": picked_cloze}, args.seed)
    print(f"{name}: {found}; {before} documents, {after} after dedupe, {len(docs)} kept; "
          f"queries: known-item {len(picked_ki)}, inverse-cloze {len(picked_cloze)}", flush=True)


LOADERS = {"manpages": load_manpages, "rustdoc": load_rustdoc}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sets", default="manpages,rustdoc")
    ap.add_argument("--max-docs", type=int, default=30000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--skip-packages", default="google-cloud-cli",
                    help="comma-separated Debian packages whose man pages are left out ('' for none)")
    args = ap.parse_args()
    args.skip_packages = [p for p in args.skip_packages.split(",") if p]
    args.out = os.path.expanduser(args.out)
    for name in args.sets.split(","):
        if name not in LOADERS:
            sys.exit(f"unknown set {name!r}; known: {', '.join(LOADERS)}")
    for name in args.sets.split(","):
        build(name, LOADERS[name], args)


if __name__ == "__main__":
    main()
