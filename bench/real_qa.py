#!/usr/bin/env python3
"""A question-answering set with short answers, from real text already on this machine.

bench/real_sets.py makes retrieval sets from the manual pages and Rust books of
any Debian machine with a Rust toolchain; this script makes, from the same
text, questions whose answers are short strings a reader has to find in one
document, in the NQ-open format that `capstan eval` and bench/qa_peer.py read:

  corpus    every manual page of /usr/share/man/man{1,5,8} (rendered with
            groff by real_sets.py; google-cloud-cli's generated pages left out,
            as there, and its dedupe: short pages and copies dropped),
            id = page name and section (`cp.1`), title = the
            command name(s) of the NAME line, text = the page after its NAME
            section, cut to its first --max-chars characters (whole lines);
            then pages of the Rust books (real_sets.py's rustdoc set, cut the
            same way) drawn at random up to --max-docs documents in all, as
            distractors. The NAME description line is never in the corpus text,
            so a question made from it cannot match a sentence of the page.
  questions made from the structure of the rendered man pages, only from what
            the kept text holds, by templates (the counts are printed):
    name       NAME line "cp - copy files and directories" -> "Which command
               copies files and directories?" (answers: the page's names)
    option     an option entry "-R, -r, --recursive  copy directories
               recursively" -> "Which option of cp copies directories
               recursively?" (answers: the entry's option names; one glued to its
               argument, as groff prints "-p prefix" without fonts, both as
               "-p" and as printed, "-pprefix")
    keyword    a keyword entry of a section-5 page (sshd_config's
               "PermitRootLogin  Specifies whether root can log in ...")
    env        an ENVIRONMENT entry -> "Which environment variable of findmnt
               overrides the default location of the fstab file?"
    file       a FILES entry -> "Where does groupadd keep its group account
               information?" (answer: the path)
    default    an option, keyword or variable entry that states one default
               value (a number, path or word) -> "What does the --timeout
               option of X default to?"
            Descriptions are reworded deterministically: the first clause only,
            parentheses dropped, the imperative verb inflected ("copy" ->
            "copies", "do not" -> "doesn't") and some words swapped from a small
            table of synonyms ("display" <-> "show", "instead of" -> "rather
            than", ...).

A question is kept only if
  - each answer occurs verbatim (case-sensitive, as a whole word or option)
    in its document's kept text, and none occurs in the question;
  - it shares no run of 6 consecutive words with its document (title + text);
  - its description is not ambiguous: no other entry of the same page has the
    same clause or one containing it, and no other page has the same NAME
    description;
Pages are visited in a seeded random order, and from each one question is
taken: of the template used least so far, preferring one with an answer found
in at most 20 documents. The questions are shuffled (seeded) and split into
dev (--dev) and test (--test), one question per page, so no document is in
both; the files keep that shuffled order, so a prefix (qa_peer.py --limit) is
a random sample.

Layout:
  OUT/corpus.jsonl                  {"_id","title","text"}
  OUT/dev.jsonl, OUT/test.jsonl     {"question","answers","doc_id","template"}

Deterministic for a given --seed (same Debian packages and toolchain).

Usage: python3 bench/real_qa.py --out DIR [--seed 7] [--dev 150] [--test 300]
       [--max-docs 3000] [--max-chars 6000]
"""
import argparse
import collections
import glob
import json
import multiprocessing
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_sets as rs  # noqa: E402

NGRAM = 6
MAX_CLAUSE_WORDS = 12

