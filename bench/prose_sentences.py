"""The prose set's questions from sentences: pages marked where their words are code, sentences
reworded into questions about a subject, a definition or a number.

Part of bench/real_answer_sets.py, which builds the sets.
"""

import multiprocessing
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_qa as rq  # noqa: E402
import real_sets as rs  # noqa: E402


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
