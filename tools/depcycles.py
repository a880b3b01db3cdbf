#!/usr/bin/env python3
"""depcycles.py [--max N] [--layers L,...] [--services F,...] [--verbose] [--sources DIR] [OBJDIR]:
the dependency circles of engine/, read from the object files' symbols (nm):
file A depends on file B when A's object uses a symbol B's object defines.
Prints the largest circle (strongly connected component) with its size; with
--max N, exits 1 when it has more than N files, so that the build guards
against circles growing back. With --layers (engine/'s subfolders, lowest
first), also exits 1 when a file uses a later layer's file, but for the
--services files (the step's services that ops call, op_context.h).
"""
import argparse
import glob
import os
import subprocess
import sys


def symbols(path):
    """(defined, undefined) external symbol names of one object file."""
    out = subprocess.run(["nm", "-P", path], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper():  # lower case: local to the file
            defined.add(name)
    return defined, undefined


def components(nodes, edges):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(sorted(component))
    return result


def layer_breaches(args, edges, why):
    """'a -> b: symbols' for each use of a later layer than a's own."""
    layers = args.layers.split(",")
    services = set(filter(None, args.services.split(",")))
    rank = {}
    for position, layer in enumerate(layers):
        for source in glob.glob(os.path.join(args.sources, layer, "*.c")):
            rank[os.path.basename(source)[:-2]] = position
    unplaced = sorted(name for name in edges if name not in rank)
    if unplaced:
        sys.exit(f"depcycles: not in any of --layers {args.layers}: {' '.join(unplaced)}")
    return [f"  {layers[rank[a]]}/{a} -> {layers[rank[b]]}/{b}: {' '.join(sorted(why[(a, b)]))}"
            for a in sorted(edges) for b in sorted(edges[a])
            if rank[b] > rank[a] and b not in services]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("objdir", nargs="?", default="build/obj")
    parser.add_argument("--sources", default="engine", help="the sources' folder, searched with its subfolders (objects without a source are stale)")
    parser.add_argument("--max", type=int, help="fail when the largest circle has more files")
    parser.add_argument("--layers", help="engine/'s subfolders, lowest first: a file may use its own and earlier ones")
    parser.add_argument("--services", default="", help="files any layer may use (the ops' services)")
    parser.add_argument("--verbose", action="store_true", help="print which symbols tie each pair")
    args = parser.parse_args()
    # an object whose source is gone (a file renamed or split) is stale: left out
    sources = {os.path.basename(c)[:-2] for c in glob.glob(os.path.join(args.sources, "**", "*.c"), recursive=True)}
    objects = sorted(o for o in glob.glob(os.path.join(args.objdir, "*.o"))
                     if os.path.basename(o)[:-2] in sources)
    if not objects:
        sys.exit(f"depcycles: no object files in {args.objdir} (run make first)")
    owner, uses = {}, {}
    for path in objects:
        name = os.path.splitext(os.path.basename(path))[0]
        defined, undefined = symbols(path)
        for symbol in defined:
            owner[symbol] = name
        uses[name] = undefined
    edges = {name: set() for name in uses}
    why = {}
    for name, undefined in uses.items():
        for symbol in undefined:
            target = owner.get(symbol)
            if target and target != name:
                edges[name].add(target)
                why.setdefault((name, target), []).append(symbol)
    upward = layer_breaches(args, edges, why) if args.layers else []
    largest = max(components(edges.keys(), edges), key=len)
    print(f"largest dependency circle: {len(largest)} files")
    print("  " + " ".join(largest))
    if args.verbose:
        members = set(largest)
        for (a, b), syms in sorted(why.items()):
            if a in members and b in members:
                print(f"  {a} -> {b}: {' '.join(sorted(syms))}")
    for line in upward:
        print(line)
    if upward:
        sys.exit(f"depcycles: {len(upward)} uses of a later layer (--layers {args.layers})")
    if args.max is not None and len(largest) > args.max:
        print(f"depcycles: the largest circle has {len(largest)} files, more than --max {args.max}")
        sys.exit(1)


if __name__ == "__main__":
    main()
