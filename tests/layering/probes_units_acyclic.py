#!/usr/bin/env python3
"""No include cycle among probes/libtorch's units (issue 65).

A unit is a header and its source (device_checks.h + device_checks.cpp); it depends on every unit
of probes/libtorch whose header either of its files includes. A cycle means a part cannot be read,
built or tested without the parts that use it: the 9-unit cycle through call_recorder and
probes.cpp, and device_checks <-> graph_checks, were such. Prints each cycle found.

    probes_units_acyclic.py SOURCE_DIR
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"probes/libtorch/([A-Za-z0-9_]+)\.h"', re.M)


def units(folder):
    deps = {}
    for f in sorted(folder.iterdir()):
        if f.suffix not in (".h", ".cpp", ".cu"):
            continue
        deps.setdefault(f.stem, set()).update(d for d in INCLUDE.findall(f.read_text()) if d != f.stem)
    return deps


def cycles(deps):
    """Each strongly connected component of more than one unit (Tarjan), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(u):
        index[u] = low[u] = len(index)
        stack.append(u)
        on_stack.add(u)
        for v in sorted(deps.get(u, ())):
            if v not in deps:
                continue
            if v not in index:
                visit(v)
                low[u] = min(low[u], low[v])
            elif v in on_stack:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            component = []
            while True:
                v = stack.pop()
                on_stack.discard(v)
                component.append(v)
                if v == u:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for u in sorted(deps):
        if u not in index:
            visit(u)
    return found


def main():
    folder = pathlib.Path(sys.argv[1]) / "probes" / "libtorch"
    deps = units(folder)
    if "device_checks" not in deps or not deps["device_checks"]:
        print("found no includes in probes/libtorch/device_checks: this test's pattern no longer finds them")
        return 1
    found = cycles(deps)
    for component in found:
        print(f"include cycle among {len(component)} units of probes/libtorch: {', '.join(component)}")
        for u in component:
            inside = sorted(d for d in deps[u] if d in component)
            print(f"  {u} includes {', '.join(inside)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
