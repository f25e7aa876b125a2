"""The prose set's further sources: pydoc's text of the standard library's modules (questions about
their functions, classes, methods and defaults) and the prose files under /usr/share/doc.

Part of bench/real_answer_sets.py, which builds the sets.
"""

import builtins
import collections
import gzip
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_qa as rq  # noqa: E402
import real_sets as rs  # noqa: E402
from answer_set_tools import check  # noqa: E402
from prose_sentences import (  # noqa: E402
    CODE_CLOSE,
    CODE_OPEN,
    EM_CLOSE,
    EM_OPEN,
    MARKS,
    UNMARK,
    definition_candidates,
    fit,
    marked_sentences,
    number_candidates,
    prose_swap,
    subject_candidates,
)


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