# Base forms of the verbs that open man-page descriptions ("copy files",
# "Specifies whether ..."); a description that opens with anything else is
# not turned into a verb question.
VERBS = set("""
accept access activate add adjust administer advance advertise allocate allow alter analyze
annotate append apply archive ask assign assume attach attempt authenticate avoid back backup begin
benchmark bind block boot bring build bypass cache calculate call cancel capture cause change check
choose clean clear close collect colorize columnate combine communicate compare compile complete
compress compute concatenate configure confirm connect consider construct contain continue control
convert copy correct count create cut deactivate deallocate debug decode decompress decrease
decrypt define delay delete demangle deny describe detach detect determine diff disable disassemble
discard disconnect display do download drop dump edit eject emit emulate enable encode encrypt end
enforce ensure enter erase establish evaluate examine exclude execute exit expand expect explain
export extend extract fail fetch fill filter find finish fix flush fold follow force format forward
free gather generate get give group guess halt handle hide hold identify ignore import include
increase increment indent indicate inhibit initialize initiate insert inspect install interact
interpret introspect invert invoke join keep kill label launch leave limit link list listen load
locate lock log look lookup maintain make manage manipulate map mark match measure merge migrate
modify monitor mount move negate number observe omit open operate optimize order output override
overwrite pack package pad parse pass paste patch pause peek perform permit pick place play poll
power preallocate prefer prepare prepend preserve pretend prevent print probe process produce
prompt protect provide prune publish purge push put query queue quit read reapply reboot rebuild
receive recompress recompute record recover recurse redirect reduce reflect reformat refresh refuse
register reindex reject release reload remove rename reopen reorder repair repeat replace report
request require rescan reset resize resolve restart restore restrict resume retain retrieve retry
return reuse reverse revert rewrite rotate run save scale scan search select send separate serve
set setup share shift show shrink shut shutdown simulate skip sleep sort specify split squeeze
start stash stop store stream strip submit substitute summarize supply suppress swap switch symlink
sync synchronize take tell terminate test toggle trace track transfer transform translate treat
trigger trim truncate try tune turn tweak uncompile unlink unlock unmount unpack unset unshare
unzip update upgrade upload use validate verify view visualize wait warn watch wipe work wrap write
zero zip
""".split())
IRREGULAR_3RD = {"do": "does", "go": "goes", "be": "is", "have": "has"}
ADVERBS = {"never", "always", "only", "also", "automatically", "just", "silently", "quietly",
           "explicitly", "forcibly", "first", "immediately", "recursively", "interactively",
           "instantly"}
# Verb swaps (applied to the opening verb) and word swaps (elsewhere). Kept
# small and meaning-preserving; their job is to avoid copying the page.
VERB_SYN = {"display": "show", "show": "display", "print": "output", "remove": "delete",
            "delete": "remove", "create": "make", "enable": "turn on",
            "disable": "turn off", "ignore": "skip", "prompt": "ask", "generate": "produce",
            "produce": "generate", "check": "verify", "verify": "check", "run": "execute",
            "execute": "run", "keep": "retain", "retain": "keep", "preserve": "keep",
            "allow": "permit", "permit": "allow", "change": "modify", "modify": "change",
            "select": "choose", "choose": "select", "specify": "set", "determine": "decide",
            "suppress": "silence", "omit": "leave out", "exclude": "leave out", "stop": "halt",
            "use": "make use of", "send": "transmit", "list": "enumerate", "set": "define",
            "define": "set", "limit": "restrict"}
PHRASE_SYN = [("instead of", "rather than"), ("do not", "don't"), ("does not", "doesn't"),
              ("cannot", "can't"), ("is not", "isn't"), ("are not", "aren't"),
              ("a number of", "several"), ("in order to", "to"), ("as well as", "and also")]
WORD_SYN = {"each": "every", "every": "each", "specified": "given", "starting": "beginning",
            "beginning": "starting", "information": "info", "whether": "if", "additional": "extra",
            "extra": "additional", "specific": "particular", "containing": "holding",
            "contains": "holds", "filenames": "file names", "large": "big", "multiple": "several",
            "various": "several", "current": "present", "before": "prior to", "given": "specified",
            "existing": "present", "verbose": "detailed", "using": "with", "via": "through"}
NOT_NP_WORDS = {"is", "are", "was", "were", "will", "can", "may", "must", "should", "would",
                "could", "has", "have", "does", "do", "if", "when", "whether", "see", "not",
                "this", "these", "it", "its", "below", "above", "following", "previous", "xxx"}
BAD_START = {"if", "when", "with", "for", "see", "same", "like", "likewise", "this", "these",
             "it", "equivalent", "synonym", "alias", "deprecated", "obsolete", "ignored",
             "note", "as", "by", "in", "on", "to", "default", "only",
             "useful", "currently", "normally", "usually", "otherwise", "also"}
CONTEXT_WORDS = {"above", "below", "following", "previous", "same", "this", "these", "former",
                 "latter", "likewise", "respectively", "etc", "xxx", "help", "version", "usage"}
