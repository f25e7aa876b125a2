#!/usr/bin/env python3
"""A short-answer question set about people, places and years, from a real glossary.

The other real sets (bench/real_qa.py, bench/real_answer_sets.py) ask for commands, options,
fields and definitions; none asks who made something, where, or when. This one does, from
the Free On-line Dictionary of Computing (FOLDOC, Debian's dict-foldoc 20230119-1: 15,000
entries of real English prose about languages, machines, companies and the people behind
them), in the format the others use.

  corpus    one document per FOLDOC entry: title = its headword, text = its body with the
            dictionary's markup taken out (the {cross-reference} braces, the leading
            <subject> tag, the closing (YYYY-MM-DD) edit stamps), paragraphs kept, cut to the
            first --max-chars characters on whole lines. Entries with an empty body
            (aliases) are left out; a headword that several entries share (case-insensitive)
            keeps all of them as documents, but no question names it.
  questions from the first paragraph of an entry (what the entry is), by three patterns of
            English, each over the verbs of making (developed, designed, written, invented,
            created, implemented, devised, coined, founded, introduced, proposed, built,
            defined, produced, released, discovered, established):
    who     "... designed by Niklaus Wirth ..." -> "Who came up with the programming
            language Pascal?" (answer: the name after "by": capitalised words, initials and
            name particles, 1-5 words; not when it is followed by "and" or a comma and
            another name, which would make several answers)
    where   "... developed [by N] at Bell Labs ..." -> "Where was X created?"; "based in /
            headquartered in / located in Cambridge" -> "Where is X based?" (answer: the
            capitalised name after "at" / "in", "the" left out)
    year    "... released [by N] [at P] in 1985 ..." -> "In what year was X first put out?" /
            "When was X first put out?" (answer: the year)
            The verb must belong to the entry itself: no relative pronoun (which, that, who,
            whose, whom) between the sentence's start and the verb.
            Questions name the entry by its headword and, where its subject tag says what
            it is (language, company, operating system, ...), by that noun too; the verb is
            swapped for a synonym where one reads naturally ("developed" -> "created",
            "founded" -> "set up").

The common filters of bench/answer_set_tools.py apply: every answer verbatim in its document,
none in the question, no run of 6 words shared with the document; answers in at most 20
documents preferred; one question per document, of the least used template; seeded shuffle
and split into dev (--dev) and test (--test) by document; the corpus capped at --max-docs
(the question documents always kept).

Source: /usr/share/dictd/foldoc.dict.dz where dict-foldoc is installed; else the package is
fetched once with `apt-get download dict-foldoc` into --cache and unpacked with dpkg-deb.

Layout: OUT/glossary/corpus.jsonl, OUT/glossary/dev.jsonl, OUT/glossary/test.jsonl.

Usage: python3 bench/glossary_set.py --out DIR [--seed 7] [--dev 150] [--test 250]
       [--max-docs 4000] [--max-chars 6000] [--cache DIR]
"""
import argparse
import collections
import gzip
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answer_set_tools as tools  # noqa: E402
import real_qa as rq  # noqa: E402

FOLDOC = "usr/share/dictd/foldoc.dict.dz"

