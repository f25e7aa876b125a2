"""The records set's sources and questions: crates' Cargo.toml files, Python packages' metadata and
Debian's AppStream components, each a record of fields asked about.

Part of bench/real_answer_sets.py, which builds the sets.
"""

import collections
import email.parser
import glob
import gzip
import html
import os
import re
import site
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_qa as rq  # noqa: E402
import real_sets as rs  # noqa: E402

APPSTREAM = "/var/lib/apt/lists/*dep11_Components-amd64.yml.gz"
CRATES = "~/.cargo/registry/src/*/*/Cargo.toml"


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
