#!/usr/bin/env python3
"""Two more short-answer question sets from real text already on this machine.

bench/real_qa.py makes its questions from man pages; this script makes two
more sets in the same format, one from records of fields and one from prose,
reusing real_qa.py's rewording (synonym table, verb inflection) and
real_sets.py's Rust book parser:

  records   one document per package record, rendered as "Key: value" lines
            (values verbatim, human-readable keys), title = the record's name:
              crates    [package] of every Cargo.toml under
                        ~/.cargo/registry/src/*/ (read with tomllib; the
                        highest version of each crate name): Name, Version,
                        Authors (joined by ", "), Description, License,
                        Repository, Homepage, Documentation, Edition,
                        Rust version, Keywords, Categories; id `crate:NAME`
              python    every */METADATA of every *.dist-info in python3's
                        site-packages: Name, Version, Summary, Homepage,
                        Author, Author email, Maintainer, License (one line of
                        at most 100 characters), Requires Python, one line per
                        Project-URL ("Source: https://..."); id `python:NAME`
              appstream Debian's AppStream metadata
                        /var/lib/apt/lists/*dep11_Components-amd64.yml.gz
                        (PyYAML), English (C) texts: Name, Package, Summary,
                        Homepage, License, Developer, Categories, then the
                        Description as a paragraph (HTML tags dropped, list
                        items as "- " lines); id `appstream:ID`
            (not Debian's binary Packages lists: those are a set of their own,
            bench/packages_set.py, so that each source can be left out of a fit
            and tried on). Records
            with fewer than three fields are left out.
            Questions, one per record, by field:
    author      "Who wrote the X crate?" / "Who created ...?" / "Who is behind
                ...?" (answers: each author's name without its <email>)
    license     "Under what terms is X distributed?", "Which licence ...?"
    homepage    "Where can I find X on the web?", "What is X's website?"
    repository  "Where is the source code of X hosted?"
    version     "Which release of X is described?"
    python      "What is the oldest Python that X supports?" (Requires-Python)
    rust        "Which Rust compiler release does X need at least?" (rust-version)
    edition     "Which Rust edition is X written in?"
    name        the record named by its summary reworded: "Which crate
                serializes ...?", "Which application is the image viewer for
                GNOME?" (answer: the name)
            Each kind has several phrasings (picked by a stable hash of the
            record), most of them not using the key's own word. A question
            that names a record is only made if no other record of the set has
            that name; a "name" question only if no other record has the same
            summary.
  prose     documents of three sources, deduped together (real_sets.py's
            dedupe), text cut to the first --max-chars characters on whole
            lines, as real_qa.py cuts man pages:
              rust    the pages of the Rust books (real_sets.py's rustdoc set:
                      The Book, Reference, Cargo book, rustc book, edition
                      guide, Rust by Example); id = path, title = <h1>;
                      <code> and <em> spans are located in the HTML
              pydoc   one document per module of python3's standard library
                      (sys.stdlib_module_names and their submodules, not
                      private or test ones nor PYDOC_SKIP), as
                      pydoc.plaintext.document renders it in a separate
                      `python3 -S` with an empty environment: only the NAME,
                      DESCRIPTION, CLASSES and FUNCTIONS sections, classes
                      without inherited members, data/descriptor blocks,
                      method resolution orders and __dunder__ methods, memory
                      addresses taken out; id `pydoc:MODULE`, title = MODULE
              doc     READMEs and manuals under /usr/share/doc (README*,
                      *.md, *.markdown, *.txt, *.rst, gzipped or not; not
                      changelogs, news, history, copyright, licence, authors,
                      thanks, code-of-conduct or contributor files, examples
                      directories or HTML), UTF-8, mostly sentences (half the
                      non-blank lines with 5+ words, 5+ lines); Markdown's
                      markup dropped and its `code` / *em* spans marked;
                      id `doc:PATH`, title = "PACKAGE FILE"
            Questions from sentences of the kept text (all sources):
    command     a sentence whose subject is a code span naming a command
                ("`cargo build` compiles your project ..." -> "Which command
                compiles a project ...?"; answer: the code span)
    item        the same with any other code span as subject, typed by the noun
                after it when there is one ("The `?` operator returns ..." ->
                "Which operator returns ...?"), else "What ...?"
    entry       "`X`: verb ..." / "`X` - verb ..." -> "What verbs ...?"
    definition  "X is called *Y*" / "X is known as Y" / "..., called *Y*" ->
                "What do we call X?" (answer: the <em> span, or 1-4
                plain words after "known as" / "referred to as"; not when X
                is "a new project" and the like, which names an example)
    number      "X has N Y" -> "How many Y does X have?"; "X is N bytes" ->
                "How many bytes is X?" (not N = one or zero); "X was stabilized
                in Rust 1.N" -> "In which Rust release was X stabilized?";
                "X defaults to N" -> "What is the default value of X?"
                (answer: the number as written)
            and, for pydoc documents, from its entries:
    module      the NAME line's summary "shlex - A lexical analyzer class ..."
                -> "Which standard Python module is a lexical analyzer class
                ...?" / "Which module of Python's standard library {verbs}
                ...?" (answer: the module name)
    function    a FUNCTIONS entry whose docstring opens with a verb ("Return
                the size of a file" for getsize) -> "Which function of the
                posixpath module returns the size of some file?" / "Which
                {m} function would I call to {verb} ...?" (answer: its name)
    method      the same for a class's own method: "Which method of {C} in
                {m} ...?", "In the {m} module, which {C} method ...?"
    class       a class docstring: "Raised when ..." of an exception ->
                "Which exception does {m} raise when ...?"; a verb ->
                "Which class of the {m} module {verbs} ...?"; a noun phrase
                -> "Which class of the {m} module is a ...?"
    default     "P defaults to V" / "The default for P is V" / "If P is not
                given, it defaults to V" in the docstring of a function with
                parameter P (V a number, True/False/None or a quoted word) ->
                "What does the P argument of f in m default to?"
    signature   a parameter default in the rendered signature, a number other
                than 0/1/-1 or a quoted string of 2-20 characters
                ("fill(text, width=70, ...)") -> "What is the default value
                of the width parameter of fill in the textwrap module?"
                (answer: the default as printed)
            An entry's clause is used only if no other entry of the module
            has the same one; builtin classes documented again in another
            module are skipped, and an answer that is the question's words
            run together ("BufferError" for "a buffer error") is dropped.
            The predicate is reworded as real_qa.py rewords descriptions: the
            first clause only, verbs inflected and swapped, words swapped from
            its synonym table (plus "your" -> "a"); a clause that still shares
            a run of words with the page is cut shorter (at least 3 words).
            A prose question that reads as cut mid-clause is dropped (the
            counts are printed): one ending in a function word (preposition,
            article, conjunction, modal, possessive, "such", "than" ...; not
            "default to?"), ending in a verb that needs an object right after
            "to"/"one"/"can"/... ("Which command permits one to install?"),
            with an if/when/whether/while/unless/because clause that has no
            verb ("... returns True if all characters?"), or with a verb of
            placing (put, place, insert, move, attach, append, prepend,
            assign, store) and no place after it ("... to put the resulting
            binary?").

A question is kept only if each answer (1-5 words for prose) occurs verbatim
(case-sensitive) in its document's text and none occurs in the question (as a
whole word, case-insensitive), and the question shares no run of 6
consecutive words with its document (title + text). For records, each answer
must also occur in at most 20 documents of the corpus; for prose that is only
preferred, as real_qa.py does. Documents are visited in a seeded random order
and from each one question is taken, of the template used least so far. The
questions are shuffled (seeded) and split into dev (--dev) and test (--test),
one question per document, so no document is in both; the files keep the
shuffled order, so a prefix is a random sample.

Corpus: every document of the set's source that passes the filters, at most
--max-docs (the question documents always kept, the rest drawn at random).

Layout:
  OUT/<set>/corpus.jsonl                  {"_id","title","text"}
  OUT/<set>/dev.jsonl, OUT/<set>/test.jsonl
                                          {"question","answers","doc_id","template"}

Deterministic for a given --seed (same crates, Python packages and
interpreter, Debian lists and packages, and toolchain).

Usage: python3 bench/real_answer_sets.py --out DIR [--sets records,prose]
       [--seed 7] [--dev 150] [--test 250] [--max-docs 4000] [--max-chars 6000]
"""
import argparse
import builtins
import collections
import email.parser
import glob
import gzip
import html
import json
import multiprocessing
import os
import random
import re
import site
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_qa as rq  # noqa: E402
import real_sets as rs  # noqa: E402