# Past participle -> (what a "who" question says, what a "where"/"when" question says).
MAKING = {
    "designed": (["came up with", "designed"], ["conceived", "designed"]),
    "developed": (["created", "built"], ["created", "built"]),
    "written": (["wrote", "authored"], ["written", "authored"]),
    "invented": (["came up with", "invented"], ["invented", "thought up"]),
    "created": (["made", "created"], ["made", "created"]),
    "implemented": (["implemented", "built"], ["implemented", "built"]),
    "devised": (["thought up", "devised"], ["thought up", "devised"]),
    "coined": (["coined", "first used"], ["coined", "first used"]),
    "founded": (["set up", "founded"], ["set up", "founded"]),
    "introduced": (["introduced", "brought in"], ["introduced", "brought in"]),
    "proposed": (["put forward", "proposed"], ["put forward", "proposed"]),
    "built": (["constructed", "built"], ["constructed", "built"]),
    "defined": (["defined", "specified"], ["defined", "specified"]),
    "produced": (["made", "produced"], ["made", "produced"]),
    "released": (["put out", "released"], ["first put out", "released"]),
    "discovered": (["discovered", "found"], ["discovered", "found"]),
    "established": (["set up", "established"], ["set up", "established"]),
}
VERB = r"\b(" + "|".join(MAKING) + r")"
# A name: capitalised words or initials, name particles inside, 1-6 words.
NAME = (r"((?:[A-Z][\w'’.&-]*)(?:\s+(?:[A-Z][\w'’.&-]*|van|von|de|der|den|di|da|du|le|la|of"
        r"|for))*)")
BY = re.compile(VERB + r"\s+(?:originally\s+|jointly\s+|mainly\s+|largely\s+|primarily\s+)?"
                r"by\s+(?:the\s+)?" + NAME)
AT = re.compile(VERB + r"(?:\s+by\s+[^.;,()]{1,60}?)?\s+at\s+(?:the\s+)?" + NAME)
YEAR = re.compile(VERB + r"(?:\s+(?:by|at)\s+[^.;,()]{1,60}?)?\s+(?:in|around|ca\.|circa|c\.)"
                  r"\s+((?:1[6-9]|20)\d\d)\b(?![-–/])")
BASED = re.compile(r"\b(based|headquartered|located)\s+in\s+" + NAME)
# A person's entry opening "A Danish mathematician ..." (after any dates): the noun phrase up
# to its first break, whose last word names what the person did.
PERSON = re.compile(r"^(?:\([^)]*\)\s*|\d{4}\s*-\s*\d{4}\s*)?(?:An?|The)\s+"
                    r"((?:[\w'-]+\s+){0,3}?([a-z][a-z-]+(?:ist|er|or|ian|eer|ant|ent|ect|eur)))"
                    r"(?=[,.;(]|\s+(?:who|at|of|and|in|for|from|with|best|known|whose)\b)")
# "... used for compressing files ...": the purpose, a gerund phrase after "for", up to the
# clause's end or its first preposition.
PURPOSE = re.compile(r"\b(?:used|designed|intended|meant)\s+for\s+([a-z]+ing\b[a-z -]*)")
# Nouns of a person's relations or roles, not of a trade.
NOT_TRADES = {"daughter", "son", "father", "mother", "leader", "founder", "cofounder",
              "co-founder", "member", "wife", "husband", "brother", "sister", "winner",
              "holder", "owner", "user", "master", "partner", "student", "president",
              "chairman", "director", "officer", "manager", "head"}
PREPOSITIONS = {"in", "on", "at", "by", "with", "from", "between", "over", "under", "into",
                "onto", "via", "within", "without", "across", "through", "and", "or", "as",
                "to", "for", "of", "that", "which", "when", "where", "such", "so", "using"}
ADJECTIVE_ENDS = ("ian", "ish", "ese", "ern", "th", "ic", "al", "ary", "ive", "ous")
RELATIVE = re.compile(r"\b(which|that|who|whose|whom)\b", re.I)
# What a subject tag says an entry is, as a noun for the question.
TAG_NOUNS = {
    "language": "the programming language", "company": "the company",
    "operating system": "the operating system", "tool": "the tool",
    "hardware": "the machine", "computer": "the computer", "protocol": "the protocol",
    "project": "the project", "organisation": "the organisation",
    "organization": "the organisation", "software": "the software",
    "algorithm": "the algorithm", "standard": "the standard",
}
# Words a name should not end with, and names that are not names.
NAME_TAIL = {"of", "for", "van", "von", "de", "der", "den", "di", "da", "du", "le", "la"}
NOT_NAMES = {"It", "The", "This", "In", "A", "An", "See", "He", "She", "They", "Its"}
MONTHS = {"January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"}


