#!/usr/bin/env python3
"""The top-level module dependency graph of the kache crate, and its cycles.

Reads every `src/**/*.rs` file, attributes it to its top-level module (`src/serve/list.rs` -> `serve`,
`src/app.rs` -> `app`), and records an edge A -> B for every `crate::B…` path in A's code (in `use`
declarations and inline paths alike; comments and doc comments are ignored, `#[cfg(test)]` code is not).
Then prints the graph, the strongly connected components with more than one module (each one a knot of
cycles) and every elementary cycle among them.

Usage: scripts/module-cycles.py [--src DIR] [--quiet] [--exclude MODULE]...
Exit status: 0 when the graph has no cycle, 1 otherwise (so CI can run it).
"""

import argparse
import os
import re
import sys
from collections import defaultdict

CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
# `use crate::{a::x, b::y}` names several modules in one group.
CRATE_GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)
GROUP_ITEM = re.compile(r"(?:^|,)\s*([a-z_][a-z0-9_]*)")


def strip_comments(text):
    """Removes `//` comments (doc comments included) and `/* */` blocks; keeps string literals."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        # A `//` inside a string literal ("http://…") is rare in paths we care about; a cheap guard.
        idx = line.find("//")
        while idx != -1 and line[:idx].count('"') % 2 == 1:
            idx = line.find("//", idx + 2)
        out.append(line if idx == -1 else line[:idx])
    return "\n".join(out)


def top_module(src, path):
    rel = os.path.relpath(path, src)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def graph(src):
    modules = set()
    edges = defaultdict(set)
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            module = top_module(src, path)
            if module in ("main", "lib"):
                continue  # the binary and the crate root sit above every module
            modules.add(module)
            with open(path, encoding="utf-8") as fh:
                code = strip_comments(fh.read())
            targets = set(CRATE_PATH.findall(code))
            for group in CRATE_GROUP.findall(code):
                targets.update(GROUP_ITEM.findall(group))
            for t in targets:
                if t != module and t not in ("self", "super"):
                    edges[module].add(t)
    return modules, edges


def sccs(modules, edges):
    """Tarjan's algorithm."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in modules:
                continue
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
            out.append(sorted(comp))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def cycles_in(comp, edges):
    """Elementary cycles inside one component (small graphs: a plain DFS from each start suffices)."""
    nodes = sorted(comp)
    found = []
    for i, start in enumerate(nodes):
        allowed = set(nodes[i:])

        def dfs(v, path):
            for w in sorted(edges.get(v, ())):
                if w == start:
                    found.append(path + [start])
                elif w in allowed and w not in path:
                    dfs(w, path + [w])

        dfs(start, [start])
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", "src"))
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument(
        "--exclude", action="append", default=[], metavar="MODULE", help="leave MODULE out of the graph"
    )
    args = ap.parse_args()
    modules, edges = graph(args.src)
    modules -= set(args.exclude)
    edges = {a: {b for b in bs if b in modules} for a, bs in edges.items() if a in modules}
    if not args.quiet:
        print("top-level module dependencies:")
        for m in sorted(modules):
            deps = sorted(d for d in edges.get(m, ()) if d in modules)
            print(f"  {m:<10} -> {', '.join(deps) if deps else '(none)'}")
    comps = sccs(modules, edges)
    all_cycles = [c for comp in comps for c in cycles_in(comp, edges)]
    for c in all_cycles:
        print("cycle: " + " -> ".join(c))
    pairs = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
    for a, b in pairs:
        print(f"mutual: {a} <-> {b}")
    print(
        f"{len(modules)} modules, {len(all_cycles)} elementary cycles in {len(comps)} strongly connected "
        f"components, {len(pairs)} mutual pairs"
    )
    return 1 if all_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
