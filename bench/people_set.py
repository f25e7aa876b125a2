#!/usr/bin/env python3
"""A short-answer question set about people's lives, from WordNet's glosses of real people.

The other real sets ask for commands, options, fields, definitions and who made what; the
questions a reader of biographies asks (what someone did for a living, in what capacity they
served, where they were born, in what year they were born or died, which country they were
from) had a few dozen dev questions among them, and the ranker's weights for such answers
came from text that seldom holds one. WordNet 3.0 (Princeton; Debian's wordnet-base) glosses
3,815 real people, each a short biography written by its lexicographers: "United States
general who served as chief of staff and commanded Allied forces in the South Pacific during
World War II; he accepted the surrender of Japan (1880-1964)".

  corpus    one document per person (a noun.person synset with an instance hypernym): title =
            the name (the synset's first form of two words or more, else its first), text = the
            gloss; id `wordnet:OFFSET`.
  questions from the gloss, by five patterns of English:
    kind         the noun phrase after the nationality that opens the gloss ("United States
                 film actress" -> "film actress", "actress"), when its last word is a trade
                 rather than a relation or a rank (son, king, saint, ...)
    role         "served / worked / spent ... as [a] R" -> "In what capacity did X serve?"
    nationality  the capitalised words opening the gloss ("United States", "French")
    born / died  the years of "(1879-1955)" or "(born in 1930)"; not BC, not circa
    birthplace   "born in P" with P capitalised (a country or a town)
            Each kind has several phrasings (picked by a stable hash of the person), none
            using the gloss's own wording beyond the name.

The common filters of bench/answer_set_tools.py apply: every answer verbatim in its document,
none in the question, no run of 6 words shared with the document; one question per document,
of the least used template; seeded shuffle and split into dev (--dev) and test (--test) by
document. Names several synsets share are not asked about.

Source: wordnet-base's /usr/share/wordnet/data.noun where installed; else the package is
fetched once with `apt-get download wordnet-base` into --cache and unpacked with dpkg-deb.

Layout: OUT/people/corpus.jsonl, OUT/people/dev.jsonl, OUT/people/test.jsonl.

Usage: python3 bench/people_set.py --out DIR [--seed 7] [--dev 150] [--test 250]
"""
import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answer_set_tools as tools  # noqa: E402
import real_qa as rq  # noqa: E402

DATA_NOUN = "usr/share/wordnet/data.noun"
# WordNet's lexicographer file of people (lexnames(5WN): noun.person).
PERSON_FILE = 18
# Nouns of a person's relations, ranks or standing, not of a trade.
NOT_TRADES = {"son", "daughter", "father", "mother", "wife", "husband", "brother", "sister",
              "king", "queen", "emperor", "empress", "prince", "princess", "pharaoh", "saint",
              "god", "goddess", "leader", "member", "founder", "head", "ruler", "patriarch",
              "heroine", "hero", "name", "one", "family", "dynasty", "people", "tribe"}
# Words that end the trade's noun phrase.
PHRASE_END = {"who", "whose", "whom", "noted", "known", "remembered", "famous", "best", "and",
              "of", "in", "at", "for", "from", "with", "during", "after", "before", "under",
              "to", "by", "on", "that", "which", "as"}
ROLE = re.compile(r"\b(?:served|worked|acted|spent [a-z ]{1,40}? )\s*as\s+(?:an?\s+|the\s+)?"
                  r"([a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?(?:\s+of\s+(?!the\b|a\b|an\b)[a-z]+)?)"
                  r"(?=\s+(?:of|in|for|to|during|under|and|at|from|with|until|before|after)\b"
                  r"|[;,()]|$)")
YEARS = re.compile(r"\((\d{3,4})-(\d{3,4})\)$")
BORN_YEAR = re.compile(r"\(born in (\d{3,4})\)$")
BORN_PLACE = re.compile(r"\bborn in ((?:[A-Z][\w'-]+)(?:\s+[A-Z][\w'-]+){0,2})")
OPENING = re.compile(r"^((?:[A-Z][\w'-]*\s+){1,3})")

KIND = ["What was {x}'s profession?", "What kind of work did {x} do?",
        "What was {x}'s calling?", "What was {x}'s trade or profession?"]