MAX_ANSWER_DOCS = 20
APPSTREAM = "/var/lib/apt/lists/*dep11_Components-amd64.yml.gz"
CRATES = "~/.cargo/registry/src/*/*/Cargo.toml"

# ---------------------------------------------------------------- shared


def debian_file(package, path, cache):
    """`/path` of a Debian package where the package is installed; else the package is fetched
    once with `apt-get download` into `cache` and unpacked there (dpkg-deb), and its copy of
    the file is returned."""
    if os.path.exists("/" + path):
        return "/" + path
    root = os.path.join(cache, package)
    unpacked = os.path.join(root, path)
    if os.path.exists(unpacked):
        return unpacked
    os.makedirs(root, exist_ok=True)
    subprocess.run(["apt-get", "download", package], cwd=cache, check=True)
    deb = sorted(glob.glob(os.path.join(cache, f"{package}_*.deb")))[-1]
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return unpacked


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


# ---------------------------------------------------------------- records

def one_line(v):
    return rs.squash(str(v)) if v is not None else ""


def version_key(v):
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+-]", v)]


def load_crates():
    best = {}
    for path in sorted(glob.glob(os.path.expanduser(CRATES))):
        try:
            with open(path, "rb") as f:
                pkg = tomllib.load(f).get("package", {})
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
            continue
        name, version = pkg.get("name"), pkg.get("version")
        if not isinstance(name, str) or not isinstance(version, str):
            continue
        if name in best and version_key(best[name]["version"]) >= version_key(version):
            continue
        best[name] = pkg
    records = []
    for name, pkg in sorted(best.items()):
        def s(k):
            v = pkg.get(k)
            return one_line(v) if isinstance(v, (str, int)) else ""

        def lst(k):
            v = pkg.get(k)
            return [one_line(x) for x in v if isinstance(x, str)] if isinstance(v, list) else []
        authors = lst("authors")
        fields = [("Name", name), ("Version", s("version")), ("Authors", ", ".join(authors)),
                  ("Description", s("description")), ("License", s("license")),
                  ("Repository", s("repository")), ("Homepage", s("homepage")),
                  ("Documentation", s("documentation")), ("Edition", s("edition")),
                  ("Rust version", s("rust-version")), ("Keywords", ", ".join(lst("keywords"))),
                  ("Categories", ", ".join(lst("categories")))]
        names = [re.sub(r"\s*<[^>]*>\s*$", "", a).strip() for a in authors]
        records.append({"_id": f"crate:{name}", "kind": "crate", "name": name, "fields": fields,
                        "authors": [n for n in names if n and "@" not in n],
                        "summary": s("description"), "python": "", "rust": s("rust-version"),
                        "edition": s("edition")})
    return records


def person_names(value):
    """Names in "A <a@x>, B <b@y>" or "A, B and C" (no emails)."""
    names = []
    for part in re.split(r",\s*|\s+and\s+", value):
        n = re.sub(r"<[^>]*>", "", part).strip().strip('"')
        if n and "@" not in n and len(n.split()) <= 5:
            names.append(n)
    return names


def load_python():
    dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(d)]
    records, seen = [], set()
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.dist-info", "METADATA"))):
            with open(path, encoding="utf-8", errors="replace") as f:
                msg = email.parser.HeaderParser().parse(f)
            name = one_line(msg.get("Name"))
            if not name or name.lower() in seen:
                continue
            seen.add(name.lower())

            def g(k):
                v = msg.get(k)
                v = one_line(v) if v else ""
                return "" if v in ("UNKNOWN", "None") else v
            lic = g("License")
            if len(lic) > 100:
                lic = ""
            fields = [("Name", name), ("Version", g("Version")), ("Summary", g("Summary")),
                      ("Homepage", g("Home-page")), ("Author", g("Author")),
                      ("Author email", g("Author-email")), ("Maintainer", g("Maintainer")),
                      ("License", lic), ("Requires Python", g("Requires-Python"))]
            urls = []
            for pu in msg.get_all("Project-URL") or []:
                label, _, url = one_line(pu).partition(",")
                if url.strip():
                    fields.append((label.strip(), url.strip()))
                    urls.append((label.strip().lower(), url.strip()))
            authors = person_names(g("Author")) + person_names(g("Author-email"))
            records.append({"_id": f"python:{name}", "kind": "python", "name": name,
                            "fields": fields, "authors": list(dict.fromkeys(authors)),
                            "summary": g("Summary"), "python": g("Requires-Python"),
                            "rust": "", "edition": "", "urls": urls})
    return records


APPSTREAM_NOUN = {"desktop-application": "application", "console-application": "command-line tool",
                  "addon": "add-on", "font": "font", "inputmethod": "input method",
                  "codec": "codec", "web-application": "web application"}


def english(v):
    if isinstance(v, dict):
        v = v.get("C") or v.get("en") or v.get("en_US") or v.get("en_GB")
    return one_line(v) if isinstance(v, str) else ""


def description_text(markup):
    if not isinstance(markup, str):
        return ""
    t = re.sub(r"<li>\s*", "\n- ", markup)
    t = re.sub(r"</?(p|ul|ol)>", "\n", t)
    t = html.unescape(re.sub(r"<[^>]+>", "", t))
    return "\n".join(rs.squash(l) for l in t.splitlines() if l.strip())


def raw_description(v):
    if isinstance(v, dict):
        v = v.get("C") or v.get("en")
    return v if isinstance(v, str) else ""


def load_appstream():
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    records, seen = [], collections.Counter()
    for path in sorted(glob.glob(APPSTREAM)):
        with gzip.open(path) as f:
            for comp in yaml.load_all(f, Loader=loader):
                if not isinstance(comp, dict) or "ID" not in comp or comp.get("Type") == "File":
                    continue
                name = english(comp.get("Name"))
                if not name:
                    continue
                url = comp.get("Url") or {}
                homepage = one_line(url.get("homepage")) if isinstance(url, dict) else ""
                developer = english(comp.get("DeveloperName"))
                cats = comp.get("Categories") or []
                fields = [("Name", name), ("Package", one_line(comp.get("Package"))),
                          ("Summary", english(comp.get("Summary"))), ("Homepage", homepage),
                          ("License", one_line(comp.get("ProjectLicense"))),
                          ("Developer", developer),
                          ("Categories", ", ".join(one_line(c) for c in cats if isinstance(c, str)))]
                cid = one_line(comp["ID"])
                seen[cid] += 1
                rid = f"appstream:{cid}" + (f"#{seen[cid]}" if seen[cid] > 1 else "")
                records.append({"_id": rid, "kind": "appstream", "name": name, "fields": fields,
                                "authors": [n for n in person_names(developer) if n in developer]
                                if developer and len(developer.split()) <= 8 else [], "summary": english(comp.get("Summary")),
                                "python": "", "rust": "", "edition": "",
                                "noun": APPSTREAM_NOUN.get(comp.get("Type"), "component"),
                                "description": description_text(raw_description(comp.get("Description")))})
    return records


def record_document(r):
    lines = [f"{k}: {v}" for k, v in r["fields"] if v]
    text = "\n".join(lines)
    if r.get("description"):
        text += "\n\n" + r["description"]
    return {"_id": r["_id"], "title": r["name"], "text": text}


def field(r, *keys):
    for k in keys:
        for fk, v in r["fields"]:
            if fk.lower() == k.lower() and v:
                return v
    return ""


# {x}: how the record is named in a question.
REC_TEMPLATES = {
    "author": ["Who wrote {x}?", "Who created {x}?", "Who is behind {x}?",
               "Who are the people responsible for {x}?", "Who developed {x}?"],
    "license": ["Under what terms is {x} distributed?", "Which licence does {x} use?",
                "What licensing terms apply to {x}?", "Under which licence is {x} released?",
                "What are the legal terms for using {x}?"],
    "homepage": ["Where can I find {x} on the web?", "What is the website of {x}?",
                 "Which web address is the home of {x} on the internet?", "What URL describes {x}?"],
    "repository": ["Where is the source code of {x} hosted?", "Where can I get the code for {x}?",
                   "Which URL holds the sources of {x}?", "Where is {x} developed?"],
    "version": ["Which release of {x} is described?", "What is the release number of {x}?",
                "Which release of {x} does this record describe?"],
    "python": ["What is the oldest Python that {x} supports?",
               "Which Python interpreters can run {x}?",
               "What Python is needed to install {x}?"],
    "rust": ["Which Rust compiler release does {x} need at least?",
             "What is the oldest toolchain that can build {x}?",
             "What is the MSRV of {x}?"],
    "edition": ["Which Rust edition is {x} written in?", "What language edition does {x} target?"],
}
NAME_TEMPLATES_VERB = ["Which {noun} {v3}?", "What is the name of the {noun} that {v3}?",
                       "Which {noun} can I use to {bare}?"]
