#!/usr/bin/env python3
"""The house's rules, checked: room imports, file sizes (issue 28).

  contrib/layout.py check          every rule below; exit 1 with the reasons when one fails
  contrib/layout.py draw           the room drawing of each crate as text: layers top-down, each
                                   room with the rooms it imports (docs/design/accountd-layout.md)
  contrib/layout.py dot            the same in Graphviz's DOT (stdout)
  contrib/layout.py sizes          the non-test line count of every file over 800
  contrib/layout.py selftest       each rule shown to fail on a tree that breaks it

Rooms. A crate's room is a top-level module of its library (`governor.rs` and `governor/` are
one room, `governor`). A room imports another when its non-test code names it: `crate::x`,
`super::x` from a top-level file, or `x::` after `use crate::{...}`. Test code (an inline
`#[cfg(test)] mod ... { }`, `tests.rs`, `tests/`, `benches/`) is left out: it may reach anywhere.
The rules, for each crate in LAYERS:
  - no cycle between rooms;
  - no import back up: every room has a layer (LAYERS below, lowest first) and imports only
    rooms of its own layer or lower ones; a room missing from LAYERS is an error (say where it
    belongs when you add one).
Files. No file has more than MAX_LINES lines of non-test code (test files apart).
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 1000

# Per crate: the library's source folder and its rooms in layers, lowest first. A room may
# import its own layer and the layers before it, never a later one.
LAYERS = {
    "accountd": ("accountd/src", "accountd", [
        # Foundations: no knowledge of teamshare's concepts beyond types and text.
        ["logging"],
        # The governor acts on Slurm and knows no SQL.
        ["governor"],
        # What is computed from the store (and from Slurm), and what fills it.
        ["sample", "slurm_setup"],
        ["status", "metrics", "config_watch"],
        # The daemon and the command line, on top.
        ["daemon"],
        ["cli"],
    ]),
    # accountd's crates, lowest first; the rooms each imports from a lower crate are not drawn.
    "teamshare-slurm": ("accountd/crates/slurm/src", "teamshare_slurm", [
        # Foundations: no knowledge of teamshare's concepts beyond types and text.
        ["period", "parsable", "slurm_cli"],
        # One job as Slurm holds it, typed (issue 26): what both ways of reading give.
        ["job_record"],
        # Slurm's records, read and typed.
        ["squeue", "sacct", "capacity", "requeue_delay"],
        # Where running jobs' shards sit, from the records' per-node detail (issue 30).
        ["gres_detail"],
        # The governor's writes, behind one trait; the requeue check holds through them.
        ["slurm_write"],
        ["requeue_check"],
        # libslurm in process: the reads, and the writes behind that trait.
        ["slurm_api"],
    ]),
    "teamshare-accounting": ("accountd/crates/accounting/src", "teamshare_accounting", [
        # The GPU samples' record.
        ["gpu_sample"],
        # The model is the pure arithmetic.
        ["model"],
        # The store keeps the records; every SQL statement is its.
        ["store"],
        # What is computed from the store (and from Slurm), and what fills it.
        ["report", "ingest"],
    ]),
    # One room: the replay's own parts are its submodules (calibrate, curve, history, ...).
    "teamshare-replay": ("accountd/crates/replay/src", "teamshare_replay", [
        ["replay"],
    ]),
    "teamshare-policy": ("plugin/policy/src", "teamshare_policy", [
        # What a request and a configuration say: GPU requests, offered GPUs, classes, arrays.
        ["gres", "offered", "priority", "array"],
        # The governor's rules (DESIGN 4) as a pure plan.
        ["governance"],
        # The state the plugin reads, and the checks of a submission.
        ["inputs", "submit"],
        ["modify"],
    ]),
    "teamshare-config": ("config/src", "teamshare_config", [
        ["diagnostic", "duration", "suggest"],
        ["config", "read"],
        # GPU families (a whole type and its slices) counted in GPU-equivalents.
        ["family"],
        ["validate"],
    ]),
}


def strip_comments(text):
    """The code without // comments (doc comments included) and without string literals' text,
    line structure kept."""
    out = []
    for line in text.split("\n"):
        line = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
        i = line.find("//")
        out.append(line if i < 0 else line[:i])
    return "\n".join(out)


def without_test_modules(lines):
    """The lines outside `#[cfg(test)]` modules (a `mod name {` block or `mod name;`)."""
    keep, skip_to, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        if skip_to is None and line.strip() == "#[cfg(test)]" and i + 1 < len(lines):
            nxt = lines[i + 1]
            m = re.match(r"^(\s*)(pub(\([^)]*\))?\s+)?mod\s+\w+\s*(\{|;)", nxt)
            if m:
                if m.group(4) == ";":
                    i += 2
                    continue
                skip_to = m.group(1) + "}"
                i += 2
                continue
        if skip_to is not None:
            if line.rstrip() == skip_to:
                skip_to = None
            i += 1
            continue
        keep.append(line)
        i += 1
    return keep


def is_test_file(path):
    parts = Path(path).parts
    return (
        "tests" in parts[:-1] or "benches" in parts or parts[-1] in ("tests.rs",)
        or parts[-1].endswith("_tests.rs") or parts[0] == "tests"
    )


def tracked_rust_files():
    out = subprocess.run(["git", "ls-files", "*.rs"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [p for p in out.split() if (ROOT / p).is_file()]


def room_of(src, path):
    rel = Path(path).relative_to(src)
    first = rel.parts[0]
    return first[:-3] if first.endswith(".rs") else first


def imports(src, lib, path, rooms):
    """The rooms the non-test code of one file names."""
    text = (ROOT / path).read_text()
    code = "\n".join(without_test_modules(strip_comments(text).split("\n")))
    found = set(re.findall(r"\bcrate::(\w+)", code))
    found |= set(re.findall(rf"\b{lib}::(\w+)", code))  # the binary's modules name the library
    for group in re.findall(r"\bcrate::\{([^;]*?)\}\s*;", code, flags=re.S):
        depth, name, names = 0, "", []
        for ch in group:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if depth == 0 and (ch.isalnum() or ch == "_"):
                name += ch
            else:
                if name:
                    names.append(name)
                name = ""
                if depth == 0 and ch == ",":
                    pass
            if depth > 0:
                name = ""
        if name:
            names.append(name)
        # Only the first word of each top-level item counts (a::b names a).
        for item in re.split(r",(?![^{]*\})", group):
            m = re.match(r"\s*(\w+)", item)
            if m:
                found.add(m.group(1))
    rel = Path(path).relative_to(src)
    if len(rel.parts) == 1:  # a top-level file: super:: is the crate's root
        found |= set(re.findall(r"\bsuper::(\w+)", code))
    if len(rel.parts) == 2:  # one folder down: super::super:: is the crate's root
        found |= set(re.findall(r"\bsuper::super::(\w+)", code))
    return {r for r in found if r in rooms}


def graph(crate):
    src, lib, layers = LAYERS[crate]
    files = [p for p in tracked_rust_files() if p.startswith(src + "/") and not is_test_file(p)]
    # Modules the library root declares under #[cfg(test)] are test code too.
    root = strip_comments((ROOT / src / "lib.rs").read_text())
    test_rooms = set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", root))
    files = [p for p in files if room_of(src, p) not in test_rooms]
    rooms = {room_of(src, p) for p in files} - {"lib", "main"}
    edges = {}
    for p in files:
        r = room_of(src, p)
        if r in ("lib", "main"):
            continue
        for t in imports(src, lib, p, rooms):
            if t != r:
                edges.setdefault((r, t), []).append(p)
    return src, layers, rooms, edges


def cycles(rooms, edges):
    """Strongly connected components of more than one room (Tarjan)."""
    adj = {r: sorted(t for (f, t) in edges if f == r) for r in rooms}
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
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
                out.append(sorted(comp))

    for r in sorted(rooms):
        if r not in index:
            visit(r)
    return out


def check_rooms(crate):
    return rule_errors(crate, *graph(crate))


def rule_errors(crate, src, layers, rooms, edges):
    """The rules over one crate's rooms and their imports (edges: (from, to) -> files)."""
    level = {r: i for i, layer in enumerate(layers) for r in layer}
    errors = []
    for r in sorted(rooms - set(level)):
        errors.append(f"{crate}: room `{r}` ({src}/{r}) has no layer in contrib/layout.py LAYERS")
    for comp in cycles(rooms, edges):
        how = "; ".join(f"{f} -> {t} ({', '.join(sorted(set(edges[(f, t)])))})"
                        for (f, t) in sorted(edges) if f in comp and t in comp)
        errors.append(f"{crate}: rooms in a cycle: {', '.join(comp)}: {how}")
    for (f, t), where in sorted(edges.items()):
        if f in level and t in level and level[t] > level[f]:
            errors.append(f"{crate}: `{f}` imports `{t}`, a room of a higher layer: "
                          f"{', '.join(sorted(set(where)))}")
    return errors


