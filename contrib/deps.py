#!/usr/bin/env python3
"""The dependency policy, checked over `cargo metadata --locked` (issue 28).

  contrib/deps.py            check; exit 1 with the reasons when a rule fails
  contrib/deps.py --list     every dependency with its licence, and the duplicates
  contrib/deps.py selftest   each rule shown to fail on packages that break it

Rules, over every package Cargo.lock resolves (normal, build and dev dependencies, every
platform):
  - licences: each package's `license` expression must be satisfiable with ALLOWED alone
    (`A OR B` needs one of them, `A AND B` both, `A WITH exception` as A); a package without a
    `license` expression is an error;
  - duplicates: one semver-major version per crate name (0.x counts x as the major), except
    the pairs in ACCEPTED_DUPLICATES, each with the reason it is accepted;
  - banned crates: none of BANNED.
Why this and not cargo-deny: docs/design/accountd-layout.md, "The rules in the build".
Security advisories are not checked here: the RustSec database is on GitHub, which CI cannot
reach.
"""
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Permissive licences compatible with the project's GPL-2.0-or-later (Apache-2.0 through the
# "or later": the combined work is distributable under GPL-3.0).
ALLOWED = {
    "MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "Unicode-3.0", "Unlicense",
    "BSL-1.0", "Zlib", "LGPL-2.1-or-later",
}

# name -> (the majors accepted together, why)
ACCEPTED_DUPLICATES = {
    "thiserror": ({"1", "2"}, "nvml-wrapper 0.11 still derives with thiserror 1"),
    "thiserror-impl": ({"1", "2"}, "thiserror's, as above"),
    "syn": ({"2", "3"}, "bindgen 0.70 (slurm-sys) and nvml-wrapper's derives are on syn 2"),
    "shlex": ({"1", "2"}, "bindgen 0.70 needs shlex 1, cc shlex 2"),
    "hashbrown": ({"0.14", "0.17"}, "rusqlite's hashlink 0.9 is on hashbrown 0.14"),
    "itertools": ({"0.10", "0.13"}, "criterion (benchmarks only) is on itertools 0.10"),
    "toml_edit": ({"0.22", "0.25"}, "teamshare-config reads TOML with 0.22; proc-macro-crate (a derive helper, some platforms) is on 0.25"),
    "toml_datetime": ({"0.6", "1"}, "toml_edit's, as above"),
    "winnow": ({"0.7", "1"}, "toml_edit's parser, as above"),
}

# name -> why it must not be in the build
BANNED = {
    "openssl-sys": "the plugin runs inside slurmctld: no second TLS library in its address space",
    "native-tls": "as openssl-sys",
    "jemallocator": "one global allocator at most, and not in the plugin",
    "tikv-jemallocator": "as jemallocator",
}


def major(version):
    parts = version.split(".")
    return parts[0] if parts[0] != "0" else "0." + parts[1]


def satisfiable(expr):
    """Whether an SPDX expression (or the old `A/B` form) can be met with ALLOWED licences."""
    tokens = re.findall(r"\(|\)|[A-Za-z0-9.+\-]+", expr.replace("/", " OR "))
    pos = [0]

    def term():
        tok = tokens[pos[0]]
        pos[0] += 1
        if tok == "(":
            value = disjunction()
            pos[0] += 1  # ")"
        else:
            value = tok in ALLOWED
        if pos[0] < len(tokens) and tokens[pos[0]] == "WITH":
            pos[0] += 2  # an exception only adds permissions
        return value

    def conjunction():
        value = term()
        while pos[0] < len(tokens) and tokens[pos[0]] == "AND":
            pos[0] += 1
            value = term() and value
        return value

    def disjunction():
        value = conjunction()
        while pos[0] < len(tokens) and tokens[pos[0]] == "OR":
            pos[0] += 1
            value = conjunction() or value
        return value

    return disjunction() and pos[0] == len(tokens)


def metadata():
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    m = json.loads(out)
    ours = set(m["workspace_members"])
    resolved = {n["id"] for n in m["resolve"]["nodes"]}
    return [p for p in m["packages"] if p["id"] in resolved and p["id"] not in ours]


def check(packages):
    errors = []
    majors = defaultdict(set)
    for p in packages:
        name, lic = p["name"], p.get("license")
        majors[name].add(major(p["version"]))
        if not lic:
            errors.append(f"{name} {p['version']}: no licence expression")
        elif not satisfiable(lic):
            errors.append(f"{name} {p['version']}: licence `{lic}` is not in the allowed set")
        if name in BANNED:
            errors.append(f"{name} {p['version']} is banned: {BANNED[name]}")
    for name, found in sorted(majors.items()):
        if len(found) < 2:
            continue
        accepted = ACCEPTED_DUPLICATES.get(name, (set(), ""))[0]
        if found != accepted:
            errors.append(f"{name}: versions {', '.join(sorted(found))} side by side "
                          f"(accepted: {', '.join(sorted(accepted)) or 'none'}); see cargo tree -d")
    for name, (accepted, _) in sorted(ACCEPTED_DUPLICATES.items()):
        if majors.get(name, set()) != accepted:
            errors.append(f"{name}: accepted as {', '.join(sorted(accepted))} side by side, now "
                          f"{', '.join(sorted(majors.get(name, set()))) or 'absent'}: update "
                          "ACCEPTED_DUPLICATES")
    return errors


def selftest():
    """The checker checked: each rule fails on packages that break it (contrib/test.sh)."""
    assert satisfiable("MIT OR Apache-2.0") and satisfiable("MIT/Apache-2.0")
    assert satisfiable("(MIT OR Apache-2.0) AND Unicode-3.0")
    assert satisfiable("Apache-2.0 WITH LLVM-exception OR MIT")
    assert not satisfiable("GPL-3.0-only") and not satisfiable("MIT AND SSPL-1.0")
    assert satisfiable("SSPL-1.0 OR MIT")
    ok = {"name": "a", "version": "1.0.0", "license": "MIT"}
    # Alone, a package breaks no rule (the accepted pairs it lacks are all that is said).
    assert all("accepted as" in e for e in check([ok])), check([ok])
    found = check([ok, {"name": "b", "version": "1.0.0", "license": "SSPL-1.0"},
                   {"name": "c", "version": "0.1.0", "license": None},
                   {"name": "openssl-sys", "version": "0.9.0", "license": "MIT"},
                   {"name": "a", "version": "2.0.0", "license": "MIT"}])
    for want in ("b 1.0.0: licence", "c 0.1.0: no licence", "openssl-sys 0.9.0 is banned",
                 "a: versions 1, 2 side by side"):
        assert any(want in e for e in found), (want, found)
    print("deps: selftest passed")


def main(argv):
    if "selftest" in argv:
        selftest()
        return 0
    packages = metadata()
    if "--list" in argv:
        for p in sorted(packages, key=lambda p: (p["name"], p["version"])):
            print(f"{p['name']:32} {p['version']:12} {p.get('license')}")
        return 0
    errors = check(packages)
    for e in errors:
        print(f"deps: {e}", file=sys.stderr)
    if not errors:
        print(f"deps: {len(packages)} packages, licences allowed, no banned crate, "
              f"{len(ACCEPTED_DUPLICATES)} accepted duplicates and no other")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