NAME_TEMPLATES_NP = ["Which {noun} is the {np}?", "What is the name of the {np}?",
                     "Which {noun} provides the {np}?"]


def named(r):
    if r["kind"] == "crate":
        return rq.stable_pick(["the {} crate", "the Rust crate {}", "{}"], r["_id"]).format(r["name"])
    if r["kind"] == "python":
        return rq.stable_pick(["the Python package {}", "the {} package", "{}"],
                              r["_id"]).format(r["name"])
    return rq.stable_pick(["{}", "the {} {}"], r["_id"]).format(r["name"], r["noun"])


def record_candidates(r, unique_name, unique_summary):
    cands = []

    def add(template, question, answers):
        answers = [a for a in dict.fromkeys(answers) if a]
        if answers:
            cands.append({"template": template, "question": question, "answers": answers})
    x = named(r)
    key = r["_id"]
    if unique_name:
        def q(t):
            s = rq.stable_pick(REC_TEMPLATES[t], key + t).format(x=x)
            return s[0].upper() + s[1:]
        add("author", q("author"), r["authors"])
        add("license", q("license"), [field(r, "License")])
        add("homepage", q("homepage"), [field(r, "Homepage")])
        repo = field(r, "Repository", "Source", "Source Code", "Repository URL", "Code")
        if repo and repo != field(r, "Homepage"):
            add("repository", q("repository"), [repo])
        if r["kind"] != "appstream":
            add("version", q("version"), [field(r, "Version")])
        add("python", q("python"), [r["python"]])
        add("rust", q("rust"), [r["rust"]])
        add("edition", q("edition"), [r["edition"]])
    if unique_summary and r["summary"]:
        noun = {"crate": "crate", "python": "Python package"}.get(r["kind"]) or r["noun"]
        clause = rq.first_clause(r["summary"])
        if clause:
            vf = rq.verb_forms(clause)
            np = None if vf else rq.noun_phrase(clause)
            if vf:
                add("name", rq.stable_pick(NAME_TEMPLATES_VERB, key).format(
                    noun=noun, v3=vf[0], bare=vf[1]), [r["name"]])
            elif np:
                add("name", rq.stable_pick(NAME_TEMPLATES_NP, key).format(noun=noun, np=np),
                    [r["name"]])
    return cands


def build_records(args):
    records = load_crates() + load_python() + load_appstream()
    counts = collections.Counter(r["kind"] for r in records)
    records = [r for r in records if sum(1 for _, v in r["fields"] if v) >= 3]
    docs = [record_document(r) for r in records]
    print("records: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
          + f"; {len(docs)} with 3+ fields", flush=True)
    names = collections.Counter(rs.norm(r["name"]) for r in records)
    summaries = collections.Counter(rs.norm(r["summary"]) for r in records if r["summary"])
    cands = {}
    for r, d in zip(records, docs):
        grams = rq.ngrams(rq.words(d["title"] + "\n" + d["text"]))
        cs = record_candidates(r, names[rs.norm(r["name"])] == 1,
                               bool(r["summary"]) and summaries[rs.norm(r["summary"])] == 1)
        cands[d["_id"]] = [dict(c, doc_id=d["_id"]) for c in cs if check(c, d, grams)]
    pick_and_write("records", docs, cands, args, strict=True)


# ---------------------------------------------------------------- prose

CODE_OPEN, CODE_CLOSE, EM_OPEN, EM_CLOSE = "\x01", "\x02", "\x03", "\x04"
MARKS = CODE_OPEN + CODE_CLOSE + EM_OPEN + EM_CLOSE
UNMARK = str.maketrans("", "", MARKS)


class MarkedPage(rs.PageText):
    """real_sets.py's page text, with <code> (outside <pre>) and <em>/<strong>/
    <dfn> spans marked by control characters."""

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        if self.skip_tag:
            return
        if tag == "code" and not self.in_pre:
            self._emit(CODE_OPEN)
        elif tag in ("em", "strong", "dfn", "i") and not self.in_pre:
            self._emit(EM_OPEN)

    def handle_endtag(self, tag):
        if not self.skip_tag:
            if tag == "code" and not self.in_pre:
                self._emit(CODE_CLOSE)
            elif tag in ("em", "strong", "dfn", "i") and not self.in_pre:
                self._emit(EM_CLOSE)
        super().handle_endtag(tag)


def marked_document(job):
    root, path = job
    page = MarkedPage()
    with open(path, encoding="utf-8", errors="replace") as f:
        page.feed(f.read())
    page.close()
    h1, marked, _ = page.result()
    doc_id = os.path.relpath(path, root)[:-len(".html")]
    lines = marked.splitlines()
    if h1 and lines and rs.squash(lines[0].translate(UNMARK)) == h1:
        lines = lines[1:]
    # real_sets.rust_document strips the title as a prefix of the text.
    marked = "\n".join(lines)
    return {"_id": doc_id, "title": h1 or doc_id, "text": marked.translate(UNMARK), "marked": marked}


def load_marked_rustdoc():
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], check=True, capture_output=True,
                             text=True).stdout.strip()
    root = os.path.join(sysroot, "share", "doc", "rust", "html")
    paths = []
    for book in rs.RUST_BOOKS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, book)):
            rel = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if os.path.join(rel, d) not in rs.RUST_SKIP_DIRS)
            paths += [os.path.join(dirpath, f) for f in sorted(filenames)
                      if f.endswith(".html") and f not in rs.RUST_SKIP_FILES]
    with multiprocessing.Pool(2) as pool:
        return pool.map(marked_document, [(root, p) for p in paths], chunksize=32)


def marked_sentences(marked):
    out = []
    for line in marked.splitlines():
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z" + CODE_OPEN + EM_OPEN + r"])", line):
            plain = s.translate(UNMARK)
            if plain and plain[-1] in ".!?" and 5 <= len(plain.split()) <= 45:
                out.append(s)
    return out


COMMANDS = ("cargo", "rustc", "rustup", "rustdoc", "rustfmt", "clippy", "cargo-", "git ", "ls",
            "cd", "mkdir")
MODALS = {"can", "will", "must", "should", "may", "cannot"}
ITEM_NOUNS = {"operator", "function", "method", "macro", "keyword", "attribute", "command",
              "trait", "type", "flag", "option", "field", "key", "section", "lint", "crate",
              "module", "file", "enum", "struct", "variant", "expression", "statement", "pattern",
              "variable", "constant", "directive", "target", "profile", "table", "feature",
              "setting", "subcommand", "tool", "library", "block", "value", "annotation",
              "syntax", "parameter", "argument", "closure", "loop", "environment"}
PRONOUN_START = {"it", "this", "that", "these", "those", "they", "we", "you", "he", "she", "each",
                 "such", "here", "there", "both", "which", "its", "their", "our", "your", "i",
                 "one", "some", "other", "another", "either", "neither", "all", "any", "now",
                 "then", "also", "so", "but", "and", "or", "if", "when", "because", "note"}
# Words swapped in prose questions besides real_qa.py's table (whole words,
# everywhere in the clause), so that a reworded sentence shares fewer runs of
# words with its page.
PROSE_SYN = {"your": "a", "you": "one", "allows": "lets", "lets": "allows", "program": "application",
             "programs": "applications", "automatically": "on its own", "creates": "makes",
             "makes": "creates", "needs": "requires", "requires": "needs", "different": "distinct",
             "provides": "offers", "defines": "declares", "useful": "handy", "entire": "whole",
             "whole": "entire", "simple": "basic", "first": "initial", "directory": "folder",
             "directories": "folders", "returns": "gives back", "tells": "instructs",
             "called": "named", "own": "very own", "like": "such as", "able": "capable",
             "always": "invariably", "only": "solely", "also": "additionally", "new": "fresh",
             "example": "instance", "examples": "instances", "builds": "compiles",
             "compiles": "builds", "runs": "executes", "executes": "runs", "shows": "displays",
             "displays": "shows", "many": "numerous", "usually": "typically",
             "typically": "usually", "possible": "feasible", "easy": "simple", "purposes": "needs",
             "particular": "specific", "specific": "particular", "outcome": "result",
             "result": "outcome", "supposed": "meant", "explicitly": "expressly",
             "arbitrary": "any", "reformats": "formats", "implement": "provide",
             "statement": "statement", "information": "details", "whether": "if"}