HELP_OPTS = {"-h", "--help", "-V", "--version", "-?", "--usage", "-help", "-version"}
ARTICLES = {"a", "an", "the"}
NOUN_VERBS = {"group", "list", "set", "number", "name", "log", "map", "key", "order", "record",
              "cache", "view", "file", "index", "lock", "mark", "process", "report", "output",
              "input", "test", "sort", "control", "display", "filter", "format", "link",
              "trace", "track", "patch", "backup", "label", "queue", "wrap", "share", "zero",
              "stream", "package", "object", "target", "time", "flow", "heap", "character"}
PREPOSITIONS = {"for", "of", "to", "in", "on", "that", "which", "with", "from", "used", "by",
                "about", "between", "under", "into", "as"}
HEAD_NOUNS = set("""
file files tool tools program programs utility utilities daemon database configuration format
command commands library interface service manager editor compiler shell server client table
list catalog directory directories data cache script scripts helper wrapper driver frontend
backend viewer browser agent key keys map maps path paths name names log logs filter engine
system protocol mode settings definitions description descriptions database day password
passwords group groups user users account accounts module modules symbols entries information
info options variables variable output input archive
""".split())
NOUN_SUFFIXES = r"(tion|sion|ment|ness|ity|ance|ence|ure|ory|ism|ist|er|ers|or|ors)$"

NAME_TEMPLATES_VERB = ["Which command {v3}?", "What is the name of the program that {v3}?",
                       "Which tool can I use to {bare}?"]
NAME_TEMPLATES_NP_FILE = ["What is the name of the {np}?", "Which manual page describes the {np}?"]
NAME_TEMPLATES_NP_PROG = ["Which program is the {np}?", "What is the name of the {np}?"]
OPTION_TEMPLATES = ["Which option of {cmd} {v3}?", "Which {cmd} flag {v3}?",
                    "When running {cmd}, which option {v3}?", "What flag makes {cmd} {bare}?",
                    "Which {cmd} option would I use to {bare}?"]
KEYWORD_TEMPLATES = ["Which {cmd} keyword {v3}?", "In {cmd}, which setting {v3}?"]
ENV_TEMPLATES_VERB = ["Which environment variable {v3} for {cmd}?",
                      "What environment variable of {cmd} {v3}?"]
ENV_TEMPLATES_NP = ["Which environment variable of {cmd} holds the {np}?",
                    "What environment variable gives {cmd} the {np}?"]
FILE_TEMPLATES_VERB = ["Which file {v3} for {cmd}?", "What file used by {cmd} {v3}?"]
FILE_TEMPLATES_NP_PATH = ["What is the path of the {np} of {cmd}?",
                          "Where is the {np} of {cmd} located?"]
FILE_TEMPLATES_NP = ["Which file holds the {np} for {cmd}?", "Where does {cmd} keep its {np}?"]
DEFAULT_TEMPLATES = {"option": ["What is the default value of the {tag} option of {cmd}?",
                                "What does the {tag} option of {cmd} default to?"],
                     "keyword": ["What is the default value of {tag} in {cmd}?",
                                 "What does {tag} default to in {cmd}?"],
                     "env": ["What is the default value of {tag} for {cmd}?",
                             "If {tag} is not set, what value does {cmd} assume?"]}

DEFAULT_RE = re.compile(r"(?:\([Dd]efault:?\s*|[Dd]efaults? (?:is|to|value is)\s+|[Dd]efault(?: value)?:\s*"
                        r"|[Tt]he default (?:value )?is\s+)(?:(?P<q>[\"'\u201c\u2018])(?P<qv>[^\"'\u201d\u2019]*)"
                        r"[\"'\u201d\u2019]|(?P<v>[^\s\"'\u201d\u2019,;()]+))")
NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
PATH_RE = re.compile(r"[/~][\w./+-]*[\w/]")
WORD_VALUE_RE = re.compile(r"[a-z][\w-]*")
STOP = {"the", "a", "an", "to", "is", "not", "no", "none", "on", "off", "set", "used", "be",
        "that", "this", "it", "as", "of", "in", "for", "and", "or", "from", "zero", "unset",
        "empty", "current", "whatever", "system", "same", "all", "value", "one"}


def words(s):
    return re.findall(r"[a-z0-9]+", s.lower())


def ngrams(ws, n=NGRAM):
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


def stable_pick(options, key):
    """A template chosen by a stable hash of key (Python's hash() is salted)."""
    h = 0
    for ch in key:
        h = (h * 131 + ord(ch)) % 1000003
    return options[h % len(options)]


# ---------------------------------------------------------------- rewording

