#!/usr/bin/env python3
"""The engine's module graph: which of crates/engine/src's modules use which, and any circle.

    scripts/module-graph.py            # the edges, and the circles if any
    scripts/module-graph.py --dot      # Graphviz
    scripts/module-graph.py --check    # exit 1 on a circle (CI)

A module is a top-level file or folder of src/ (models/decoder.rs belongs to `models`); an
edge A -> B is a `crate::B` path written in A. Names the crate root re-exports
(`crate::Error`) count as their module. Tests (`#[cfg(test)] mod tests` at a file's end) are
left out: a test may reach anywhere.
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "crates/engine/src"


def module_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".rs")


def without_tests(text: str) -> str:
    at = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests", text, re.M)
    return text[: at.start()] if at else text


def without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def root_exports() -> dict[str, str]:
    """Names lib.rs re-exports (`pub use generate::{A, B}`) -> their module."""
    names = {}
    text = without_comments((SRC / "lib.rs").read_text())
    for m in re.finditer(r"pub use (\w+)::(\{[^;]*\}|\w+);", text):
        for name in re.findall(r"\b(\w+)\b", m.group(2).split("::")[-1] if "{" not in m.group(2) else m.group(2)):
            names[name] = m.group(1)
    return names


def paths_used(text: str):
    """The first segment after every `crate::`, braces included (`crate::{a::X, b}`)."""
    for m in re.finditer(r"crate::(\{|\w+)", text):
        if m.group(1) != "{":
            yield m.group(1)
            continue
        depth, i, start = 1, m.end(), m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        inner, depth, item = text[start : i - 1], 0, ""
        for ch in inner + ",":
            if ch == "," and depth == 0:
                if item.strip():
                    yield re.match(r"\s*(\w+)", item).group(1)
                item = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            item += ch


def graph() -> dict[str, set[str]]:
    modules = {module_of(p) for p in SRC.rglob("*.rs") if p.name != "lib.rs"}
    exports = root_exports()
    edges = {m: set() for m in modules}
    for path in SRC.rglob("*.rs"):
        if path.name == "lib.rs":
            continue
        source = module_of(path)
        text = without_comments(without_tests(path.read_text()))
        for first in paths_used(text):
            target = first if first in modules else exports.get(first)
            if target and target != source:
                edges[source].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """Modules by depth: those that use nothing first (only meaningful without circles)."""
    depth = {}

    def d(v, seen=()):
        if v in depth:
            return depth[v]
        if v in seen:
            return 0
        depth[v] = 1 + max((d(w, seen + (v,)) for w in edges[v]), default=-1)
        return depth[v]

    for v in edges:
        d(v)
    rows = {}
    for v, n in depth.items():
        rows.setdefault(n, []).append(v)
    return [sorted(rows[n]) for n in sorted(rows)]


def main():
    edges = graph()
    found = circles(edges)
    if "--dot" in sys.argv:
        print("digraph engine {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return
    if "--check" not in sys.argv:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a])) or '(nothing)'}")
        if not found:
            print("\nlayers, bottom up:")
            for i, row in enumerate(layers(edges)):
                print(f"  {i}: {', '.join(row)}")
    for component in found:
        print(f"circle: {' <-> '.join(component)}", file=sys.stderr)
    if found:
        sys.exit(1)
    if "--check" in sys.argv:
        print(f"crates/engine/src: {len(edges)} modules, no circle")


if __name__ == "__main__":
    main()
