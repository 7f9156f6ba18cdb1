#!/usr/bin/env python3
"""Module graphs: which modules use which, and any circle, in every Rust crate of the
workspace (crates/*/src, src-tauri) and in the web UI (ui/src).

    scripts/module-graph.py            # the engine's edges and layers, and the circles if any
    scripts/module-graph.py --dot      # the engine's graph for Graphviz
    scripts/module-graph.py --check    # every crate and ui/src: exit 1 on a circle (CI)

Rust: a module is a top-level file or folder of src/ (models/decoder.rs belongs to `models`);
an edge A -> B is a `crate::B` path written in A. Names the crate root re-exports
(`crate::Error`) count as their module. Tests (`#[cfg(test)] mod tests` at a file's end) are
left out: a test may reach anywhere. TypeScript: a module is a file of ui/src (tests left
out); an edge is a relative import, `import type` included (a circle of types is a circle of
design too).
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "crates/engine/src"
ROOT_FILES = ("lib.rs", "main.rs")


def module_of(path: Path, src: Path = SRC) -> str:
    rel = path.relative_to(src)
    return rel.parts[0].removesuffix(".rs")


def without_tests(text: str) -> str:
    at = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests", text, re.M)
    return text[: at.start()] if at else text


def without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def root_exports(src: Path = SRC) -> dict[str, str]:
    """Names the crate root re-exports (`pub use generate::{A, B}`) -> their module."""
    names = {}
    roots = [src / f for f in ROOT_FILES if (src / f).exists()]
    text = without_comments("".join(r.read_text() for r in roots))
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


def is_root(path: Path, src: Path) -> bool:
    return path.parent == src and path.name in ROOT_FILES


def graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = {module_of(p, src) for p in src.rglob("*.rs") if not is_root(p, src)}
    exports = root_exports(src)
    edges = {m: set() for m in modules}
    for path in src.rglob("*.rs"):
        if is_root(path, src):
            continue
        source = module_of(path, src)
        text = without_comments(without_tests(path.read_text()))
        for first in paths_used(text):
            target = first if first in modules else exports.get(first)
            if target and target != source:
                edges[source].add(target)
    return edges


def ts_graph(src: Path) -> dict[str, set[str]]:
    """ui/src's files (tests left out) and the files each imports by a relative path."""
    files = [p for p in src.rglob("*.ts") if not p.name.endswith(".test.ts") and not p.name.endswith(".d.ts")]
    name = lambda p: str(p.relative_to(src).with_suffix(""))
    edges = {name(p): set() for p in files}
    for path in files:
        text = path.read_text()
        static = re.finditer(r"""(?:^|\n)\s*(?:import|export)\b[^;]*?\bfrom\s+['"](\.[^'"]+)['"]""", text)
        dynamic = re.finditer(r"""\bimport\(\s*['"](\.[^'"]+)['"]\s*\)""", text)
        for m in [*static, *dynamic]:
            target = (path.parent / m.group(1)).resolve()
            target = target.with_suffix("") if target.suffix in (".ts", ".js") else target
            key = str(target.relative_to(src.resolve()))
            if key in edges and key != name(path):
                edges[name(path)].add(key)
    return edges


def every_graph() -> dict[str, dict[str, set[str]]]:
    """The graph of each Rust crate and of the UI, by folder."""
    folders = sorted(p.parent for p in (ROOT / "crates").glob("*/src/lib.rs")) + sorted(
        p.parent for p in (ROOT / "crates").glob("*/src/main.rs"))
    graphs = {str(f.relative_to(ROOT)): graph(f) for f in folders + [ROOT / "src-tauri"]}
    graphs["ui/src"] = ts_graph(ROOT / "ui/src")
    return graphs


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
    if "--check" in sys.argv:
        failed = False
        for folder, edges in every_graph().items():
            found = circles(edges)
            for component in found:
                print(f"{folder}: circle: {' <-> '.join(component)}", file=sys.stderr)
            if not found:
                print(f"{folder}: {len(edges)} modules, no circle")
            failed |= bool(found)
        sys.exit(1 if failed else 0)
    edges = graph()
    found = circles(edges)
    if "--dot" in sys.argv:
        print("digraph engine {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return
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


if __name__ == "__main__":
    main()