def third_person(v):
    if v in IRREGULAR_3RD:
        return IRREGULAR_3RD[v]
    if re.search(r"(s|sh|ch|x|z|o)$", v):
        return v + "es"
    if re.search(r"[^aeiou]y$", v):
        return v[:-1] + "ies"
    return v + "s"


def base_of(w):
    """The base form of a third-person verb (specifies -> specify), or None."""
    for b, t in IRREGULAR_3RD.items():
        if w == t:
            return b
    for cand in (w[:-1], w[:-2], w[:-3] + "y"):
        if w.endswith("s") and cand in VERBS and third_person(cand) == w:
            return cand
    return None


def swap_words(s):
    for a, b in PHRASE_SYN:
        s = re.sub(r"(?<![\w-])" + a + r"(?![\w-])", b, s)
    # Only plain lowercase words: never inside an option, path or name.
    return re.sub(r"(?<![\w\-/.=$<'])[a-z]+(?![\w\-/=>'])",
                  lambda m: WORD_SYN.get(m.group(0), m.group(0)), s)


def as_verb(w):
    """The base form of w (any case, a trailing comma allowed) if it is a known
    verb, base or third person; else None."""
    core = w.lower().rstrip(",")
    return core if core in VERBS else base_of(core)


def verb_forms(clause):
    """(third-person form, bare form) of a clause that opens with a verb, or
    with coordinated verbs ("List, create, or delete branches"), both
    reworded, or None."""
    ws = clause.split(" ")
    w0 = ws[0]
    lw = w0.lower()
    if w0 != lw and (w0[1:] != w0[1:].lower() or not w0[:1].isupper()):
        return None  # an acronym or a name, not a verb
    rest = " ".join(ws[1:])
    if sum(w[:1].isupper() for w in ws[1:]) * 2 > len(ws) - 1:
        return None  # Title Case: a name ("Stream Gate Action"), not an order
    if lw in ("do", "does") and ws[1:2] == ["not"] or lw in ("don't", "doesn't"):
        tail = " ".join(ws[2:]) if lw in ("do", "does") else rest
        inner = verb_forms(tail) if tail else None
        return ("doesn't " + inner[1], "not " + inner[1]) if inner else None
    if (lw in ADVERBS or lw.endswith("ly")) and rest:
        inner = verb_forms(rest)
        return (lw + " " + inner[0], lw + " " + inner[1]) if inner else None
    if len(ws) > 1 and (ws[1] in ("of", "is", "are")
                        or ws[1] in ("for", "to") and lw in NOUN_VERBS):
        return None  # "name of ...", "set of ...": a noun
    if len(ws) > 1 and lw in NOUN_VERBS and ws[1].lower() in HEAD_NOUNS and (
            len(ws) == 2 or ws[2].lower() in PREPOSITIONS | {"based", "and", "or"}):
        return None  # "stream editor for ...", "package manager for ...": a noun
    # The opening verbs: "copy", "add or remove", "create, modify, and extract".
    parts, i = [], 0
    while i < len(ws):
        base = as_verb(ws[i])
        if base is None:
            break
        comma = ws[i].endswith(",")
        i += 1
        conj = ws[i] if i < len(ws) and ws[i] in ("and", "or", "and/or") else None
        if conj and i + 1 < len(ws) and as_verb(ws[i + 1]):
            parts.append((base, ("," if comma else "") + " " + conj))
            i += 1
        elif comma and i < len(ws) and as_verb(ws[i]):
            parts.append((base, ","))
        else:
            parts.append((base, ""))
            break
    if not parts or parts[-1][1]:
        return None
    if any(b in NOUN_VERBS for b, _ in parts[1:]) and len(parts) > 1 and i < len(ws) \
            and ws[i].lower() in PREPOSITIONS:
        return None
    v3 = "".join(inflect(b)[0] + sep + " " for b, sep in parts).strip()
    bare = "".join(inflect(b)[1] + sep + " " for b, sep in parts).strip()
    rest = swap_words(" ".join(ws[i:]))
    # "..., and advertise only ...": a later coordinated verb agrees too.
    rest3 = re.sub(r"(,? (?:and|or) )([a-z]+)(?= )",
                   lambda m: m.group(1) + (third_person(m.group(2)) if m.group(2) in VERBS
                                           and m.group(2) not in NOUN_VERBS else m.group(2)), rest)
    return (v3 + (" " + rest3 if rest3 else ""), bare + (" " + rest if rest else ""))