# A clause too close to its page is cut before one of these words.
CUT_BEFORE = {"and", "or", "but", "when", "if", "while", "because", "so", "which", "unless",
              "since", "by", "using", "with", "without", "in", "for", "at", "that", "as", "from",
              "into", "on", "via", "through", "rather", "instead"}
PROPER = {"Rust", "Cargo", "Rustup", "Clippy", "Rustdoc", "Windows", "Linux", "Unix"}
NUMBER_WORDS = {"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "sixteen", "thirty-two", "sixty-four", "zero", "one"}
NUM = r"(?:\d+(?:\.\d+)?|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"
UNITS = r"(?:bytes?|bits?|characters?|elements?|items?|arguments?|parameters?|fields?|values?|" \
        r"times?|levels?|kinds?|types?|ways?|forms?|variants?|lines?|spaces?|digits?|seconds?)"
STOPS_END = {"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "with", "by", "from",
             "that", "which", "as", "at", "into", "is", "are", "be", "its", "their", "this"}

ITEM_TEMPLATES = ["Which {noun} {v3}?", "What {noun} {v3}?", "Name the {noun} that {v3}."]
COMMAND_TEMPLATES = ["Which command {v3}?", "What command {v3}?",
                     "Which command would I run to {bare}?"]
WHAT_TEMPLATES = ["What {v3}?", "Which construct {v3}?"]
DEF_TEMPLATES = ["What do we call {np}?", "What is the name for {np}?",
                 "Which term describes {np}?", "What term is used for {np}?"]


def prose_swap(s):
    s = rq.swap_words(s)
    s = re.sub(r"\b(of|for|in|with|on) a\b", r"\1 some", s)
    s = re.sub(r"\bthe same\b", "an identical", s)
    return re.sub(r"(?<![\w\-/.=$<'`])[a-z]+(?![\w\-/=>'`])",
                  lambda m: PROSE_SYN.get(m.group(0), m.group(0)), s)


def plain(s):
    return rs.squash(s.translate(UNMARK))


def clause_of(rest):
    """The first clause of a predicate, in plain text."""
    rest = re.split(r"[,;:(]|\s[-\u2013\u2014]\s|\.(?:\s|$)", rest)[0]
    return plain(rest).rstrip(".!? ")


def fit(words_, grams, make, min_words=3):
    """make(clause) for the whole clause, or for the longest prefix cut before
    a conjunction or preposition (at least min_words words), whose question
    shares no 6-word run with the page."""
    for n in range(min(len(words_), 16), min_words - 1, -1):
        if n < len(words_) and words_[n].lower() not in CUT_BEFORE:
            continue
        if words_[n - 1].lower().strip(",.") in STOPS_END:
            continue
        q = make(" ".join(words_[:n]))
        if not (rq.ngrams(rq.words(q)) & grams):
            return q
    return None


def predicate(verb_rest, grams, templates, key, fill):
    """A question from "VERB rest" (third person) or None."""
    ws = verb_rest.split()
    if not ws:
        return None
    base = rq.base_of(ws[0].lower())
    if not base or base in ("is", "be", "has", "have", "does", "do"):
        return None
    if base in rq.NOUN_VERBS and len(ws) > 1 and ws[1] in ("of", "is", "are"):
        return None
    rest = prose_swap(" ".join(ws[1:]))
    v3, bare = rq.inflect(base)
    tpl = rq.stable_pick(templates, key)

    def make(r):
        return tpl.format(v3=(v3 + " " + r).strip(), bare=(bare + " " + r).strip(), **fill)
    rws = rest.split()
    if len(rws) < 2 or len(rws) > 20:
        return None
    return fit(rws, grams, make, min_words=2)


def answer_noun(answer, noun):
    """How a question names a code span: its own noun, else one read from its
    form, else None ("What ...")."""
    if noun:
        return noun
    if answer.startswith(COMMANDS) and " " in answer:
        return "command"
    if re.fullmatch(r"--?[A-Za-z][\w-]*(?:[ =]\S+)?", answer):
        return "flag"
    if answer.startswith("#[") or answer.startswith("#!["):
        return "attribute"
    if re.fullmatch(r"[a-z_][\w:]*!", answer):
        return "macro"
    if re.fullmatch(r"[\w.-]+\.(?:toml|rs|lock|json|md)", answer):
        return "file"
    return None


def subject_candidates(s, key, grams):
    """'`X` verbs ...', 'The `X` noun verbs ...', 'You can use `X` to ...',
    '`X` is a ...': [(question, answer, template)]."""
    code = CODE_OPEN + r"([^" + MARKS + r"]+)" + CODE_CLOSE
    out = []

    def ok(answer):
        return re.search(r"[A-Za-z0-9]", answer) and 1 <= len(answer.split()) <= 5

    m = re.match(r"(?:The |A |An )?" + code + r"(?: ([a-z]+))? ([a-z]+)\b(?![\u2019'])(.*)$", s)
    if m:
        answer, noun, verb, rest = m.group(1).strip(), m.group(2), m.group(3), m.group(4)
        if noun and noun not in ITEM_NOUNS and rq.base_of(noun):
            rest = " " + verb + rest
            verb, noun = noun, None
        if (not noun or noun in ITEM_NOUNS) and ok(answer):
            noun = answer_noun(answer, noun)
            rest = clause_of(rest)
            tpl = "command" if noun in ("command", "subcommand") else "item"
            lead = "Which " + noun if noun else "What"
            mod = re.match(r"((?:not |now |only |also |always |never |then )*)([a-z]+)\b(.*)$",
                           rest.strip())
            if verb in ("is", "are") or verb in MODALS:
                # "`X` is a ...", "`X` is suppressed ...", "`X` can be used to ..."
                ws = prose_swap(rest).split()
                if ws and ws[0] not in ("a", "an", "the") + tuple(MODALS) \
                        and not ws[0].endswith(("ed", "en")) and verb in ("is", "are"):
                    ws = []  # "`X` is only ..." and the like: too vague
                q = fit(ws, grams, lambda r: f"{lead} {verb} {r}?", 3) if ws else None
                out.append((q, answer, tpl))
            elif verb in ("now",) and mod:
                out.append((predicate(mod.group(2) + mod.group(3), grams, ITEM_TEMPLATES if noun
                                      else WHAT_TEMPLATES, key, {"noun": noun}), answer, tpl))
            elif noun in ("command", "subcommand"):
                out.append((predicate(verb + " " + rest, grams, COMMAND_TEMPLATES, key, {}),
                            answer, tpl))
            elif noun:
                out.append((predicate(verb + " " + rest, grams, ITEM_TEMPLATES, key,
                                      {"noun": noun}), answer, tpl))
            else:
                out.append((predicate(verb + " " + rest, grams, WHAT_TEMPLATES, key, {}),
                            answer, tpl))
    m = re.match(code + r"\s*(?::|\u2014|\u2013| - )\s*(.+)$", s)
    if m and ok(m.group(1).strip()):
        answer = m.group(1).strip()
        clause = rq.first_clause(plain(m.group(2)))
        vf = rq.verb_forms(clause) if clause else None
        if vf:
            noun = answer_noun(answer, None)
            t = rq.stable_pick(["Which {n} {v3}?", "What {n} {v3}?"] if noun else ["What {v3}?"], key)
            q = t.format(n=noun, v3=prose_swap(vf[0]))
            if not (rq.ngrams(rq.words(q)) & grams):
                out.append((q, answer, "entry"))
    m = re.search(r"(?:^|\. )(?:You|We) can (?:also )?(?:use|run) (?:the )?" + code
                  + r"(?: ([a-z]+))? to ([a-z]+)\b(.*)$", s)
    if m:
        answer, noun, verb, rest = m.group(1).strip(), m.group(2), m.group(3), m.group(4)
        if (not noun or noun in ITEM_NOUNS) and ok(answer) and verb in rq.VERBS:
            noun = answer_noun(answer, noun) or "item"
            tpl = "command" if noun in ("command", "subcommand") else "item"
            bare = rq.inflect(verb)[1]
            ws = prose_swap(clause_of(rest)).split()
            t = rq.stable_pick(["Which {n} can one use to {b} {r}?",
                                "What {n} would I use to {b} {r}?"], key)
            if ws:
                out.append((fit(ws, grams, lambda r: t.format(n=noun, b=bare, r=r), 1),
                            answer, tpl))
    return [o for o in out if o[0]]


def np_before(pre):
    """The noun phrase ending pre: from its last article, at most 10 words."""
    ws = plain(pre).rstrip(", ").split()
    for i in range(len(ws) - 1, max(-1, len(ws) - 11), -1):
        if ws[i].lower() in ("a", "an", "the"):
            np = ws[i:]
            if len(np) >= 2 and not any(w.lower().strip(",") in PRONOUN_START - {"one"} for w in np[1:2]) \
                    and not {w.lower() for w in np} & {"is", "are", "was", "were", "be", "been"}:
                return " ".join(np)
            return None
    return None


def definition_candidates(s, key, grams):
    out = []
    # <em> spans only: a code span after "called" mostly names an example item.
    span = r"(?:(?:a|an|the) )?(?:" + EM_OPEN + r"([^" + MARKS + r"]+)" + EM_CLOSE + r"|" + CODE_OPEN \
        + r"(?!)([^" + MARKS + r"]+)" + CODE_CLOSE + r")"
    m = re.match(r"(.+?),? (?:is|are) (?:(?:also|often|sometimes|commonly|usually|simply|just) )*"
                 r"(called|known as|referred to as|named) " + span, s)
    subj = None
    if m:
        subj = plain(m.group(1))
        first = subj.split()[0].lower()
        if first in PRONOUN_START or not 2 <= len(subj.split()) <= 10 or "," in subj \
                or re.search(r"\b(whose|that|which|who)\b", subj):
            subj = None
        elif first in ("a", "an", "the"):
            subj = first + " " + subj.split(" ", 1)[1]
        answer = (m.group(3) or m.group(4) or "").strip()
    if not subj:
        m = re.search(r"(.+?),? (?:called|known as|referred to as) " + span + r"(?=[ ,.;:)])", s)
        if m:
            subj = np_before(m.group(1))
            answer = (m.group(2) or m.group(3) or "").strip()
    if not subj:
        m = re.match(r"(.+?),? (?:is|are) (?:(?:also|often|sometimes|commonly|usually|simply|just) )*"
                     r"(?:known as|referred to as) (?:(?:a|an|the) )?([A-Za-z][\w-]*(?: [\w-]+){0,3})(?=[,.;:])",
                     plain(s))
        if m:
            subj = m.group(1)
            answer = m.group(2)
            first = subj.split()[0].lower()
            if first in PRONOUN_START or not 2 <= len(subj.split()) <= 10 or "," in subj:
                subj = None
    if not subj or not answer or not 1 <= len(answer.split()) <= 5 \
            or not re.search(r"[A-Za-z0-9]", answer):
        return out
    subj = re.sub(r"(?: [a-z]+ly)+$", "", subj)
    if re.search(r"\b(?:new|fresh|first|next|example) (?:project|crate|package|directory|file|binary"
                 r"|library|program|module|function|variable|struct)\b", subj):
        return out  # "a new project called *branches*": an example's name
    if len(subj.split()) < 3:
        return out
    np = prose_swap(subj[0].lower() + subj[1:] if subj.split()[0] in ("A", "An", "The") else subj)
    tpl = rq.stable_pick(DEF_TEMPLATES, key)
    q = tpl.format(np=np)
    if not (rq.ngrams(rq.words(q)) & grams):
        out.append({"template": "definition", "question": q, "answers": [answer]})
    return out


def subject_np(subj):
    subj = plain(subj)
    ws = subj.split()
    if not 1 <= len(ws) <= 8 or ws[0].lower() in PRONOUN_START or "," in subj \
            or ws[0].lower() in rq.PREPOSITIONS:
        return None
    if {w.lower() for w in ws} & (MODALS | {"is", "are", "was", "were", "be", "not"}):
        return None
    if ws[0] in ("A", "An", "The", "Each", "Every") or (
            re.fullmatch(r"[A-Z][a-z]+s", ws[0]) and len(ws) == 1 or re.fullmatch(r"[A-Z][a-z]+s", ws[0])
            and ws[0] not in PROPER):
        ws[0] = ws[0].lower()
    return prose_swap(" ".join(ws))


def number_candidates(s, key, grams):
    p = plain(s)
    out = []
    m = re.match(r"(.+?) (has|have|takes|take|contains|contain|supports|support|accepts|accept|"
                 r"provides|provide|defines|define|uses|use) (?:exactly |only |just )?(" + NUM
                 + r") ((?:[a-z][\w-]* ){0,3}?[a-z][\w-]*s)\b", p)
    if m:
        subj = subject_np(m.group(1))
        verb = m.group(2)
        base = rq.base_of(verb) or (verb[:-1] if verb.endswith("s") and verb != "has" else
                                    "have" if verb == "has" else verb)
        aux = "does" if verb != base else "do"
        if subj and m.group(3) not in ("one", "zero"):
            q = f"How many {prose_swap(m.group(4))} {aux} {subj} {base}?"
            out.append({"template": "number", "question": q, "answers": [m.group(3)]})
    m = re.match(r"(.+?) (is|are) (?:exactly |always |only )?(" + NUM + r") (" + UNITS + r")\b", p)
    if m:
        subj = subject_np(m.group(1))
        if subj and m.group(3) not in ("one", "zero"):
            q = f"How many {m.group(4)} {m.group(2)} {subj}?"
            out.append({"template": "number", "question": q, "answers": [m.group(3)]})
    m = re.match(r"(.+?) (?:was|were) (stabilized|introduced|added|released|deprecated|removed"
                 r"|made stable) in (?:Rust |version )?(1\.\d+(?:\.\d+)?)\b", p)
    if m:
        subj = subject_np(m.group(1))
        if subj:
            q = rq.stable_pick(["In which Rust release {w} {s} {v}?", "Since which Rust version {w} {s} {v}?"],
                               key).format(w="was" if not subj.endswith("s") else "were", s=subj,
                                           v=m.group(2))
            out.append({"template": "number", "question": q, "answers": [m.group(3)]})
    m = re.match(r"(.+?) defaults? to (" + NUM + r")\b", p)
    if m:
        subj = subject_np(m.group(1))
        if subj:
            q = f"What is the default value of {subj}?"
            out.append({"template": "number", "question": q, "answers": [m.group(2)]})
    return [c for c in out if not (rq.ngrams(rq.words(c["question"])) & grams)]


def prose_candidates(doc):
    grams = rq.ngrams(rq.words(doc["title"] + "\n" + doc["text"]))
    cands = []
    for i, s in enumerate(marked_sentences(doc["marked"])):
        key = f"{doc['_id']}|{i}"
        for q, answer, template in subject_candidates(s, key, grams):
            cands.append({"template": template, "question": q, "answers": [answer]})
        cands += definition_candidates(s, key, grams)
        cands += number_candidates(s, key, grams)
    if doc.get("kind") == "pydoc":
        cands += pydoc_candidates(doc, grams)
    questions = collections.Counter(c["question"] for c in cands)
    good = []
    for c in cands:
        c["question"] = c["question"][0].upper() + c["question"][1:]
        if questions[c["question"]] > 1 or not all(1 <= len(a.split()) <= 5 for a in c["answers"]):
            continue
        why = cut_mid_clause(c["question"])
        if why:
            if check(c, doc, grams):
                MIDCLAUSE_DROPS[(why, c["template"])] += 1
                MIDCLAUSE_EXAMPLES.setdefault(why, []).append(c["question"])
            continue
        if check(c, doc, grams):
            c["doc_id"] = doc["_id"]
            good.append(c)
    return good


# ---------------------------------------------------------------- prose: more sources

# Rendered in a separate interpreter (-S: the standard library only, not
# site-packages' shims; an empty environment, so no value of this machine's
# environment can reach a document; a fixed hash seed, so set reprs in
# signatures keep their order).
PYDOC_RENDER = r"""
import contextlib, io, json, importlib, pkgutil, pydoc, sys, warnings
warnings.simplefilter("ignore")
skip = set(sys.argv[1].split(","))
names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in skip)
mods = []
for n in names:
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            m = importlib.import_module(n)
    except BaseException:
        continue
    mods.append(n)
    if hasattr(m, "__path__"):
        for info in pkgutil.walk_packages(m.__path__, n + ".", onerror=lambda x: None):
            parts = info.name.split(".")
            if not any(p.startswith(("_", "test")) or p.endswith("tests") for p in parts):
                mods.append(info.name)
out = {}
for n in sorted(set(mods)):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            out[n] = pydoc.plaintext.document(importlib.import_module(n))
    except BaseException:
        continue
json.dump(out, sys.stdout)
"""
# Not imported: modules that act on import (antigravity opens a browser, this
# prints), GUI and test packages, and packages of generated near-duplicates.
PYDOC_SKIP = ["antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test",
              "pydoc_data", "encodings", "lib2to3", "ensurepip", "venv", "__main__", "xxsubtype",
              "xxlimited"]
PYDOC_KEEP_SECTIONS = {"NAME", "DESCRIPTION", "CLASSES", "FUNCTIONS"}
# Class blocks dropped: inherited members (copies of other classes' docs) and
# data/descriptor listings (reprs of values, not prose).
PYDOC_DROP_BLOCK = re.compile(r"\s*\|  (?:Data and other attributes|Data descriptors|Readonly properties"
                              r"|[A-Za-z ]* inherited from |Method resolution order)")
PYDOC_OWN_BLOCK = re.compile(r"\s*\|  (?:Methods|Class methods|Static methods) defined here")


def pydoc_text(rendered):
    """pydoc's text of a module with only the NAME, DESCRIPTION, CLASSES and
    FUNCTIONS sections; in classes, the blocks of PYDOC_DROP_BLOCK and the
    __dunder__ methods dropped; memory addresses taken out of reprs; trailing
    spaces stripped, runs of blank or separator lines made one."""
    out, keep, drop_block, dunder = [], False, False, False
    for line in rendered.splitlines():
        line = re.sub(r" at 0x[0-9a-fA-F]+", "", line.rstrip())
        if line and not line[0].isspace():
            keep, drop_block = line.strip() in PYDOC_KEEP_SECTIONS, False
        if not keep:
            continue
        in_class = line.startswith("     |")
        body = line[8:] if in_class else line[4:]
        if PYDOC_DROP_BLOCK.match(line):
            drop_block = True
        elif PYDOC_OWN_BLOCK.match(line) or re.match(r"\s*\|  -{20,}$", line) or not in_class:
            drop_block = False
        if drop_block:
            continue
        if body and not body[0].isspace() and line.strip(" |"):
            dunder = bool(re.match(r"__\w+__(?: = \w+)?\(", body))
        if dunder and line.strip(" |"):
            continue
        if not line.strip(" |") and out and not out[-1].strip(" |"):
            continue
        if re.match(r"\s*\|  -{20,}$", line) and out and (
                re.match(r"\s*\|  -{20,}$", out[-1]) or len(out) > 1 and not out[-1].strip(" |")
                and re.match(r"\s*\|  -{20,}$", out[-2])):
            continue
        out.append(line)
    # A separator that ends a class is dropped.
    text = "\n".join(out)
    text = re.sub(r"\n *\|  -{20,}(?:\n *\|)?(?=\n(?! *\|))", "", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def load_pydoc():
    env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": "/nonexistent"}
    res = subprocess.run([sys.executable, "-S", "-c", PYDOC_RENDER, ",".join(PYDOC_SKIP)],
                         capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                         timeout=600, cwd="/")
    if res.returncode != 0:
        print(f"prose: pydoc rendering failed: {res.stderr[-500:]}", flush=True)
        return []
    docs = []
    for name, rendered in sorted(json.loads(res.stdout).items()):
        text = pydoc_text(rendered)
        docs.append({"_id": f"pydoc:{name}", "title": name, "text": text, "marked": text,
                     "kind": "pydoc", "module": name})
    return docs


USR_DOC = "/usr/share/doc"
USR_DOC_NAME = re.compile(r"(?i)^(?:readme[^/]*|[^/]*\.(?:md|markdown|txt|rst))(?:\.gz)?$")
USR_DOC_SKIP = re.compile(r"(?i)changelog|changes|news|history|copyright|copying|licen[cs]e|authors"
                          r"|thanks|conduct|contributors|/examples?/|\.html")


def markdown_marked(src):
    """Markdown as text with `code` and *emphasis* spans marked: fences kept as
    plain lines, headings' #s, links' targets, images, HTML tags and
    reference definitions dropped."""
    out, fence = [], False
    for line in src.splitlines():
        if re.match(r"\s*(```|~~~)", line):
            fence = not fence
            continue
        if fence:
            out.append(line.translate(UNMARK))
            continue
        line = line.translate(UNMARK)
        if re.match(r"\s*\[[^\]]+\]:\s*\S+", line) or re.match(r"\s*(?:[-=*_]\s*){3,}$", line):
            continue
        line = re.sub(r"^\s{0,3}#+\s*", "", line).rstrip("# ") if re.match(r"\s{0,3}#", line) else line
        line = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", line)
        line = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", line)
        line = re.sub(r"\[([^\]]+)\]\[[^\]]*\]", r"\1", line)
        line = re.sub(r"</?[A-Za-z][^>]*>", "", line)
        line = re.sub(r"`+([^`]+?)`+", lambda m: CODE_OPEN + m.group(1) + CODE_CLOSE, line)
        line = re.sub(r"(?<![\w*])(\*\*|\*|__|_)(?=\S)([^*_" + MARKS + r"]+?)(?<=\S)\1(?![\w*])",
                      lambda m: EM_OPEN + m.group(2) + EM_CLOSE, line)
        out.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def prose_like(text):
    """Mostly sentences: half the non-blank lines have 5+ words of letters."""
    lines = [l for l in text.splitlines() if l.strip()]
    wordy = sum(1 for l in lines if len(re.findall(r"[A-Za-z]{2,}", l)) >= 5)
    return len(lines) >= 5 and wordy * 2 >= len(lines)


def load_usr_doc():
    docs = []
    for dirpath, dirnames, filenames in os.walk(USR_DOC):
        dirnames.sort()
        for f in sorted(filenames):
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, USR_DOC)
            if not USR_DOC_NAME.match(f) or USR_DOC_SKIP.search("/" + rel) or os.path.islink(path):
                continue
            try:
                opener = gzip.open if f.endswith(".gz") else open
                with opener(path, "rb") as fh:
                    raw = fh.read(400_000)
                src = raw.decode("utf-8")
            except (OSError, UnicodeDecodeError, EOFError):
                continue
            src = src.replace("\r\n", "\n").replace("\t", "    ")
            base = f[:-3] if f.endswith(".gz") else f
            marked = markdown_marked(src) if re.search(r"(?i)\.(md|markdown)$", base) \
                else "\n".join(l.rstrip() for l in src.translate(UNMARK).splitlines()).strip("\n")
            text = marked.translate(UNMARK)
            if not prose_like(text):
                continue
            pkg = rel.split("/")[0]
            docs.append({"_id": "doc:" + rel[:-3] if rel.endswith(".gz") else "doc:" + rel,
                         "title": f"{pkg} {base}", "text": text, "marked": marked, "kind": "doc"})
    return docs


FUNC_TEMPLATES = ["Which function of the {m} module {v3}?", "In Python's {m} module, which function {v3}?",
                  "What function in {m} {v3}?", "Which {m} function would I call to {bare}?"]
METHOD_TEMPLATES = ["Which method of {c} in {m} {v3}?", "In the {m} module, which {c} method {v3}?",
                    "Which method of the {c} class would I call to {bare}?"]
CLASS_TEMPLATES_NP = ["Which class of the {m} module is {np}?", "In Python's {m} module, which class is {np}?"]
CLASS_TEMPLATES_VERB = ["Which class of the {m} module {v3}?", "In {m}, which class {v3}?"]
EXC_TEMPLATES = ["Which exception does {m} raise {when}?", "What exception of the {m} module is raised {when}?"]
ARG_DEFAULT_TEMPLATES = ["What does the {p} argument of {f} in {m} default to?",
                         "If {p} is not given to {f} of the {m} module, what value is used?",
                         "What is the default {p} of {f} in Python's {m} module?"]
CLASS_HEADS = {"class", "subclass", "object", "objects", "type", "exception", "error", "wrapper",
               "container", "iterator", "mapping", "sequence", "dictionary", "dict", "tuple", "queue",
               "proxy", "instance", "base", "lock", "event", "condition", "semaphore", "barrier",
               "handler", "parser", "reader", "writer", "loader", "finder", "formatter", "policy",
               "factory", "context", "stream", "transport", "protocol", "future", "task", "pool",
               "connection", "socket", "message", "header", "node", "element", "tree", "set",
               "mixin", "decorator", "descriptor", "namespace", "record", "entry", "view", "class."}
DEFAULT_VAL = r"(?P<v>-?\d+(?:\.\d+)?|True|False|None|'[^'\s]{1,30}'|\"[^\"\s]{1,30}\")"


def rest_unmarkup(s):
    """reST and pydoc markup out of a docstring clause: *x*, ``x``, :role:`x`."""
    s = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", s)
    s = re.sub(r"`+([^`]+)`+", r"\1", s)
    return re.sub(r"\*{1,2}(\w[\w.]*)\*{1,2}", r"\1", s)


def pydoc_entries(text):
    """(kind, name, class, params, doc) of the kept text: "function" (a
    FUNCTIONS entry), "method" (a class's own method), "class"."""
    lines = text.splitlines()
    out, section, cls = [], None, None
    i = 0
    while i < len(lines):
        l = lines[i]
        if l and not l[0].isspace():
            section = l.strip()
            i += 1
            continue
        m_cls = re.match(r"    (?:\w+ = )?class (\w+)\((.*)\)$", l)
        m_fn = re.match(r"    ([A-Za-z]\w*)(?: = \w+)?\((.*)\)$", l) if section == "FUNCTIONS" else None
        m_me = re.match(r"     \|  ([A-Za-z]\w*)(?: = \w+)?\((.*)\)$", l) if cls else None
        if m_cls and section == "CLASSES":
            cls, bases = m_cls.group(1), m_cls.group(2)
            doc, j = [], i + 1
            if j < len(lines) and re.match(r"     \|  " + re.escape(cls) + r"\(", lines[j]):
                j += 1
            while j < len(lines) and lines[j].strip() in ("|", ""):
                j += 1
            while j < len(lines) and re.match(r"     \|  \S", lines[j]):
                if re.match(r"     \|  (?:Methods|Method resolution|Class methods|Static methods)", lines[j]):
                    break
                doc.append(lines[j][8:])
                j += 1
            out.append(("class", cls, None, bases, " ".join(doc)))
            i = j
            continue
        if m_fn or m_me:
            m = m_fn or m_me
            indent = "        " if m_fn else "     |      "
            doc, j = [], i + 1
            while j < len(lines) and (lines[j].startswith(indent) or lines[j].strip() in ("", "|")):
                if not lines[j].strip(" |"):
                    if doc:
                        doc.append("\n")
                else:
                    doc.append(lines[j][len(indent):])
                j += 1
            params = re.findall(r"(?:^|[,(*]\s*)([A-Za-z_]\w*)(?=\s*[=,)]|\s*$)", m.group(2))
            if not m.group(1).startswith("_"):
                out.append(("function" if m_fn else "method", m.group(1), None if m_fn else cls,
                            params, " ".join(doc)))
            i = j
            continue
        if not l.startswith("     |"):
            cls = cls if l.startswith("    class") or not l.strip() else None
        i += 1
    return out


def class_np(clause):
    ws = clause.split()
    low = [w.lower().strip(",.") for w in ws]
    if len(ws) < 2 or set(low) & rq.NOT_NP_WORDS or rq.as_verb(ws[0]) and low[1] not in ("of", "for"):
        return None
    art = low[0] if low[0] in ("a", "an", "the") else None
    if art:
        ws, low = ws[1:], low[1:]
    if len(ws) < 2 or low[0] in rq.BAD_START:
        return None
    cut_at = next((i for i, w in enumerate(low) if w in rq.PREPOSITIONS and i > 0), len(low))
    head = low[cut_at - 1]
    if not (head in CLASS_HEADS or head in rq.HEAD_NOUNS or re.search(rq.NOUN_SUFFIXES, head)):
        return None
    if re.fullmatch(r"[A-Z][a-z-]+", ws[0]):
        ws[0] = ws[0].lower()
    np = prose_swap(" ".join(ws))
    art = art if art == "the" else ("an" if np[0] in "aeiou" else "a")
    return art + " " + np


def pydoc_candidates(doc, grams):
    m = doc["module"]
    ents = pydoc_entries(doc["text"])
    firsts = collections.Counter()
    parsed = []
    for kind, name, cls, params, body in ents:
        para = rest_unmarkup(body.split("\n")[0].strip())
        clause = rq.first_clause(para) if para else None
        if clause:
            firsts[rs.norm(clause)] += 1
        parsed.append((kind, name, cls, params, body, para, clause))
    out = []
    mn = re.match(r"NAME\n    (\S+) - (.+)", doc["text"])
    clause = rq.first_clause(rest_unmarkup(mn.group(2))) if mn and mn.group(1) == m else None
    if clause:
        vf = rq.verb_forms(clause)
        key = doc["_id"] + "|module"
        if vf:
            ws = vf[0].split()
            ws = ws[:1] + prose_swap(" ".join(ws[1:])).split()
            tpl = rq.stable_pick(MODULE_TEMPLATES_VERB, key)
            q = fit(ws, grams, lambda r: tpl.format(v3=r), 2)
        else:
            np = class_np(clause)
            q = rq.stable_pick(MODULE_TEMPLATES_NP, key).format(np=np) if np else None
            q = None if q and rq.ngrams(rq.words(q)) & grams else q
        if q:
            out.append({"template": "module", "question": q, "answers": [m]})
    for kind, name, cls, params, body, para, clause in parsed:
        key = f"{doc['_id']}|{cls}|{name}"
        if m != "builtins" and ((cls or name) in BUILTIN_NAMES):
            continue  # a builtin class documented again in another module
        if kind in ("function", "method"):
            sig = re.search(r"(?m)^\s*(?:\|\s+)?" + re.escape(name) + r"(?: = \w+)?\((.*)\)$", doc["text"])
            for md in re.finditer(r"(?:^|, )([a-z]\w*)=(-?\d+(?:\.\d+)?|'[^',]{2,20}'|\"[^\",]{2,20}\")(?=,|$)",
                                  sig.group(1) if sig else ""):
                p, v = md.group(1), md.group(2)
                if v in ("0", "1", "-1"):
                    continue
                f = f"{cls}.{name}" if cls else name
                q = rq.stable_pick(SIG_DEFAULT_TEMPLATES, key + p).format(p=p, f=f, m=m)
                out.append({"template": "signature", "question": q, "answers": [v]})
        if clause and firsts[rs.norm(clause)] == 1:
            vf = rq.verb_forms(clause)
            if kind in ("function", "method") and vf:
                tpls = FUNC_TEMPLATES if kind == "function" else METHOD_TEMPLATES
                tpl = rq.stable_pick(tpls, key)
                if "{bare}" in tpl and re.search(r"\b(?:and|or) (\w+)", vf[1]) and any(
                        rq.base_of(w) for w in re.findall(r"\b(?:and|or) (\w+)", vf[1])):
                    tpl = tpls[0]  # "look up and returns": the bare form does not agree
                use = vf[1] if "{bare}" in tpl else vf[0]
                ws = use.split()
                ws = ws[:1] + prose_swap(" ".join(ws[1:])).split()
                q = fit(ws, grams, lambda r: tpl.format(m=m, c=cls, v3=r, bare=r), 2)
                if q:
                    out.append({"template": kind, "question": q, "answers": [name]})
            elif kind == "class":
                is_exc = re.search(r"(Error|Exception|Warning|Exit|Interrupt)\b", cls_bases(params))
                me = re.match(r"(?:Raised|Thrown|Signals?|Signaled) ((?:when|if|by|on|for)\b.*)$", clause)
                if is_exc and me:
                    tpl = rq.stable_pick(EXC_TEMPLATES, key)
                    ws = prose_swap(me.group(1)).split()
                    q = fit(ws, grams, lambda r: tpl.format(m=m, when=r), 3)
                    if q:
                        out.append({"template": "class", "question": q, "answers": [name]})
                elif vf:
                    tpl = rq.stable_pick(CLASS_TEMPLATES_VERB, key)
                    ws = vf[0].split()
                    ws = ws[:1] + prose_swap(" ".join(ws[1:])).split()
                    q = fit(ws, grams, lambda r: tpl.format(m=m, v3=r), 2)
                    if q:
                        out.append({"template": "class", "question": q, "answers": [name]})
                else:
                    np = class_np(clause)
                    if np:
                        tpl = rq.stable_pick(CLASS_TEMPLATES_NP, key)
                        q = tpl.format(m=m, np=np)
                        if not (rq.ngrams(rq.words(q)) & grams):
                            out.append({"template": "class", "question": q, "answers": [name]})
        if kind in ("function", "method") and params:
            flat = " ".join(body.split())
            for pat in (r"(?:^|[.;] |, )(?:[Tt]he )?`*(?P<p>[A-Za-z_]\w*)`* (?:argument |parameter )?"
                        r"defaults to " + DEFAULT_VAL,
                        r"(?:^|[.;] )[Tt]he default (?:value )?(?:for|of) `*(?P<p>[A-Za-z_]\w*)`* is "
                        + DEFAULT_VAL,
                        r"(?:^|[.;] )[Ii]f `*(?P<p>[A-Za-z_]\w*)`* is (?:not given|not specified|omitted|"
                        r"not provided|not supplied)[^.;]*?, (?:it )?defaults to " + DEFAULT_VAL):
                for md in re.finditer(pat, flat):
                    p, v = md.group("p"), md.group("v")
                    if p not in params:
                        continue
                    ans = v.strip("'\"") if v[0] in "'\"" and v.strip("'\"") else v
                    f = f"{cls}.{name}" if cls else name
                    q = rq.stable_pick(ARG_DEFAULT_TEMPLATES, key + p).format(p=p, f=f, m=m)
                    out.append({"template": "default", "question": q, "answers": [ans]})
    return out


BUILTIN_NAMES = set(dir(builtins))
MODULE_TEMPLATES_VERB = ["Which module of Python's standard library {v3}?",
                         "Which standard Python module {v3}?"]
MODULE_TEMPLATES_NP = ["Which module of Python's standard library provides {np}?",
                       "Which standard Python module is {np}?"]
SIG_DEFAULT_TEMPLATES = ["What is the default value of the {p} parameter of {f} in the {m} module?",
                         "In Python's {m} module, what value does {f} use for {p} when none is given?"]


def trivially_named(answer, q):
    """The answer is the question's words run together ("BufferError" for
    "a buffer error")."""
    a = re.sub(r"[\W_]", "", answer.lower())
    return len(a) > 3 and a in "".join(rq.words(q))


def cls_bases(params):
    return params if isinstance(params, str) else ""


MIDCLAUSE_END = {"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "with", "by", "from",
                 "that", "which", "as", "at", "into", "onto", "than", "is", "are", "be", "been",
                 "was", "were", "its", "their", "your", "his", "her", "our", "my", "this", "these",
                 "those", "some", "any", "each", "every", "whose", "if", "when", "whether", "while",
                 "because", "but", "so", "not", "also", "can", "will", "may", "must", "should",
                 "would", "could", "such", "like", "about", "via",
                 "through", "between", "without", "within", "per", "e.g", "i.e", "etc", "very",
                 "more", "most", "less", "then", "only", "both", "either", "all", "own", "using"}
# Verbs that are not complete without an object or a place.
NEEDS_OBJECT = {"put", "place", "install", "permit", "allow", "make", "give", "gives", "provide",
                "set", "define", "take", "get", "let", "add", "specify", "call", "contain", "hold",
                "holds", "use", "uses", "create", "creates", "produce", "return", "returns",
                "send", "pass", "insert", "turn", "keep", "store", "mark", "treat", "enable",
                "declare", "include", "remove", "replace", "support", "accept", "require",
                "offer", "pick", "choose", "select", "need", "want", "prevent", "write", "read"}
NEEDS_OBJECT |= {"know", "see", "do", "find", "tell", "say", "learn", "check", "build"}
NEEDS_PLACE = {"put", "place", "insert", "move", "attach", "append", "prepend", "assign", "store"}
PLACE_PREPS = {"in", "into", "on", "onto", "at", "to", "under", "inside", "where", "there", "here",
               "before", "after", "between", "within", "somewhere"}


SUBORDINATORS = {"if", "when", "whether", "unless", "because", "while", "whenever", "although"}
FINITE = {"is", "are", "was", "were", "be", "been", "can", "will", "may", "must", "should", "has",
          "have", "had", "does", "do", "did", "exists", "fails", "changes"}
MIDCLAUSE_DROPS, MIDCLAUSE_EXAMPLES = collections.Counter(), {}


def cut_mid_clause(q):
    """Why a question reads as cut mid-clause, or None: it ends in a function
    word (preposition, article, conjunction, modal, possessive ...), in a verb
    that needs an object after "to"/"one"/"can"... ("... permits one to
    install?"), it has an "if"/"when"/... clause with no verb after it
    ("returns True if all characters?"), or it puts something ("put the
    resulting binary") without saying where."""
    ws = re.findall(r"[A-Za-z][\w'.-]*", q.rstrip("?. "))
    if not ws:
        return "empty"
    last = ws[-1].lower().rstrip(".")
    if last in MIDCLAUSE_END and not re.search(r"\bdefaults? to\?$", q):
        return "ends in a function word"
    base = rq.base_of(last) or last
    if (base in NEEDS_OBJECT or last in NEEDS_OBJECT) and len(ws) > 2 and \
            ws[-2].lower() in ("to", "one", "i", "we", "you", "can", "will", "that", "which", "who"):
        return "ends in a verb missing its object"
    low = [w.lower() for w in ws]
    subs = [i for i, w in enumerate(low) if w in SUBORDINATORS and i > 1]
    if subs and not any(w in FINITE or rq.base_of(w) or re.fullmatch(r"[a-z]+(?:ed|ing)", w)
                        for w in low[subs[-1] + 1:]):
        return "a subordinate clause without its verb"
    for i, w in enumerate(low):
        if (rq.base_of(w) or w) in NEEDS_PLACE and not set(low[i + 1:]) & PLACE_PREPS \
                and i + 1 < len(low):
            return "a verb of placing without a place"
    return None


def build_prose(args):
    rust = load_marked_rustdoc()
    for d in rust:
        d["kind"] = "rust"
    pydocs, usr = load_pydoc(), load_usr_doc()
    docs = rust + pydocs + usr
    docs.sort(key=lambda d: d["_id"])
    kept = {d["_id"] for d in rs.dedupe([{k: d[k] for k in ("_id", "title", "text")} for d in docs])}
    docs = [d for d in docs if d["_id"] in kept]
    for d in docs:
        cut_plain = rq.cut(d["text"], args.max_chars)
        nlines = cut_plain.count("\n") + 1
        d["marked"] = "\n".join(d["marked"].splitlines()[:nlines])
        d["text"] = cut_plain
        assert d["marked"].translate(UNMARK) == d["text"], d["_id"]
    kinds = collections.Counter(d["kind"] for d in docs)
    print(f"prose: {len(rust)} Rust book pages, {len(pydocs)} pydoc modules, {len(usr)} "
          f"/usr/share/doc files; after dedupe: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
          + f"; text cut to {args.max_chars} characters", flush=True)
    cands = {d["_id"]: prose_candidates(d) for d in docs}
    print("  dropped as cut mid-clause (passing the other filters): " + ", ".join(
        f"{w} / {t} {n}" for (w, t), n in sorted(MIDCLAUSE_DROPS.items())))
    for w, qs in sorted(MIDCLAUSE_EXAMPLES.items()):
        for q in qs[:4]:
            print(f"    [{w}] {q}")
    pick_and_write("prose", docs, cands, args, strict=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_arguments(ap)
    ap.add_argument("--sets", default="records,prose")
    ap.add_argument("--max-chars", type=int, default=6000)
    args = ap.parse_args()
    args.out = os.path.expanduser(args.out)
    builders = {"records": build_records, "prose": build_prose}
    for name in args.sets.split(","):
        if name not in builders:
            sys.exit(f"unknown set {name!r}; known: {', '.join(builders)}")
    for name in args.sets.split(","):
        builders[name](args)


if __name__ == "__main__":
    main()
