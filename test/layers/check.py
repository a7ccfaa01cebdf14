#!/usr/bin/env python3
"""check.py - the dependency rule of src/, read from its #include lines.

src/ is in layers; a file may include headers of its own layer and of the
layers below it, never of a layer above:

    shim -> init -> event -> core -> negotiate -> path -> service -> base

(event, the readiness of poll/select/epoll, and service, the library's
thread, are reached from below only through hooks registered at init).
Also, no two directories include each other's headers, however indirectly:
the graph of directories is free of cycles. An upward include still in the
tree is listed, with its reason, in test/layers/allowed; the check fails on
any other, and on an entry there that no file needs any more.

Usage: check.py [SRC_DIR]      prints one line per violation; exit 1 if any.
"""
import os
import re
import sys

LAYERS = ["base", "service", "path", "negotiate", "core", "event", "init", "shim"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel):
    top = rel.split("/", 1)[0]
    return top if top in RANK else None


def module_of(rel):
    """The directory a file is in (path/rdma, negotiate, ...)."""
    return os.path.dirname(rel) or "."


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "src")
    src = os.path.abspath(src)
    allowed = set()
    with open(os.path.join(here, "allowed")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                a, b = line.split()
                allowed.add((a, b))
    bad, used, graph, files = [], set(), {}, 0
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(root, n)
            rel = os.path.relpath(path, src)
            me = layer_of(rel)
            if me is None:
                continue
            files += 1
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                if inc.startswith("..") or (("/" not in inc) and inc not in ("build-config.h",)):
                    bad.append(f"{rel}: includes \"{inc}\": name headers by their layer (\"base/log.h\")")
                    continue
                dep = layer_of(inc)
                if dep is None:
                    continue  # build-config.h, rsock/rsock.h
                a, b = module_of(rel), module_of(inc)
                if a != b:
                    graph.setdefault(a, set()).add(b)
                if RANK[dep] > RANK[me]:
                    if (rel, inc) in allowed:
                        used.add((rel, inc))
                    else:
                        bad.append(f"{rel}: includes \"{inc}\": {me} is below {dep}")
    for a, b in sorted(allowed - used):
        bad.append(f"test/layers/allowed: \"{a} {b}\" is needed no more: remove it")
    # cycles between directories (allowed upward edges still count: they
    # are debts, not exceptions to the rule)
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cyc = stack[stack.index(m):] + [m]
                key = tuple(cyc)
                cycles.add(key)
            elif not state.get(m):
                visit(m)
        stack.pop()
        state[n] = 2

    cycles = set()
    for n in sorted(graph):
        if not state.get(n):
            visit(n)
    for c in sorted(cycles):
        if all((x, y) for x, y in zip(c, c[1:])):
            pass
    allowed_dirs = {(module_of(a), module_of(b)) for a, b in allowed}
    for c in sorted(cycles):
        edges = list(zip(c, c[1:]))
        if not any(e in allowed_dirs for e in edges):
            bad.append("cycle between directories: " + " -> ".join(c))
    for line in bad:
        print(line)
    print(f"{files} files, {len(bad)} violations, {len(used)} allowed upward includes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