def inflect(base):
    """(third-person form, bare form) of a verb after its synonym swap."""
    new = VERB_SYN.get(base, base)
    verb, particle = (new.split(" ", 1) + [""])[:2]
    return " ".join(x for x in (third_person(verb), particle) if x), new


def noun_phrase(clause, nounish=False):
    """A clause that is a noun phrase ("Per-user configuration file"),
    without its article and with a capitalised first word lowered, or None.
    nounish: where a noun phrase is the likelier reading (FILES entries), a
    first word that is both noun and verb ("Group account information") is
    taken as a noun."""
    ws = clause.split(" ")
    low = [w.lower().strip(",.") for w in ws]
    if len(ws) < 2 or any(w in NOT_NP_WORDS for w in low):
        return None
    verb = low[0] in VERBS and not (nounish and low[0] in NOUN_VERBS)
    if (verb and low[1] not in ("of", "for")) or base_of(low[0]):
        return None
    if low[0] in ARTICLES:
        ws = ws[1:]
    if len(ws) < 2 or ws[0].lower() in BAD_START:
        return None
    # The head noun: the word before the first preposition, or the last word.
    lw = [w.lower().strip(",.") for w in ws]
    cut_at = next((i for i, w in enumerate(lw) if w in PREPOSITIONS and i > 0), len(lw))
    head = lw[cut_at - 1]
    if not (head in HEAD_NOUNS or re.search(NOUN_SUFFIXES, head)
            or low[0] in ARTICLES):
        return None
    if re.fullmatch(r"[A-Z][a-z-]+", ws[0]):
        ws[0] = ws[0].lower()
    return swap_words(" ".join(ws))


def first_clause(desc):
    d = desc
    while True:
        e = re.sub(r"\s*\([^()]*\)", "", d)
        if e == d:
            break
        d = e
    d = re.split(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)\.(?:\s|$)|;\s|:\s|\s--\s", d)[0]
    d = rs.squash(d).strip(" ,.:")
    if not d or "(" in d or ")" in d or d.count('"') % 2 or re.search(r"(^|\s)'|'($|\s)", d):
        return None
    low = words(d)
    if not 2 <= len(d.split()) <= MAX_CLAUSE_WORDS or set(low) & CONTEXT_WORDS:
        return None
    if low and low[0] in BAD_START:
        return None
    return d


# ---------------------------------------------------------------- page structure

def entries(rendered):
    """Tagged paragraphs of a rendered page: (section, tag, description).
    A tag is a line whose next line is indented deeper (groff's .TP with a
    long tag) or the start of a line followed by 2+ spaces or ' -- ' (a short
    tag on the same line as its description)."""
    raw = rendered.translate(rs.ASCII).splitlines()
    lines = []
    for l in raw:
        s = l.rstrip()
        lines.append((len(s) - len(s.lstrip()), s.strip()))
    out, section, i = [], None, 0
    while i < len(lines):
        ind, s = lines[i]
        if not s:
            i += 1
            continue
        if ind == 0:
            section = rs.squash(s)
            i += 1
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else (0, "")
        m = re.match(r"(\S+(?: \S+)*?)(?:\s{2,}|\s+--\s+)(\S.*)$", s)
        if nxt[1] and nxt[0] > ind:
            tag, j, col, desc = s, i + 1, nxt[0], []
        elif m:
            tag, j, col, desc = m.group(1), i + 1, ind + m.start(2), [m.group(2)]
        else:
            i += 1
            continue
        while j < len(lines) and lines[j][1] and lines[j][0] == col:
            desc.append(lines[j][1])
            j += 1
        if desc:
            out.append((section, rs.squash(tag), rs.squash(" ".join(desc))))
        i = j if j > i + 1 else i + 1
    return out


