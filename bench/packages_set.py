#!/usr/bin/env python3
"""A short-answer question set of records of fields, from Debian's binary package index.

The records set of bench/real_answer_sets.py reads crates' manifests, Python packages' metadata
and AppStream components; this one reads the archive's own records, the stanzas of the
`Packages` index of this machine's Debian release (main, amd64; 63,436 packages in bookworm),
with their long descriptions from the release's `Translation-en` (the index itself carries
only the synopsis and a Description-md5 since Debian moved the long texts out).

  corpus    one document per package, --documents of them (3,000), drawn (seeded) from the
            source packages, one binary package each: the one named as its source, else a
            program before a library (lib*, gir1.2-*), a library before its -dev package, that
            before its -doc, -data, -common, -examples or -tests package, the shortest name
            first. Left out: transitional and dummy packages (by their synopsis), -dbg and
            -dbgsym packages. title = the package name, text = "Key: value" lines (values
            verbatim)
              Package, Version, Section, Maintainer, Homepage, Depends (its first
              DEPENDS_KEPT relations, then ", ..."),
            a blank line, the synopsis, and the long description (one line per paragraph,
            a list item or a preformatted line on a line of its own), cut to the first
            --max-chars characters on whole lines; id `deb:NAME`. The index's other fields
            (Filename, Size, MD5sum, SHA256, Description-md5, Tag, Priority, ...) are dropped.
  questions naming the package (as "NAME", "the NAME package" or "the package NAME", by a
            stable hash of the name), one kind each, several phrasings each (by a stable hash),
            none using the field's own word:
    maintainer  "Who looks after X in Debian?" (answer: the Maintainer's name without its
                <e-mail> and quotes, "Debian Python Team")
    homepage    "Where on the web does the project behind X live?" (the Homepage URL)
    section     "Under which subject is X filed in the Debian archive?" ("utils", "sound")
    version     "Which release of X does the archive carry?" (the Version string, and its
                upstream part, no epoch or Debian revision, when that has a dot)
            and, not naming it:
    name        the package named by its synopsis' first clause (no " - qualifier" such as
                "- Rust source code", no parentheses), reworded as real_answer_sets.py rewords
                summaries: "Which Debian package converts html to pango?", "What is the name
                of the hexadecimal editor for binary files packaged in Debian?" (answer: the
                name); only a clause of 3+ words that no other package of the index has, not
                a verb reading of a synopsis that opens with a word both noun and verb
                ("Free fonts for ...") or ends in a noun such as "module" or "library", and
                not when the name's stem ("foo" of python3-foo, libfoo-dev,
                golang-github-owner-foo-dev) is a word of the question.

The common filters of bench/answer_set_tools.py apply: every answer verbatim in its document,
none in the question, no run of 6 words shared with the document (so a synopsis is asked
about only where it is short or the rewording breaks its runs); answers in at most 20
documents preferred; one question per document, of the least used template; seeded shuffle
and split into dev (--dev) and test (--test) by document. Package names are unique in the
index, and one binary per source keeps siblings (same homepage, maintainer, version) out.

Source: the release's index, fetched once into --cache/packages-index/RELEASE/ with apt's own
downloader: `apt-get indextargets` gives the mirror of the sources list's release (the suite
named as /etc/os-release's VERSION_CODENAME, main), `/usr/lib/apt/apt-helper download-file`
fetches its InRelease (checked with gpgv against apt's keyrings), then
main/binary-amd64/Packages.xz and main/i18n/Translation-en.xz, each checked against the
SHA256 that InRelease gives. A second run reads the cached files and fetches nothing; apt's
own lists (/var/lib/apt/lists) are not touched. --packages FILE reads a given
Packages file instead (plain, .xz, .gz or .bz2; long descriptions from its own Description
field, or from --translations FILE).

Layout: OUT/packages/corpus.jsonl, OUT/packages/dev.jsonl, OUT/packages/test.jsonl, and
OUT/packages/test-100.jsonl (the first 100 test questions, a random sample).

Usage: python3 bench/packages_set.py --out DIR [--seed 7] [--dev 150] [--test 250]
       [--documents 3000] [--max-chars 6000] [--cache DIR]
       [--packages FILE [--translations FILE]]
"""
import argparse
import bz2
import collections
import glob
import gzip
import lzma
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answer_set_tools as tools  # noqa: E402
from prose_sources import trivially_named  # noqa: E402
import real_qa as rq  # noqa: E402
import real_sets as rs  # noqa: E402

