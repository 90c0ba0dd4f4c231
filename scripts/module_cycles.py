#!/usr/bin/env python3
"""Module import cycles in src/: a graph of modules (one per file), an edge A -> B when A names
B's items (`crate::...` or `super::...` paths, `use` or inline; names re-exported by a module's
`pub use` resolved to the module defining them), edges between a module and its own ancestors
dropped (a parent's `mod`/`pub use` and a child's `super::` are not circles). Prints every
strongly connected component with more than one module, and fails (exit 1) on any but those
through a module of KNOWN (circles someone is removing; delete the entry with the circle). Standard library
only; run by `make check`."""
import re, sys
from pathlib import Path
SRC = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "src")
# A circle through one of these modules counts as known (one someone is removing); empty: none.
KNOWN: set = set()

def modpath(f):
    p = f.relative_to(SRC).with_suffix("")
    parts = list(p.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)

files = {modpath(f): f for f in SRC.rglob("*.rs")}
mods = set(files)
# inline `mod x {` blocks are part of their file's module
def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)

texts = {m: strip(f.read_text()) for m, f in files.items()}
# re-exports: module -> {name: defining module}
reexp = {}
for m, t in texts.items():
    d = {}
    for body in re.findall(r"pub use ([^;]+);", t):
        body = re.sub(r"\s+", "", body)
        # expand a::b::{C, D} forms (one level)
        mm = re.match(r"(.*?)::\{(.*)\}$", body)
        items = [(mm.group(1), x) for x in mm.group(2).split(",")] if mm else [(body.rsplit("::", 1)[0] if "::" in body else "", body.rsplit("::", 1)[-1])]
        for prefix, name in items:
            name = name.split("::")[-1].split(" as ")[-1]
            segs = [s for s in prefix.split("::") if s]
            if segs and segs[0] == "crate":
                target = tuple(segs[1:])
            elif segs and segs[0] == "super":
                target = m[:-1] + tuple(segs[1:])
            else:
                target = m + tuple(segs)
            while target and target not in mods:
                target = target[:-1]
            if target:
                d[name] = target
    reexp[m] = d

def resolve(segs):
    """Longest module prefix of segs, following re-exports of the next name."""
    i = len(segs)
    while i > 0 and tuple(segs[:i]) not in mods:
        i -= 1
    if i == 0:
        return None
    m = tuple(segs[:i])
    for _ in range(5):
        if i < len(segs) and segs[i] in reexp.get(m, {}):
            nm = reexp[m][segs[i]]
            if nm == m:
                break
            m = nm
        else:
            break
    return m

def absolute(m, path):
    """`crate::a::b` or `super::b` (seen from module m) as segments from the crate root."""
    segs = path.split("::")
    if segs[0] == "crate":
        return segs[1:]
    if segs[0] == "super":
        base = list(m)
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
        return base + segs
    return None

edges = {m: set() for m in mods}
for m, t in texts.items():
    # expand use-groups crate::a::{b, c::d} into separate paths
    paths = []
    for body in re.findall(r"\buse\s+([^;]+);", t):
        body = re.sub(r"\s+", "", body)
        stack = [body]
        while stack:
            b = stack.pop()
            g = re.match(r"(.*?)::\{(.*)\}$", b)
            if g:
                depth, cur, parts = 0, "", []
                for ch in g.group(2):
                    if ch == "," and depth == 0:
                        parts.append(cur); cur = ""
                    else:
                        depth += ch == "{"; depth -= ch == "}"; cur += ch
                parts.append(cur)
                stack += [g.group(1) + "::" + p for p in parts if p and p != "self"]
                stack.append(g.group(1))
            else:
                paths.append(b)
    paths += re.findall(r"\b((?:crate|super)(?:::\w+)+)", t)
    # A `use` naming a module makes its last segment an alias: `x86::avx2::f` reaches avx2.
    aliases = {}
    for p in list(paths):
        full = absolute(m, p)
        if full and tuple(full) in mods:
            aliases[full[-1]] = full
    for name, full in aliases.items():
        for rest in re.findall(rf"(?<![\w:]){name}((?:::\w+)+)", t):
            paths.append("crate::" + "::".join(full) + rest)
    for p in paths:
        full = absolute(m, p)
        tgt = resolve(full) if full else None
        if tgt and tgt != m and tgt != m[:len(tgt)] and m != tgt[:len(m)]:
            edges[m].add(tgt)

# Tarjan
index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1:
            out.append(comp)
for v in sorted(mods):
    if v not in index:
        sc(v)
print(f"{len(mods)} modules, {sum(map(len, edges.values()))} edges, {len(out)} circles")
new = 0
for comp in out:
    names = sorted("::".join(c) for c in comp)
    known = bool(KNOWN & set(names))
    new += not known
    print("circle" + (" (known)" if known else "") + ":", " <-> ".join(names))
    for a in comp:
        for b in edges[a]:
            if b in comp:
                print("   ", "::".join(a), "->", "::".join(b))
sys.exit(1 if new else 0)