def option_names(tag, desc=""):
    """The option names of an entry's tag. groff's output has lost the fonts
    that told "-f type" from "-ftype": a single-dash name longer than one
    letter whose tail is an argument named in the tag ("--frontend=type") or a
    word of the description ("-sdir  Look in dir") is cut to its letter."""
    if not tag.startswith("-") or len(tag) > 60 or len(tag.split()) > 5:
        return []
    if not re.fullmatch(r"[-+][^\s,|]*(?:(?:\s*[,|]\s*|\s+)[^\s,|]+)*", tag):
        return []
    names = re.findall(r"(?:^|[\s,|\[])(--?[A-Za-z0-9?][A-Za-z0-9_-]*[A-Za-z0-9])", tag)
    names += re.findall(r"(?:^|[\s,|\[])(-[A-Za-z0-9?])(?=$|[\s,|=\[])", tag)
    args = set(re.findall(r"[=\s\[]<?([A-Za-z][\w-]*)", tag))
    out = []
    for n in names:
        tail = n[2:]
        if not n.startswith("--") and tail and (tail in args or re.search(
                r"(?<![\w-])" + re.escape(tail) + r"(?![\w-])", desc)):
            forms = [n[:2], n]  # the option, then as the page prints it
        else:
            forms = [n]
        out += [f for f in forms if f not in out]
    return out


def classify(page_section, section, tag, desc):
    """(kind, answers, tag name for a default question) or None."""
    sec = (section or "").upper()
    if sec in ("NAME", "SYNOPSIS", "SEE ALSO", "EXAMPLES", "EXAMPLE", "AUTHOR", "AUTHORS",
               "COPYRIGHT", "BUGS", "REPORTING BUGS", "HISTORY"):
        return None
    opts = option_names(tag, desc)
    if opts:
        if set(opts) & HELP_OPTS:
            return None
        name = next((o for o in opts if o.startswith("--")), opts[0])
        return "option", opts, name
    if "ENVIRONMENT" in sec:
        m = re.fullmatch(r"\$?([A-Z][A-Z0-9_]{2,})(?:=\S*)?", tag)
        if m:
            return "env", [m.group(1)], m.group(1)
        return None
    if sec.startswith("FILES"):
        t = tag.rstrip(":,")
        if re.fullmatch(r"[~/$][^\s,*?\[\]{}<>()|]*", t) and "/" in t and len(t) > 2:
            return "file", [t], t
        return None
    if page_section == "5" and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.]*[A-Za-z0-9]", tag) \
            and len(tag) >= 4 and (re.search(r"[a-z][A-Z]", tag) or "_" in tag or "." in tag):
        return "keyword", [tag], tag
    return None


def standalone(a, text):
    """a occurs in text, not as part of a longer word or option."""
    return re.search(r"(?<![\w-])" + re.escape(a) + r"(?![\w-])", text) is not None


def default_value(kind, desc):
    found = list(DEFAULT_RE.finditer(desc))
    if len(found) != 1:
        return None
    m = found[0]
    if m.group("q"):
        v, after = m.group("qv"), desc[m.end():]
        if not v or " " in v:
            return None
    else:
        v, after = m.group("v").rstrip("."), desc[m.end("v"):]
    if re.match(r"\s+(?:\w+ )?(?:for|on|in|when|with|if|under|unless)\b", after):
        return None  # one default of several ("9 for gzip, 6 for xz")
    if NUMBER_RE.fullmatch(v) or PATH_RE.fullmatch(v):
        return v
    if kind == "keyword" and WORD_VALUE_RE.fullmatch(v) and v not in STOP \
            and re.match(r"$|[.)]", after):
        return v
    return None


# ---------------------------------------------------------------- candidates

