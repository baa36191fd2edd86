#!/usr/bin/env python3
"""Checks that docs/architecture.md is true of the tree: every file it names exists,
every function, type or constant it names next to a file is defined there, and each
crate's "links" are exactly the crate's own dependencies on other Talon crates.

    scripts/check_architecture.py [--doc docs/architecture.md]

A path may be written in full (`gateway/src/backend.rs`) or, within a table row, short
(`objects.rs`, `s3/server.rs`): a short path must name exactly one file of the crates
the row already named in full, else any file of the tree ending with it. A name in
backticks right after a path (`gateway/src/objects.rs` `Objects::read`, `meta`) must
be defined in that file (`fn`, `struct`, `enum`, `trait`, `const`, `static`, `type`,
`mod`, `macro_rules!`), the last segment of `A::b` counting. Exits 1 with every
discrepancy listed; prints what it checked.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {"target", "node_modules", ".git", "fuzz"}
CODE = re.compile(r"`([^`]+)`")
PATHLIKE = re.compile(r"^[\w./-]+\.(rs|py|md|sh|toml|json|yaml|yml)$|^[\w.-]+/([\w.-]+/)*$")
IDENT = re.compile(r"^(?:[A-Z]\w*::)*[A-Za-z_]\w*(?:\(\))?$")


def tree_files() -> list[Path]:
    out = []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if rel.parts and rel.parts[0] in SKIP:
            continue
        if any(part in SKIP for part in rel.parts):
            continue
        out.append(rel)
    return out


def defines(text: str, name: str) -> bool:
    last = name.removesuffix("()").split("::")[-1]
    pattern = (rf"\b(fn|struct|enum|trait|const|static|type|mod|union)\s+{re.escape(last)}\b"
               rf"|macro_rules!\s*{re.escape(last)}\b|^\s*{re.escape(last)}\s*[,({{=]")
    return re.search(pattern, text, re.MULTILINE) is not None


def crate_links() -> dict[str, set[str]]:
    """Each workspace crate's folder → the Talon crates it depends on (normal deps)."""
    links = {}
    for manifest in [ROOT / "Cargo.toml", *ROOT.glob("*/Cargo.toml")]:
        if manifest.parent.name in SKIP:
            continue
        data = tomllib.loads(manifest.read_text())
        if "package" not in data:
            continue
        deps = {d for d in data.get("dependencies", {}) if d.startswith("talon-") or d == "talon"}
        links[data["package"]["name"]] = deps
    return links


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "architecture.md")
    args = p.parse_args()
    files = tree_files()
    names = {str(f) for f in files}
    problems: list[str] = []
    checked_paths = checked_names = 0
    links = crate_links()
    # `talon-core` (`core/`) -> folder "core"
    crate_of_folder = {}
    for line in args.doc.read_text().splitlines():
        m = re.match(r"\| `(talon[\w-]*)` \(`([\w./-]+)`\) \|", line)
        if m:
            crate_of_folder[m.group(1)] = m.group(2)
    for number, line in enumerate(args.doc.read_text().splitlines(), 1):
        if not line.startswith("|"):
            continue
        roots: list[str] = []
        current: list[str] = []
        last_end = 0
        for match in CODE.finditer(line):
            token = match.group(1).strip()
            gap = line[last_end:match.start()]
            last_end = match.end()
            if PATHLIKE.match(token) and ("/" in token or token.endswith(".rs")):
                checked_paths += 1
                bare = token.rstrip("/")
                if bare in names:
                    current = [bare]
                    roots.append(bare.split("/")[0])
                    continue
                # A short path: within the folders this row named, else anywhere.
                pool = [n for n in names if n.endswith("/" + bare)]
                near = [n for n in pool if n.split("/")[0] in roots]
                current = near or pool
                if not current:
                    problems.append(f"line {number}: `{token}` names no file")
                continue
            # A name right after a path (or after another such name): `a.rs` `f`, `g`.
            attached = gap.strip() in ("", ",", "(", ")", "→")
            if not attached:
                current = [] if gap.strip() not in (",",) else current
                continue
            rust = [c for c in current if c.endswith(".rs")]
            if rust and IDENT.match(token) and not token.startswith("talon"):
                checked_names += 1
                if not any(defines((ROOT / c).read_text(), token) for c in rust):
                    problems.append(f"line {number}: `{token}` is not defined in {' or '.join(rust)}")
        # The parts table: links are the crate's dependencies on Talon crates.
        m = re.match(r"\| `(talon[\w-]*)` \(`[^`]+`\) \| .* \| ([^|]*) \|$", line)
        if m and m.group(1) in links:
            said = m.group(2).strip()
            want = links[m.group(1)]
            if said == "all of the above":
                continue
            if said == "nothing of ours":
                named = set()
            else:
                named = {f"talon-{w.strip()}" for w in said.split(",") if w.strip()}
            if named != want:
                problems.append(f"line {number}: {m.group(1)} links {sorted(want) or 'nothing of ours'}, "
                                f"the table says {said!r}")
    for crate in sorted(set(links) - set(crate_of_folder)):
        problems.append(f"the parts table has no row for {crate}")
    print(f"architecture: {checked_paths} paths and {checked_names} names checked in {args.doc}")
    if problems:
        for problem in problems:
            print("  " + problem)
        sys.exit(1)


if __name__ == "__main__":
    main()