ROLE_Q = ["In what capacity did {x} serve?", "What position did {x} fill?",
          "What role did {x} take on?"]
NATIONALITY = ["What nationality was {x}?", "What was {x}'s nationality?"]
BORN = ["In what year was {x} born?", "What was {x}'s year of birth?"]
DIED = ["In what year did {x} die?", "When did {x} pass away?"]
BIRTHPLACE = ["Where was {x} born?", "What was {x}'s birthplace?"]


def people(path):
    """(offset, [names], gloss) of every noun.person synset with an instance hypernym: a real
    (or mythical) individual rather than a kind of person."""
    out = []
    for line in open(path, encoding="latin-1"):
        if line.startswith("  ") or " | " not in line:
            continue  # the licence header
        head, gloss = line.split(" | ", 1)
        f = head.split()
        if int(f[1]) != PERSON_FILE:
            continue
        count = int(f[3], 16)
        names = [f[4 + 2 * i].replace("_", " ") for i in range(count)]
        pointers = int(f[4 + 2 * count])
        symbols = f[5 + 2 * count:5 + 2 * count + 4 * pointers:4]
        if "@i" in symbols:
            # Examples ("; \"...\"") are not part of the gloss.
            out.append((f[0], names, gloss.split('; "')[0].strip()))
    return out


def title(names):
    full = [n for n in names if len(n.split()) >= 2]
    return re.sub(r"\(\w+\)$", "", (full or names)[0]).strip()


def kind(gloss):
    """The trade's noun phrase after the opening nationality, and its last word."""
    m = OPENING.match(gloss)
    if not m:
        return None
    rest = gloss[m.end():].split()
    phrase = []
    for w in rest:
        bare = w.rstrip(";,()")
        if not re.fullmatch(r"[a-z][a-z-]*", bare) or bare in PHRASE_END:
            break
        phrase.append(bare)
        if bare != w:
            break
    if not 1 <= len(phrase) <= 3 or phrase[-1] in NOT_TRADES:
        return None
    return " ".join(phrase), phrase[-1]


def candidates(doc, x, gloss, grams):
    key = doc["_id"]
    out = []

    def add(template, forms, answers):
        q = rq.stable_pick(forms, key + template).format(x=x)
        c = {"question": q, "answers": answers, "doc_id": key, "template": template}
        if tools.check(c, doc, grams):
            out.append(c)

    k = kind(gloss)
    if k:
        add("kind", KIND, [k[0]] if k[0] == k[1] else [k[0], k[1]])
        nationality = OPENING.match(gloss).group(1).strip()
        if nationality.split()[-1] not in ("Old", "New") and not nationality.startswith("("):
            add("nationality", NATIONALITY, [nationality])
    for m in ROLE.finditer(gloss):
        role = m.group(1).split()
        if role[-1] not in NOT_TRADES:
            add("role", ROLE_Q, [" ".join(role)])
        break
    years = YEARS.search(gloss)
    if years and int(years.group(1)) < int(years.group(2)):
        add("born", BORN, [years.group(1)])
        add("died", DIED, [years.group(2)])
    born = BORN_YEAR.search(gloss)
    if born:
        add("born", BORN, [born.group(1)])
    place = BORN_PLACE.search(gloss)
    if place:
        add("birthplace", BIRTHPLACE, [place.group(1)])
    return out


def build(args):
    path = tools.debian_file("wordnet-base", DATA_NOUN, args.cache)
    rows = people(path)
    titles = collections.Counter(title(names).lower() for _, names, _ in rows)
    docs, cands = [], {}
    for offset, names, gloss in rows:
        x = title(names)
        doc = {"_id": f"wordnet:{offset}", "title": x, "text": gloss}
        docs.append(doc)
        if titles[x.lower()] > 1:
            continue
        grams = rq.ngrams(rq.words(doc["title"] + "\n" + doc["text"]))
        cs = candidates(doc, x, gloss, grams)
        if cs:
            cands[doc["_id"]] = cs
    print(f"people: {len(rows)} people of WordNet from {path}, {len(cands)} with a question")
    tools.pick_and_write("people", docs, cands, args, strict=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tools.split_arguments(ap)
    tools.debian_cache_argument(ap)
    build(ap.parse_args())


if __name__ == "__main__":
    main()