def entries(text):
    """(headword, [body lines]) of a dictd text: a headword starts at column 0, its body is
    indented; alias headwords with no body are skipped."""
    out, head, body = [], None, []
    for line in text.split("\n"):
        if line and not line[0].isspace():
            if head is not None and any(b.strip() for b in body):
                out.append((head, body))
                head = None
            if head is None:
                head, body = line.strip(), []
        elif head is not None:
            body.append(line)
    if head is not None and any(b.strip() for b in body):
        out.append((head, body))
    return out[1:] if out and out[0][0].startswith("00-database") else out


def unmark(s):
    return re.sub(r"[{}]", "", s)


def document(head, body, max_chars):
    """The entry as a document, and its first paragraph as one line, and its subject tag."""
    paras = [p for p in tools.paragraphs(body) if not re.fullmatch(r"\(\d{4}-\d\d-\d\d\)", p)]
    paras = [re.sub(r"\s*\(\d{4}-\d\d-\d\d\)$", "", unmark(p)) for p in paras]
    tag = None
    if paras:
        m = re.match(r"<([^>]*)>\s*", paras[0])
        if m:
            tag = m.group(1).split(",")[0].strip().lower()
            paras[0] = paras[0][m.end():]
    text = rq.cut("\n\n".join(p for p in paras if p), max_chars)
    return text, (paras[0] if paras else ""), tag


def clean_name(name):
    ws = name.split()
    while ws and (ws[-1] in NAME_TAIL or ws[-1].lower() in NAME_TAIL):
        ws.pop()
    if not ws or ws[0] in NOT_NAMES or ws[0] in MONTHS or len(ws) > 5:
        return None
    out = " ".join(ws).rstrip(".,")
    # A trailing full stop belongs to an initial ("A.P.") but not to a sentence's end.
    if name.rstrip().endswith(".") and re.search(r"\b[A-Z]\.$", " ".join(ws)):
        out = " ".join(ws)
    return out if len(out) >= 2 else None


def several(first, m):
    """The name after "by" is one of several ("by A and B", "by A, B"), or not the whole name:
    an adjective before a noun ("the Swedish company Upright"), a product before its version
    ("Windows 3.1")."""
    rest = first[m.end():]
    return re.match(r"\s*(?:,\s*[A-Z]|and\s+[A-Z]|&|\d|[a-z]+\s+[A-Z])", rest) is not None


def partial_place(first, m):
    """The place after "at" / "in" is one of several, or a name cut at a hyphen or digit
    ("Carnegie-Mellon")."""
    return re.match(r"(?:-|\s*\d|\s+and\s+[A-Z])", first[m.end():]) is not None


def own_clause(first, start):
    """The verb at start belongs to the entry: its sentence has no relative pronoun before it."""
    sentence_start = max(first.rfind(". ", 0, start) + 1, 0)
    return not RELATIVE.search(first[sentence_start:start])


def subject(head, tag):
    noun = TAG_NOUNS.get(tag or "")
    return f"{noun} {head}" if noun else head