ARCH = "amd64"
COMPONENT = "main"
INDEXES = {"packages": f"{COMPONENT}/binary-{ARCH}/Packages",
           "translations": f"{COMPONENT}/i18n/Translation-en"}
COMPRESSIONS = (".xz", ".gz", ".bz2", "")
APT_HELPER = "/usr/lib/apt/apt-helper"
KEYRINGS = ["/usr/share/keyrings/debian-archive-keyring.gpg", "/etc/apt/trusted.gpg",
            "/etc/apt/trusted.gpg.d/*.gpg"]
DEPENDS_KEPT = 6
TEST_HEAD = 100
# Binary packages that are not the program itself: its library, then its headers, then its
# documentation or data.
LIBRARY = re.compile(r"^(?:lib|gir1\.2-)")
AUXILIARY = re.compile(r"-(dev|prof|doc|docs|data|common|examples|tests?)$")
NOT_DOCUMENTS = re.compile(r"-(dbg|dbgsym)$")
NOT_PACKAGES = re.compile(r"\b(transitional|dummy)\b", re.I)
# What a package name adds to the thing it packages ("python3-foo", "libfoo-dev").
NAME_AFFIXES = re.compile(r"^(?:python3?-|lib(?:rust-|ghc-)?|golang-(?:(?:github|gitlab)-[^-]+-)?|"
                          r"r-cran-|r-bioc-|node-|ruby-|php-|perl-|elpa-|fonts-|gir1\.2-)|"
                          r"(?:-dev|-perl|-java|-ocaml|-common|-bin|-utils?|-tools?|[\d.-]*\d)$")

# {x}: the package, as the question names it.
NAMING = ["{}", "the {} package", "the package {}"]
TEMPLATES = {
    "maintainer": ["Who looks after {x} in Debian?",
                   "Which person or team takes care of {x} for Debian?",
                   "Who is responsible for {x} in Debian?",
                   "Who keeps {x} in shape for the Debian archive?"],
    "homepage": ["Where on the web does the project behind {x} live?",
                 "What web address does Debian give for the upstream project of {x}?",
                 "Where can I read about {x} online?",
                 "Which site on the internet belongs to the project that makes {x}?"],
    "section": ["Under which subject is {x} filed in the Debian archive?",
                "How does the Debian archive classify {x}?",
                "Which category of the archive lists {x}?",
                "In what part of Debian's subject listing is {x} found?"],
    "version": ["Which release of {x} does the archive carry?",
                "What release number does Debian give {x}?",
                "Which upstream release and Debian revision of {x} is shipped?",
                "What is the release string of {x} in this Debian index?"],
}
NAME_TEMPLATES_VERB = ["Which Debian package {v3}?", "What is the name of the package that {v3}?",
                       "Which package can I install to {bare}?"]
NAME_TEMPLATES_NP = ["Which Debian package is the {np}?",
                     "What is the name of the {np} packaged in Debian?",
                     "Which package in the Debian archive provides the {np}?"]
NAME_TEMPLATES_NP_PLURAL = ["Which Debian package contains the {np}?",
                            "Which package in the Debian archive provides the {np}?"]
# The fewest words of a synopsis' clause that name one thing ("Compression library" does not).
NAME_MIN_WORDS = 3
# Opening words of a synopsis that read as a verb only before an object's determiner
# ("Free fonts for ...", "Access control list utilities", but "Check the spelling ...").
AMBIGUOUS_VERBS = {"free", "open", "clean", "close", "complete", "clear", "back", "access",
                   "query", "handle", "sort", "test", "trace", "log", "stream", "map", "link",
                   "format", "process", "control", "set", "display", "record", "report", "patch",
                   "cache", "match", "copy", "check", "print", "search", "edit", "build", "mirror",
                   "manage", "monitor", "store", "host", "play", "view", "show", "run", "first",
                   "push", "package", "request", "lookup", "scan", "screen", "plot", "filter"}
