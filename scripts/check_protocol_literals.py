#!/usr/bin/env python3
"""Protocol knowledge lives in `protocols`: no `x-amz-` or `x-ms-` string literal in Rust
source outside it.

A header name of S3 or Azure written in the gateway, the worker or another part is a rule
of the protocol kept in two places; `talon_protocols` names it once (`relay`, `answer`,
`checksum`, ...) and the parts ask there. Tests are exempt (a test says what a client
sends): files under a `tests/` folder, `testkit/`, `fuzz/` and `bench/` (the load
generators speak the protocols as clients), and a file's `#[cfg(test)]` module (from
that line to the end of the file, where this tree keeps them).

Usage: scripts/check_protocol_literals.py [ROOT]
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
EXEMPT_TOP = {"protocols", "testkit", "fuzz", "bench", "target", "tests"}
LITERAL = re.compile(r'"(x-amz-|x-ms-)[^"]*"', re.IGNORECASE)


def offending(path: pathlib.Path) -> list[tuple[int, str]]:
    found = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.strip().startswith("#[cfg(test)]"):
            break
        code = line.split("//", 1)[0]  # a comment may name a header
        for m in LITERAL.finditer(code):
            found.append((n, m.group(0)))
    return found


def main() -> int:
    problems = []
    checked = 0
    for path in sorted(ROOT.rglob("*.rs")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in EXEMPT_TOP or "tests" in rel.parts[:-1] or "examples" in rel.parts[:-1]:
            continue
        checked += 1
        for n, literal in offending(path):
            problems.append(f"{rel}:{n}: {literal}: name it in talon_protocols and use it from there")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{checked} source files outside protocols checked, {len(problems)} protocol header literals")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
