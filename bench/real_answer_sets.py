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

The parts: bench/answer_set_tools.py (what every real set shares: the checks, the split and its
writing), bench/record_sources.py (the records), bench/prose_sentences.py and
bench/prose_sources.py (the prose: sentences of marked pages; pydoc and /usr/share/doc).

Usage: python3 bench/real_answer_sets.py --out DIR [--sets records,prose]
       [--seed 7] [--dev 150] [--test 250] [--max-docs 4000] [--max-chars 6000]
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_qa as rq  # noqa: E402
import real_sets as rs  # noqa: E402
from answer_set_tools import check, pick_and_write, split_arguments  # noqa: E402
from record_sources import (  # noqa: E402
    load_appstream,
    load_crates,
    load_python,
    record_candidates,
    record_document,
)
from prose_sentences import UNMARK, load_marked_rustdoc  # noqa: E402
from prose_sources import (  # noqa: E402
    MIDCLAUSE_DROPS,
    MIDCLAUSE_EXAMPLES,
    load_pydoc,
    load_usr_doc,
    prose_candidates,
)


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