def candidates(doc, first, tag, head, grams):
    key = doc["_id"]
    x = subject(head, tag)
    out = []

    def add(template, question, answer):
        c = {"question": question, "answers": [answer], "doc_id": key, "template": template}
        if tools.check(c, doc, grams):
            out.append(c)

    for m in BY.finditer(first):
        name = clean_name(m.group(2))
        if name and own_clause(first, m.start()) and not several(first, m):
            who = rq.stable_pick(MAKING[m.group(1)][0], key + "who")
            form = rq.stable_pick(["Who {v} {x}?", "Which person or organisation {v} {x}?",
                                   "{X}: who {v} it?"], key + "whoform")
            add("who", form.format(v=who, x=x, X=x[0].upper() + x[1:]), name)
    for m in AT.finditer(first):
        place = clean_name(m.group(2))
        if place and own_clause(first, m.start()) and not partial_place(first, m):
            verb = rq.stable_pick(MAKING[m.group(1)][1], key + "where")
            form = rq.stable_pick(["Where was {x} {v}?", "At which place was {x} {v}?"],
                                  key + "whereform")
            add("where", form.format(v=verb, x=x), place)
    for m in BASED.finditer(first):
        place = clean_name(m.group(2))
        if place and own_clause(first, m.start()) and not partial_place(first, m):
            form = rq.stable_pick(["Where is {x} based?", "In which place is {x} found?"],
                                  key + "basedform")
            add("where", form.format(x=x), place)
    if tag == "person":
        m = PERSON.match(first)
        if m and own_clause(first, m.start()) and m.group(2) not in NOT_TRADES:
            phrase = m.group(1).split()
            noun = m.group(2)
            answers = [noun]
            if len(phrase) >= 2 and phrase[-2].islower() and not phrase[-2].endswith(
                    ADJECTIVE_ENDS) and phrase[-2] not in PREPOSITIONS:
                answers.insert(0, f"{phrase[-2]} {noun}")
            form = rq.stable_pick(["What was {x}'s profession?", "What did {x} do for a living?",
                                   "What line of work was {x} in?", "What was {x} by trade?"],
                                  key + "kindform")
            c = {"question": form.format(x=head), "answers": answers, "doc_id": key,
                 "template": "kind"}
            if tools.check(c, doc, grams):
                out.append(c)
    for m in PURPOSE.finditer(first):
        if not own_clause(first, m.start()):
            continue
        words = m.group(1).split()
        kept = []
        for w in words:
            if w in PREPOSITIONS and len(kept) >= 2:
                break
            kept.append(w)
        while kept and kept[-1] in PREPOSITIONS:
            kept.pop()
        if not 2 <= len(kept) <= 5:
            continue
        form = rq.stable_pick(["What is {x} used for?", "What purpose does {x} serve?",
                               "What is the purpose of {x}?"], key + "purposeform")
        add("purpose", form.format(x=x), " ".join(kept))
    for m in YEAR.finditer(first):
        if own_clause(first, m.start()):
            verb = rq.stable_pick(MAKING[m.group(1)][1], key + "year")
            form = rq.stable_pick(["In what year was {x} {v}?", "When was {x} {v}?",
                                   "Which year saw {x} {v}?"], key + "yearform")
            add("year", form.format(v=verb, x=x), m.group(2))
    return out


def build(args):
    path = tools.debian_file("dict-foldoc", FOLDOC, args.cache)
    text = gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
    raw = entries(text)
    heads = collections.Counter(h.lower() for h, _ in raw)
    docs, firsts = [], {}
    seen = collections.Counter()
    for head, body in raw:
        text, first, tag = document(head, body, args.max_chars)
        if not text.strip():
            continue
        base = "foldoc:" + re.sub(r"\s+", "_", head)
        seen[base] += 1
        doc_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
        docs.append({"_id": doc_id, "title": head, "text": text})
        if heads[head.lower()] == 1:
            firsts[doc_id] = (first, tag, head)
    cands = {}
    for d in docs:
        if d["_id"] not in firsts:
            continue
        first, tag, head = firsts[d["_id"]]
        grams = rq.ngrams(rq.words(d["title"] + "\n" + d["text"]))
        cs = candidates(d, first, tag, head, grams)
        if cs:
            cands[d["_id"]] = cs
    print(f"glossary: {len(raw)} FOLDOC entries from {path}, {len(docs)} documents, "
          f"{len(cands)} with a question")
    tools.pick_and_write("glossary", docs, cands, args, strict=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tools.split_arguments(ap)
    ap.add_argument("--max-chars", type=int, default=6000)
    tools.debian_cache_argument(ap)
    build(ap.parse_args())


if __name__ == "__main__":
    main()