def non_test_lines(path):
    return len(without_test_modules((ROOT / path).read_text().split("\n")[:-1]))


def check_sizes():
    errors = []
    for p in tracked_rust_files():
        if is_test_file(p):
            continue
        n = non_test_lines(p)
        if n > MAX_LINES:
            errors.append(f"{p}: {n} lines of non-test code (at most {MAX_LINES}): split it")
    return errors


def dot():
    print("digraph rooms {\n  rankdir=BT; node [shape=box, fontname=monospace];")
    for crate in LAYERS:
        src, layers, rooms, edges = graph(crate)
        print(f'  subgraph "cluster_{crate}" {{ label="{crate} ({src})";')
        for i, layer in enumerate(layers):
            names = " ".join(f'"{crate}::{r}"' for r in layer if r in rooms)
            print(f"    {{ rank=same; {names} }}  // layer {i}")
        for (f, t) in sorted(edges):
            print(f'    "{crate}::{f}" -> "{crate}::{t}";')
        print("  }")
    print("}")


def crate_imports(crate):
    """(room, other crate's lib::room) pairs: the rooms of the crates in LAYERS that a room
    names, as `crate::x` through a re-export or as `lib::x` (the compiler keeps these acyclic:
    crates cannot depend on each other both ways)."""
    src, lib, _ = LAYERS[crate]
    own = graph(crate)[2]
    others = {}
    for name, (_, olib, layers) in LAYERS.items():
        if name != crate:
            for room in (r for layer in layers for r in layer):
                others.setdefault(room, []).append(olib)
    deps = (ROOT / Path(src).parent / "Cargo.toml").read_text()
    out = set()
    for p in tracked_rust_files():
        if not p.startswith(src + "/") or is_test_file(p) or room_of(src, p) in ("lib", "main"):
            continue
        code = "\n".join(without_test_modules(strip_comments((ROOT / p).read_text()).split("\n")))
        for prefix in ["crate", lib] + sorted({l for ls in others.values() for l in ls}):
            for name in re.findall(rf"\b{prefix}::(\w+)", code):
                if name in own or name not in others:
                    continue
                for olib in others[name]:
                    if prefix in ("crate", lib, olib) and olib.replace("_", "-") in deps:
                        out.add((room_of(src, p), f"{olib}::{name}"))
    return out