def page_candidates(doc, description, rendered):
    """Question candidates of one man page: dicts with template, question,
    answers, key (the reworded description, for ambiguity checks)."""
    text = doc["text"]
    flat = rs.squash(text)
    cmd, page_section = doc["_id"].rsplit(".", 1)
    page_section = page_section[:1]
    cands = []

    if description:
        names = [n.strip() for n in doc["title"].split(",") if n.strip()]
        answers = [n for n in names if standalone(n, text)]
        clause = first_clause(description)
        if answers and clause:
            vf = verb_forms(clause)
            np = None if vf else noun_phrase(clause)
            key = doc["_id"] + "|name"
            if vf:
                q = stable_pick(NAME_TEMPLATES_VERB, key).format(v3=vf[0], bare=vf[1])
            elif np:
                tpl = NAME_TEMPLATES_NP_FILE if page_section == "5" else NAME_TEMPLATES_NP_PROG
                q = stable_pick(tpl, key).format(np=np)
            else:
                q = None
            if q:
                cands.append({"template": "name", "question": q, "answers": answers,
                              "clause": rs.norm(description)})

    ents = entries(rendered)
    clauses = collections.Counter()
    parsed = []
    for section, tag, desc in ents:
        c = classify(page_section, section, tag, desc)
        clause = first_clause(desc)
        if clause:
            clauses[rs.norm(clause)] += 1
        if not c:
            continue
        kind, answers, tagname = c
        # Only what the kept text holds, and answers verbatim in it.
        if desc not in flat or tag not in flat or not all(a in text for a in answers):
            continue
        # ... and as a whole word or option, except an option cut from the
        # form the page prints ("-p" of "-pvarname-prefix", which follows it).
        if not all(standalone(a, text) or (j + 1 < len(answers) and len(a) == 2
                                           and answers[j + 1].startswith(a))
                   for j, a in enumerate(answers)):
            continue
        parsed.append((section, tag, desc, clause, kind, answers, tagname))
    all_descs = [rs.norm(d) for _, _, d in ents]

    for section, tag, desc, clause, kind, answers, tagname in parsed:
        key = doc["_id"] + "|" + tag
        dv = default_value(kind, desc) if kind in DEFAULT_TEMPLATES else None
        if dv and dv in text and not any(dv == a for a in answers):
            q = stable_pick(DEFAULT_TEMPLATES[kind], key).format(tag=tagname, cmd=cmd)
            cands.append({"template": "default", "question": q, "answers": [dv],
                          "clause": rs.norm(tag) + "|default"})
        if not clause:
            continue
        nc = rs.norm(clause)
        # Ambiguous: the same clause twice, or inside another entry's text.
        if clauses[nc] > 1 or sum(nc in d for d in all_descs) > 1:
            continue
        if kind in ("file", "env"):
            np = noun_phrase(clause, nounish=True)
            vf = None if np else verb_forms(clause)
        else:
            vf = verb_forms(clause)
            np = None if vf else noun_phrase(clause)
        q = None
        if kind == "option" and vf:
            q = stable_pick(OPTION_TEMPLATES, key).format(cmd=cmd, v3=vf[0], bare=vf[1])
        elif kind == "keyword" and vf:
            q = stable_pick(KEYWORD_TEMPLATES, key).format(cmd=cmd, v3=vf[0])
        elif kind == "env" and (vf or np):
            tpl, fill = (ENV_TEMPLATES_VERB, {"v3": vf[0]}) if vf else (ENV_TEMPLATES_NP, {"np": np})
            q = stable_pick(tpl, key).format(cmd=cmd, **fill)
        elif kind == "file" and (vf or np):
            if vf:
                tpl, fill = FILE_TEMPLATES_VERB, {"v3": vf[0]}
            elif re.search(r"\b(file|files|directory|directories|dir)\b", np):
                tpl, fill = FILE_TEMPLATES_NP_PATH, {"np": np}
            else:
                tpl, fill = FILE_TEMPLATES_NP, {"np": np}
            q = stable_pick(tpl, key).format(cmd=cmd, **fill)
        if q:
            cands.append({"template": kind, "question": q, "answers": answers, "clause": nc})

    good = []
    doc_grams = ngrams(words(doc["title"] + "\n" + text))
    questions = collections.Counter(c["question"] for c in cands)
    for c in cands:
        q = c["question"]
        if questions[q] > 1:
            continue
        if any(re.search(r"(?<![\w-])" + re.escape(a) + r"(?![\w-])", q) for a in c["answers"]):
            continue
        if ngrams(words(q)) & doc_grams:
            continue
        c["doc_id"] = doc["_id"]
        good.append(c)
    return good


class AnswerDocs:
    """How many documents contain an answer verbatim (case-sensitive), using
    postings of case-sensitive words to narrow the scan."""

    def __init__(self, docs):
        self.texts = [d["title"] + "\n" + d["text"] for d in docs]
        self.postings = collections.defaultdict(set)
        for i, t in enumerate(self.texts):
            for w in set(re.findall(r"\w+", t)):
                self.postings[w].add(i)
        self.cache = {}

    def count(self, a):
        if a not in self.cache:
            ws = re.findall(r"\w+", a)
            cand = set.intersection(*(self.postings.get(w, set()) for w in ws)) if ws \
                else range(len(self.texts))
            self.cache[a] = sum(a in self.texts[i] for i in cand)
        return self.cache[a]


# ---------------------------------------------------------------- building

def cut(text, n):
    if len(text) <= n:
        return text
    i = text.rfind("\n", 0, n)
    return text[:i if i > 0 else n]