# A synopsis ending in one of these is a noun phrase even when it opens with a verb ("shift
# and scale time Perl module").
NOUN_ENDS = {"module", "modules", "library", "libraries", "tool", "tools", "utility", "utilities",
             "program", "plugin", "plugins", "extension", "bindings", "wrapper", "driver",
             "client", "server", "framework", "package", "api", "daemon", "application"}
LY_ADJECTIVES = {"friendly", "user-friendly", "daily", "weekly", "monthly", "early", "family",
                 "lovely", "holy", "only"}
DETERMINERS = {"a", "an", "the", "your", "its", "their", "all", "any", "some", "and", "or",
               "multiple", "several", "many", "one", "two"}


# ---------------------------------------------------------------- the index

def run_quiet(cmd):
    """Runs cmd; its output is shown only when it fails."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"packages: {cmd[0]} is not installed; pass --packages FILE")
    if p.returncode != 0:
        sys.exit(f"packages: {' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    return p.stdout


def release_base():
    """(base URL of the release's dists/ folder, release name) of this machine's sources list:
    the main component's suite named as /etc/os-release's VERSION_CODENAME, else the first suite
    that is not -updates, -security or -backports."""
    out = run_quiet(["apt-get", "indextargets", "--no-release-info",
                     "--format", "$(BASE_URI)\t$(RELEASE)",
                     "Identifier: Packages", f"Component: {COMPONENT}"])
    targets = list(dict.fromkeys(tuple(l.split("\t")) for l in out.splitlines() if "\t" in l))
    if not targets:
        sys.exit("packages: apt lists no Packages index of main; pass --packages FILE")
    codename = ""
    if os.path.exists("/etc/os-release"):
        m = re.search(r"(?m)^VERSION_CODENAME=\"?([\w-]+)", open("/etc/os-release").read())
        codename = m.group(1) if m else ""
    for base, release in targets:
        if release == codename:
            return base, release
    plain = [t for t in targets if not re.search(r"-(updates|security|backports)$", t[1])]
    return (plain or targets)[0]


def keyrings():
    """The keyrings apt trusts: the sources' Signed-By files, the archive keyring, trusted.gpg.d."""
    paths = []
    for src in glob.glob("/etc/apt/sources.list") + glob.glob("/etc/apt/sources.list.d/*"):
        if src.endswith((".list", ".sources")):
            paths += re.findall(r"(?:Signed-By:\s*|signed-by=)(/[^\s\]]+)", open(src).read())
    for k in KEYRINGS:
        paths += sorted(glob.glob(k))
    return [p for p in dict.fromkeys(paths) if os.path.isfile(p)]


def download(url, dest, sha256=None):
    """url into dest by apt's downloader (checking sha256 where given), through dest.part so a
    cut download never looks cached."""
    part = dest + ".part"
    cmd = [APT_HELPER, "download-file", url, part] + ([f"SHA256:{sha256}"] if sha256 else [])
    run_quiet(cmd)
    os.replace(part, dest)
    print(f"packages: fetched {url}", flush=True)


def release_hashes(folder, base):
    """{path: (sha256, size)} of the release's InRelease, fetched once into folder and checked
    with gpgv against apt's keyrings."""
    path = os.path.join(folder, "InRelease")
    if not os.path.exists(path):
        download(base + "InRelease", path + ".unchecked")
        rings = keyrings()
        if not rings:
            sys.exit("packages: no apt keyring to check InRelease with")
        run_quiet(["gpgv"] + [a for r in rings for a in ("--keyring", r)] + [path + ".unchecked"])
        os.replace(path + ".unchecked", path)
    text = open(path, encoding="utf-8").read()
    sha = text.split("\nSHA256:\n", 1)[1] if "\nSHA256:\n" in text else ""
    out = {}
    for line in sha.splitlines():
        if not line.startswith(" "):
            break
        digest, size, name = line.split()
        out[name] = (digest, int(size))
    return out


def fetch_index(cache):
    """{"packages": path, "translations": path} of the release's index files, from cache when
    there, else fetched (checked against InRelease) into cache/packages-index/RELEASE."""
    base, release = release_base()
    folder = os.path.join(os.path.expanduser(cache), "packages-index", release)
    os.makedirs(folder, exist_ok=True)
    paths = {}
    for kind, index in INDEXES.items():
        name = os.path.basename(index)
        have = [os.path.join(folder, name + c) for c in COMPRESSIONS
                if os.path.exists(os.path.join(folder, name + c))]
        if have:
            paths[kind] = have[0]
            continue
        hashes = release_hashes(folder, base)
        listed = [index + c for c in COMPRESSIONS if index + c in hashes]
        if not listed:
            sys.exit(f"packages: {base}InRelease lists no {index}")
        dest = os.path.join(folder, os.path.basename(listed[0]))
        download(base + listed[0], dest, hashes[listed[0]][0])
        paths[kind] = dest
    return paths, f"{base} ({release}, {COMPONENT}, {ARCH})"


def open_text(path):
    opener = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}.get(
        os.path.splitext(path)[1], open)
    return opener(path, "rt", encoding="utf-8", errors="replace")


