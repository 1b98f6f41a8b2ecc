#!/usr/bin/env python3
"""test_layers.py — the build obeys the layers of agent/layers.txt, no two
files call each other in a circle, and no file or function is too long.

Reads what the compiler says, not what the sources seem to say:
- includes: every object's dependency file ($B/**/*.d, from -MMD), which
  lists every header the object was built with, directly or not;
- calls: every object's undefined global symbols (nm), each matched to the
  one object of the same program part that defines it.

A folder may use itself and the folders agent/layers.txt lists after it;
anything else is a violation, named with the file, the header or symbol,
and the two folders.  A circle is a set of source files that call each
other round a loop; each is named with its files.  Exit 0 when there is neither.

And no file of the parts is over 800 lines, no function over 150.

With --self-test, it also proves it fails: it adds an up-call to a copy
of the build's facts and checks that the violation is reported.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = os.environ.get("B", "build")
BDIR = B if os.path.isabs(B) else os.path.join(ROOT, B)
PARTS = ("agent", "common", "hook", "plugin", "dra")


def read_table():
    """folder -> set of folders it may use (itself included)."""
    table = {}
    with open(os.path.join(ROOT, "agent", "layers.txt")) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if line[0] in table:
                sys.exit("agent/layers.txt:%d: %s listed twice" % (n, line[0]))
            table[line[0]] = set(line)
    for folder, uses in table.items():
        for u in uses:
            if u not in table:
                sys.exit("agent/layers.txt: %s uses %s, which has no line" % (folder, u))
    return table


def folder_of(path, table):
    """The table's longest folder that holds path (a path from ROOT)."""
    best = None
    for folder in table:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def objects():
    """Every object of the parts, as its source path (from ROOT) -> .o path."""
    out = {}
    for part in PARTS:
        for d, _, files in os.walk(os.path.join(BDIR, part)):
            for f in files:
                if f.endswith(".o"):
                    o = os.path.join(d, f)
                    src = os.path.relpath(o, BDIR)[:-2] + ".c"
                    if os.path.exists(os.path.join(ROOT, src)):
                        out[src] = o
    return out


def deps(obj):
    """The headers of ROOT an object was built with (its .d file)."""
    d = obj[:-2] + ".d"
    if not os.path.exists(d):
        sys.exit("%s: no dependency file (the build must use -MMD)" % d)
    with open(d) as f:
        text = f.read().replace("\\\n", " ")
    first = text.split("\n", 1)[0]
    heads = []
    for p in first.split(":", 1)[1].split():
        p = os.path.normpath(p)
        if not os.path.isabs(p) and p.endswith(".h"):
            heads.append(p)
    return heads


def symbols(objs):
    """(defined, undefined): src -> set of global symbols."""
    srcs = sorted(objs)
    r = subprocess.run(["nm", "-P", "-A"] + [objs[s] for s in srcs], capture_output=True, text=True, check=True)
    back = {objs[s]: s for s in srcs}
    defined = {s: set() for s in srcs}
    undefined = {s: set() for s in srcs}
    for line in r.stdout.splitlines():
        m = re.match(r"^(.*?): (\S+) (\S)", line)
        if not m:
            continue
        src = back.get(m.group(1))
        if src is None:
            continue
        name, kind = m.group(2), m.group(3)
        if kind == "U":
            undefined[src].add(name)
        elif kind.isupper():
            defined[src].add(name)
    return defined, undefined


def facts():
    """What the build says: objects' headers, calls between sources."""
    objs = objects()
    if not any(s.startswith("agent/") for s in objs):
        sys.exit("no objects under %s/agent: run make first" % B)
    headers = {s: deps(o) for s, o in objs.items()}
    defined, undefined = symbols(objs)
    # A symbol resolves within the program part that links it: hook objects
    # against hook and common, the agent's against the agent's and common.
    owner = {}
    for s, names in defined.items():
        for n in names:
            owner.setdefault((s.split("/")[0], n), s)
    calls = {}
    for s, names in undefined.items():
        part = s.split("/")[0]
        for n in names:
            t = owner.get((part, n)) or owner.get(("common", n))
            if t and t != s:
                calls.setdefault(s, {}).setdefault(t, set()).add(n)
    return objs, headers, calls


def layer_violations(table, headers, calls):
    bad = []
    for s, heads in sorted(headers.items()):
        fs = folder_of(s, table)
        if fs is None:
            bad.append("%s: in no folder of agent/layers.txt" % s)
            continue
        for h in heads:
            fh = folder_of(h, table)
            if fh is not None and fh not in table[fs]:
                bad.append("%s includes %s: %s may not use %s" % (s, h, fs, fh))
    for s, targets in sorted(calls.items()):
        fs = folder_of(s, table)
        for t, names in sorted(targets.items()):
            ft = folder_of(t, table)
            if fs and ft and ft not in table[fs]:
                bad.append("%s calls %s (%s): %s may not use %s" % (s, t, ", ".join(sorted(names)[:3]), fs, ft))
    return bad


def circles(objs, calls):
    """Sets of sources that reach each other by calls (Tarjan's SCC), size > 1."""
    graph = {s: set(calls.get(s, {})) for s in objs}
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


MAX_FILE_LINES = 800
MAX_FUNC_LINES = 150


def sizes():
    """Files over MAX_FILE_LINES and functions over MAX_FUNC_LINES in the
    parts (a function: from a '{' alone on its line to the next '}' alone,
    the project's style for function bodies)."""
    bad = []
    for part in PARTS:
        for d, _, files in os.walk(os.path.join(ROOT, part)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, ROOT)
                with open(path) as fh:
                    lines = fh.read().split("\n")
                if len(lines) - 1 > MAX_FILE_LINES:
                    bad.append("%s: %d lines (at most %d)" % (rel, len(lines) - 1, MAX_FILE_LINES))
                start = None
                for i, line in enumerate(lines):
                    if line == "{":
                        start = i
                    elif line == "}" and start is not None:
                        if i - start + 2 > MAX_FUNC_LINES:
                            bad.append("%s:%d: %s: %d lines (at most %d)" % (rel, start, lines[start - 1].strip(),
                                                                          i - start + 2, MAX_FUNC_LINES))
                        start = None
    return bad


def main():
    table = read_table()
    objs, headers, calls = facts()
    bad = layer_violations(table, headers, calls)
    circ = circles(objs, calls)
    if "--self-test" in sys.argv:
        # A domain file calling up into a session file must be caught.
        up = [s for s in objs if folder_of(s, table) == "agent/sessions"]
        down = [s for s in objs if folder_of(s, table) == "agent/domain"]
        fake = dict(calls)
        fake.setdefault(down[0], {}).setdefault(up[0], set()).add("an_up_call")
        found = [b for b in layer_violations(table, headers, fake) if "an_up_call" in b]
        print("%s self-test: an up-call from %s to %s is %s" %
              ("ok  " if found else "FAIL", down[0], up[0], "caught" if found else "NOT caught"))
        if not found:
            return 1
    for b in bad:
        print("FAIL layer: " + b)
    for c in circ:
        print("FAIL circle: " + " -> ".join(c))
    big = sizes()
    for x in big:
        print("FAIL size: " + x)
    n = len(objs)
    print("info %d sources, %d headers seen, %d cross-file calls" %
          (n, len({h for hs in headers.values() for h in hs}), sum(len(t) for t in calls.values())))
    if bad or circ or big:
        print("%d layer violations, %d circles, %d too long" % (len(bad), len(circ), len(big)))
        return 1
    print("all checks passed: the layers of agent/layers.txt hold, no circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