def render_all(paths):
    batches = [paths[i:i + rs.MAN_BATCH] for i in range(0, len(paths), rs.MAN_BATCH)]
    rendered = {}
    with multiprocessing.Pool(2) as pool:
        for part in pool.imap_unordered(rs.render_batch, batches):
            rendered.update(part)
    return rendered


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dev", type=int, default=150)
    ap.add_argument("--test", type=int, default=300)
    ap.add_argument("--max-docs", type=int, default=3000)
    ap.add_argument("--max-chars", type=int, default=6000)
    ap.add_argument("--skip-packages", default="google-cloud-cli")
    args = ap.parse_args()
    out = os.path.expanduser(args.out)

    found = sorted(p for s in rs.MAN_SECTIONS for p in glob.glob(f"/usr/share/man/{s}/*.gz")
                   if not os.path.islink(p))
    skipped = rs.package_files([p for p in args.skip_packages.split(",") if p])
    paths = [p for p in found if p not in skipped]
    rendered = render_all(paths)
    man, desc_of, raw_of = [], {}, {}
    for p in paths:
        if rendered[p] is None:
            continue
        doc, description = rs.man_document(p, rendered[p])
        man.append(doc)
        desc_of[doc["_id"]], raw_of[doc["_id"]] = description, rendered[p]
    man.sort(key=lambda d: d["_id"])
    man = rs.dedupe(man)
    for d in man:
        d["text"] = cut(d["text"], args.max_chars)

    rust = []
    if len(man) < args.max_docs:
        rust, _, _ = rs.load_rustdoc(None)
        rust.sort(key=lambda d: d["_id"])
        rust = rs.dedupe(rust)
        rng = random.Random(f"{args.seed}-rust-docs")
        rust = sorted(rng.sample(rust, min(len(rust), args.max_docs - len(man))),
                      key=lambda d: d["_id"])
        for d in rust:
            d["text"] = cut(d["text"], args.max_chars)
    docs = man + rust

    # NAME descriptions shared by several pages are ambiguous.
    shared = collections.Counter(rs.norm(desc_of[d["_id"]]) for d in man if desc_of[d["_id"]])
    cands = {}
    for d in man:
        description = desc_of[d["_id"]]
        if description and shared[rs.norm(description)] > 1:
            description = None
        cands[d["_id"]] = page_candidates(d, description, raw_of[d["_id"]])

    available = collections.Counter(c["template"] for cs in cands.values() for c in cs)
    adocs = AnswerDocs(docs)
    rng = random.Random(f"{args.seed}-qa")
    order = sorted(cands)
    rng.shuffle(order)
    used = collections.Counter()
    picked = []
    want = args.dev + args.test
    for doc_id in order:
        if len(picked) == want:
            break
        cs = cands[doc_id]
        if not cs:
            continue
        rng.shuffle(cs)
        best = min(cs, key=lambda c: (used[c["template"]],
                                      min(adocs.count(a) for a in c["answers"]) > 20))
        used[best["template"]] += 1
        picked.append(best)

    # Split by document (one question per document).
    rng_split = random.Random(f"{args.seed}-split")
    rng_split.shuffle(picked)
    n_dev = min(args.dev, len(picked) // 3)
    splits = {"dev": picked[:n_dev], "test": picked[n_dev:n_dev + args.test]}

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "corpus.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    for name, qs in splits.items():
        with open(os.path.join(out, f"{name}.jsonl"), "w") as f:
            for c in qs:  # in the seeded shuffled order, so that a prefix is a sample
                f.write(json.dumps({"question": c["question"], "answers": c["answers"],
                                    "doc_id": c["doc_id"], "template": c["template"]},
                                   ensure_ascii=False) + "\n")
    print(f"corpus: {len(docs)} documents ({len(man)} man pages of {len(paths)} rendered, "
          f"{len(rust)} Rust book pages), text cut to {args.max_chars} characters")
    print("candidates: " + ", ".join(f"{t} {n}" for t, n in sorted(available.items())))
    for name, qs in splits.items():
        per = collections.Counter(c["template"] for c in qs)
        print(f"{name}: {len(qs)} questions, {len({c['doc_id'] for c in qs})} documents; "
              + ", ".join(f"{t} {n}" for t, n in sorted(per.items())))


if __name__ == "__main__":
    main()
