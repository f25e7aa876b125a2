#!/usr/bin/env python3
"""Finds circles among the modules of each crate of the workspace (issue 42: "no circles in
any room").

A module's edges are the modules whose items its code names through `crate::…`, `super::…`
or a `use` of either. A crate root or a `mod.rs` is a facade: its own `use` and `pub use`
lines are not edges (re-exporting a child is how a curated surface is built), and a name a
child takes from a facade counts as taken from the module that defines it when the facade
re-exports it. Test modules (`#[cfg(test)]` to the end of a file) are left out: a test may
use anything. Prints each circle and exits 1 if there is one.

    python3 scripts/module-cycles.py            # every crate of the workspace
    python3 scripts/module-cycles.py kernels    # one crate's folder
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = ["encoder", "indexer", "retriever", "reader", "kernels", "engine", "api", "corpora",
          "qdrant", "bench"]
PATH = re.compile(r"\b(crate|super)((?:::(?:\w+|\{[^}]*\}))+)")


def module_of(src: pathlib.Path, file: pathlib.Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def is_facade(file: pathlib.Path) -> bool:
    return file.name in ("lib.rs", "main.rs", "mod.rs")


def strip(text: str) -> str:
    """The file without its tests and comments."""
    cut = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests", text, re.M)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def expand(tail: str) -> list:
    """`::a::{b, c::d}` → [[a, b], [a, c, d]] (one level of braces)."""
    tail = tail.lstrip(":")
    if "{" not in tail:
        return [tail.split("::")]
    head, inner = tail.split("{", 1)
    head = [p for p in head.split("::") if p]
    out = []
    for item in inner.rstrip("}").split(","):
        item = item.strip().split(" as ")[0].strip()
        if item:
            out.append(head + item.split("::"))
    return out


def main() -> int:
    crates = sys.argv[1:] or CRATES
    circles = 0
    for crate in crates:
        src = ROOT / crate / "src"
        if not src.is_dir():
            continue
        files = {module_of(src, f): f for f in src.rglob("*.rs")}
        texts = {m: strip(f.read_text()) for m, f in files.items()}
        # Facade re-exports: (facade, name) -> the module it comes from.
        reexport = {}
        for m, f in files.items():
            if not is_facade(f):
                continue
            for use in re.finditer(r"pub use ([^;]+);", texts[m]):
                body = use.group(1).strip()
                prefix = m
                if body.startswith("crate::"):
                    prefix, body = (), body[len("crate::"):]
                for path in expand("::" + body):
                    origin = prefix + tuple(path[:-1])
                    while origin and origin not in files:
                        origin = origin[:-1]
                    reexport[(m, path[-1])] = origin

        def resolve(path: list) -> tuple:
            mod = ()
            for i, part in enumerate(path):
                if mod + (part,) in files:
                    mod = mod + (part,)
                    continue
                if (mod, part) in reexport:
                    return reexport[(mod, part)]
                return mod
            return mod

        edges = {m: set() for m in files}
        for m, f in files.items():
            if is_facade(f):
                continue
            here = m[:-1]  # the module `super` names (facades were passed over above)
            for ref in PATH.finditer(texts[m]):
                for path in expand(ref.group(2)):
                    if ref.group(1) == "crate":
                        target = resolve(path)
                    else:
                        parent = here
                        while path and path[0] == "super":
                            parent, path = parent[:-1], path[1:]
                        target = resolve(list(parent) + path)
                    if target != m and target in files and not is_facade(files[target]):
                        edges[m].add(target)
        # Tarjan's strongly connected components.
        index, low, stack, on, found = {}, {}, [], set(), []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in edges[v]:
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)

        sys.setrecursionlimit(10000)
        for v in sorted(edges):
            if v not in index:
                visit(v)
        for comp in found:
            circles += 1
            names = sorted("::".join(c) for c in comp)
            print(f"{crate}: circle among {', '.join(names)}")
            for c in sorted(comp):
                inner = sorted("::".join(t) for t in edges[c] if t in comp)
                print(f"    {'::'.join(c)} -> {', '.join(inner)}")
    if circles == 0:
        print(f"no circles among the modules of {', '.join(crates)}")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