def stanzas(path):
    """The deb822 stanzas of path as {field: value}; continuation lines kept, joined by "\\n"."""
    out, cur, key = [], {}, None
    with open_text(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if cur:
                    out.append(cur)
                cur, key = {}, None
            elif line[0] in " \t" and key:
                cur[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                cur[key] = value.strip()
    if cur:
        out.append(cur)
    return out


def translations(path):
    """{Description-md5: description} of a Translation-en file."""
    return {s["Description-md5"]: s["Description-en"] for s in stanzas(path)
            if "Description-md5" in s and "Description-en" in s}


# ---------------------------------------------------------------- records

def long_description(lines):
    """The extended description of a control field's continuation lines: one line per
    paragraph (" ." separates them), a list item or a preformatted line (an extra space of
    indent) on a line of its own, its indented continuation joined to it."""
    out, cur, item = [], [], False
    for raw in lines:
        line = raw[1:] if raw.startswith(" ") else raw
        body = rs.squash(line)
        if line.strip() == ".":
            if cur:
                out.append(" ".join(cur))
            cur, item = [], False
        elif line[:1] in (" ", "\t"):
            if item and not re.match(r"[*+o-]\s", body) and cur:
                cur.append(body)
            else:
                if cur:
                    out.append(" ".join(cur))
                cur, item = [body], True
        else:
            if item and cur:
                out.append(" ".join(cur))
                cur = []
            cur.append(body)
            item = False
    if cur:
        out.append(" ".join(cur))
    return [l for l in out if l]


def depends(value):
    rels = [rs.squash(r) for r in value.split(",") if r.strip()]
    return ", ".join(rels[:DEPENDS_KEPT]) + (", ..." if len(rels) > DEPENDS_KEPT else "")


def maintainer_name(value):
    name = re.sub(r"\s*<[^>]*>\s*$", "", value).strip().strip('"').strip()
    return name if name and "@" not in name else ""


def upstream(version):
    """The upstream part of a Debian version: no epoch, no Debian revision."""
    v = version.split(":", 1)[1] if re.match(r"\d+:", version) else version
    return v.rsplit("-", 1)[0] if "-" in v else v


def record(s, texts, max_chars):
    """The document of a Packages stanza and the facts its questions ask for."""
    name = s["Package"]
    synopsis, _, rest = s.get("Description", "").partition("\n")
    if not rest and s.get("Description-md5") in texts:
        rest = texts[s["Description-md5"]].partition("\n")[2]
    synopsis = rs.squash(synopsis)
    fields = [("Package", name), ("Version", s.get("Version", "")),
              ("Section", s.get("Section", "")), ("Maintainer", rs.squash(s.get("Maintainer", ""))),
              ("Homepage", s.get("Homepage", "")), ("Depends", depends(s.get("Depends", "")))]
    text = "\n".join(f"{k}: {v}" for k, v in fields if v)
    body = "\n".join([synopsis] + long_description(rest.split("\n") if rest else []))
    text = rq.cut(text + "\n\n" + body, max_chars)
    return {"_id": f"deb:{name}", "title": name, "text": text, "name": name,
            "fields": dict(fields), "synopsis": synopsis}


def source_of(s):
    return (s.get("Source") or s["Package"]).split()[0]


def representative(binaries, source):
    """The binary package that stands for its source: the one of the source's name, else the
    program before its library, the library before its headers, the headers before its
    documentation or data; the shortest name first."""
    def rank(name):
        m = AUXILIARY.search(name)
        return (2 if m.group(1) in ("dev", "prof") else 3) if m else 1 if LIBRARY.match(name) else 0
    return min(binaries, key=lambda s: (s["Package"] != source, rank(s["Package"]),
                                        len(s["Package"]), s["Package"]))


def sample(all_stanzas, n, seed):
    """n packages, one per source (seeded), none transitional, dummy or debug symbols."""
    by_source = collections.defaultdict(list)
    for s in all_stanzas:
        if NOT_DOCUMENTS.search(s["Package"]) or NOT_PACKAGES.search(
                s.get("Description", "").split("\n")[0]):
            continue
        by_source[source_of(s)].append(s)
    chosen = [representative(bs, src) for src, bs in sorted(by_source.items())]
    if len(chosen) > n:
        chosen = random.Random(f"{seed}-packages-sample").sample(chosen, n)
    return sorted(chosen, key=lambda s: s["Package"]), len(by_source)


# ---------------------------------------------------------------- questions

def stem(name):
    """What the package name names: "foo" of python3-foo, libfoo-dev, golang-github-x-foo."""
    prev = None
    while prev != name:
        prev, name = name, NAME_AFFIXES.sub("", name)
    return name


def name_clause(synopsis):
    """The synopsis' first clause without its " - qualifier" ("... - shared library",
    "... - Node.js module"), or None; None too where a parenthesis sits inside a word
    ("gzip (de)compression"), which first_clause would run together."""
    if re.search(r"\w\([^()]*\)\w|\s\([^()]*\)\w", synopsis):
        return None
    return rq.first_clause(re.sub(r"\s+[-\u2013\u2014]+\s+.*$", "", synopsis))


class Capitals:
    """Which words are names: written capitalised at least as often as not inside synopses
    (or never seen there)."""

    def __init__(self, synopses):
        self.lower, self.upper = collections.Counter(), collections.Counter()
        for syn in synopses:
            for w in syn.split()[1:]:
                if re.fullmatch(r"[A-Za-z][a-z-]+", w):
                    (self.lower if w.islower() else self.upper)[w.lower()] += 1

    def restore(self, np, clause):
        """np with its first word capitalised again where the clause's is a name ("go
        implementation of ICE" -> "Go implementation of ICE") or the clause is in Title Case
        ("Generalized Estimation Equation Solver")."""
        ws = [w for w in clause.split() if w.lower() not in rq.ARTICLES]
        first = ws[0] if ws else ""
        head, _, rest = np.partition(" ")
        title_case = sum(w[:1].isupper() for w in ws) * 2 > len(ws)
        if head == first.lower() != first and (
                title_case or self.upper[head] >= self.lower[head]):
            return first + (" " + rest if rest else "")
        return np


def name_question(clause, key, capitals):
    """"Which Debian package ...?" from the synopsis' clause, or None."""
    ws = [w.lower().strip(",") for w in clause.split()]
    if len(ws) < NAME_MIN_WORDS:
        return None
    vf = None
    if not (ws[0] in AMBIGUOUS_VERBS and ws[1] not in DETERMINERS or ws[1] == "based"
            or ws[-1] in NOUN_ENDS):
        vf = rq.verb_forms(clause)
    if vf:
        return rq.stable_pick(NAME_TEMPLATES_VERB, key).format(v3=vf[0], bare=vf[1])
    np = rq.noun_phrase(clause)
    if not np or rq.as_verb(ws[0]) or ws[1] in rq.ARTICLES:
        return None  # a verb ("Implements the ...") that verb_forms does not know
    words = np.split()
    cut = next((i for i, w in enumerate(words) if i and w.lower() in rq.PREPOSITIONS),
               len(words))
    first = words[0].lower()
    if first.endswith("ly") and first not in LY_ADJECTIVES or first.endswith("ing") and cut > 2:
        return None  # "easily mock out ...", "handling volumetric data": not a noun phrase
    np = capitals.restore(np, clause)
    plural = re.search(r"[^su]s$", words[cut - 1].lower()) is not None
    return rq.stable_pick(NAME_TEMPLATES_NP_PLURAL if plural else NAME_TEMPLATES_NP,
                          key).format(np=np)


def candidates(r, doc, grams, unique_clause, capitals):
    key = doc["_id"]
    x = rq.stable_pick(NAMING, key).format(r["name"])
    f = r["fields"]
    out = []

    def add(template, question, answers):
        answers = [a for a in dict.fromkeys(answers) if a]
        c = {"question": question[0].upper() + question[1:], "answers": answers,
             "doc_id": key, "template": template}
        if tools.check(c, doc, grams):
            out.append(c)

    def ask(template):
        return rq.stable_pick(TEMPLATES[template], key + template).format(x=x)

    add("maintainer", ask("maintainer"), [maintainer_name(f["Maintainer"])])
    if re.match(r"https?://\S+$", f["Homepage"]):
        add("homepage", ask("homepage"), [f["Homepage"]])
    if f["Section"]:
        add("section", ask("section"), [f["Section"]])
    if f["Version"]:
        up = upstream(f["Version"])
        add("version", ask("version"), [f["Version"]] + ([up] if "." in up else []))
    clause = name_clause(r["synopsis"]) if unique_clause else None
    q = name_question(clause, key + "name", capitals) if clause else None
    core = stem(r["name"])
    if q and not trivially_named(r["name"], q) and not (
            len(core) >= 3 and (tools.whole(core, q) or trivially_named(core, q))):
        add("name", q, [r["name"]])
    return out


def clause_key(synopsis):
    clause = name_clause(synopsis)
    return rs.norm(clause) if clause else None


def build(args):
    if args.packages:
        paths = {"packages": args.packages, "translations": args.translations}
        where = args.packages
    else:
        paths, where = fetch_index(args.cache)
    all_stanzas = [s for s in stanzas(paths["packages"]) if s.get("Package")]
    texts = translations(paths["translations"]) if paths.get("translations") else {}
    # The first stanza of a name (an index lists each name once per architecture).
    seen, unique = set(), []
    for s in all_stanzas:
        if s["Package"] not in seen:
            seen.add(s["Package"])
            unique.append(s)
    synopses = [s.get("Description", "").split("\n")[0] for s in unique]
    clauses = collections.Counter(clause_key(syn) for syn in synopses)
    capitals = Capitals(synopses)
    chosen, n_sources = sample(unique, args.documents, args.seed)
    records = [record(s, texts, args.max_chars) for s in chosen]
    docs = [{"_id": r["_id"], "title": r["title"], "text": r["text"]} for r in records]
    cands = {}
    for r, d in zip(records, docs):
        grams = rq.ngrams(rq.words(d["title"] + "\n" + d["text"]))
        ck = clause_key(r["synopsis"])
        cs = candidates(r, d, grams, ck is not None and clauses[ck] == 1, capitals)
        if cs:
            cands[d["_id"]] = cs
    with_long = sum(1 for r in records if "\n" in r["text"].split("\n\n", 1)[-1])
    print(f"packages: {len(unique)} packages of {where} ({len(texts)} long descriptions), "
          f"{n_sources} sources with a package kept; {len(docs)} documents ({with_long} with a "
          f"long description), {len(cands)} with a question", flush=True)
    tools.pick_and_write("packages", docs, cands, args, strict=False)
    out = os.path.join(args.out, "packages")
    with open(os.path.join(out, "test.jsonl")) as f:
        head = f.readlines()[:TEST_HEAD]
    with open(os.path.join(out, f"test-{TEST_HEAD}.jsonl"), "w") as f:
        f.writelines(head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tools.split_arguments(ap)
    ap.add_argument("--documents", type=int, default=3000)
    ap.add_argument("--max-chars", type=int, default=6000)
    ap.add_argument("--packages", help="a Packages file (plain, .xz, .gz or .bz2) to read "
                    "instead of fetching the release's")
    ap.add_argument("--translations", help="with --packages: a Translation-en file for the "
                    "long descriptions")
    tools.debian_cache_argument(ap)
    args = ap.parse_args()
    args.out = os.path.expanduser(args.out)
    build(args)


if __name__ == "__main__":
    main()