def draw():
    for crate in LAYERS:
        src, layers, rooms, edges = graph(crate)
        outside = crate_imports(crate)
        print(f"{crate} ({src}), top layer first; `room -> what it imports` (in this crate; "
              "then in others)")
        for i in reversed(range(len(layers))):
            print(f"  layer {i}")
            for r in layers[i]:
                if r in rooms:
                    out = sorted(t for (f, t) in edges if f == r)
                    ext = sorted(t for (f, t) in outside if f == r)
                    line = ", ".join(out) if out else "(nothing)"
                    if ext:
                        line += "; " + ", ".join(ext)
                    print(f"    {r:14} -> {line}")
        print()


def selftest():
    """The checker checked: each rule fails on a tree that breaks it (contrib/test.sh)."""
    code = ["fn a() {}", "#[cfg(test)]", "mod tests {", "    fn t() {}", "}", "fn b() {}"]
    assert without_test_modules(code) == ["fn a() {}", "fn b() {}"], "test module kept"
    assert without_test_modules(["#[cfg(test)]", "mod tests;", "fn c() {}"]) == ["fn c() {}"]
    assert strip_comments('x // crate::y\n"crate::z"') == 'x \n""', "comments or strings kept"
    layers = [["low"], ["mid"], ["high"]]
    rooms = {"low", "mid", "high"}
    assert rule_errors("c", "s", layers, rooms, {("high", "low"): ["h.rs"]}) == []
    up = rule_errors("c", "s", layers, rooms, {("low", "mid"): ["l.rs"]})
    assert any("a room of a higher layer" in e for e in up), up
    loop = rule_errors("c", "s", [["low", "mid"]], {"low", "mid"},
                       {("low", "mid"): ["l.rs"], ("mid", "low"): ["m.rs"]})
    assert any("rooms in a cycle: low, mid" in e for e in loop), loop
    lost = rule_errors("c", "s", layers, rooms | {"new"}, {})
    assert any("room `new`" in e and "no layer" in e for e in lost), lost
    print("layout: selftest passed")


def main(argv):
    what = argv[1] if len(argv) > 1 else "check"
    if what == "selftest":
        selftest()
        return 0
    if what == "draw":
        draw()
        return 0
    if what == "dot":
        dot()
        return 0
    if what == "sizes":
        for p in tracked_rust_files():
            if not is_test_file(p) and non_test_lines(p) > 800:
                print(f"{non_test_lines(p):5} {p}")
        return 0
    if what != "check":
        print(__doc__, file=sys.stderr)
        return 2
    errors = check_sizes()
    for crate in LAYERS:
        errors += check_rooms(crate)
    for e in errors:
        print(f"layout: {e}", file=sys.stderr)
    if not errors:
        rooms = sum(len(graph(c)[2]) for c in LAYERS)
        edges = sum(len(graph(c)[3]) for c in LAYERS)
        print(f"layout: {rooms} rooms, {edges} imports, no cycle, none back up; "
              f"no file over {MAX_LINES} lines of non-test code")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
