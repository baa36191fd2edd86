#!/usr/bin/env python3
"""docs/gateway.md's compatibility table, from what the gateway SDK suite served.

    scripts/compat_table.py [--write | --check] [--results target/compat]

The gateway suite (tests/sdk/gateway) records, before each deployment stops, the
requests its gateway answered per front and operation, with the origin that front
reads (tests/sdk/gateway/compat.py writes target/compat/<deployment>.json). This script
merges those files into one table, an operation per row and an origin per column:

    served   at least one request of the operation was answered successfully
    refused  every request of it failed (an error the suite asked for, or NotImplemented)
    -        the suite sent none through a front over that origin

It prints the table; --write puts it into docs/gateway.md between the
`<!-- compat-table:begin -->` and `<!-- compat-table:end -->` markers; --check (what the
test command runs after the suite) exits 1 when the table there differs from this run's,
so the docs cannot claim what the suites did not do. Counts are left out of the table:
they move with retries, the statuses do not.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "gateway.md"
BEGIN, END = "<!-- compat-table:begin -->", "<!-- compat-table:end -->"
ORIGINS = ["stub S3 API", "stub Azure API", "moto (S3)", "Azurite (Azure)"]
FRONTS = {"s3": "S3", "azure": "Azure"}
# The deployments the suite starts: a table from fewer is a partial run, not the table.
DEPLOYMENTS = ["up", "cluster-main", "cluster-cross", "up-moto", "up-azurite"]


def load(results: Path) -> dict:
    missing = [d for d in DEPLOYMENTS if not (results / f"{d}.json").is_file()]
    if missing:
        sys.exit(f"compat-table: no results for {', '.join(missing)} in {results}: run the whole "
                 "gateway suite (python -m pytest tests/sdk/gateway) first")
    merged: dict = {}
    for d in DEPLOYMENTS:
        for key, counts in json.loads((results / f"{d}.json").read_text()).items():
            entry = merged.setdefault(tuple(key.split("|")), {"ok": 0, "failed": 0})
            entry["ok"] += counts["ok"]
            entry["failed"] += counts["failed"]
    return merged


def render(merged: dict) -> str:
    rows = sorted({(front, op) for front, op, _ in merged}, key=lambda r: (list(FRONTS).index(r[0]), r[1]))
    lines = ["| front | operation | " + " | ".join(ORIGINS) + " |", "|---|---|" + "---|" * len(ORIGINS)]
    for front, op in rows:
        cells = []
        for origin in ORIGINS:
            c = merged.get((front, op, origin))
            cells.append("-" if c is None else ("served" if c["ok"] else "refused"))
        lines.append(f"| {FRONTS[front]} | {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def split_doc(text: str) -> tuple[str, str, str]:
    try:
        head, rest = text.split(BEGIN + "\n", 1)
        body, tail = rest.split(END, 1)
    except ValueError:
        sys.exit(f"compat-table: {DOC} lacks the {BEGIN} / {END} markers")
    return head, body, tail


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", type=Path, default=ROOT / "target" / "compat")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write the table into docs/gateway.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/gateway.md's table differs")
    args = p.parse_args()
    table = render(load(args.results))
    head, body, tail = split_doc(DOC.read_text())
    if args.write:
        DOC.write_text(head + BEGIN + "\n" + table + END + tail)
        print(f"compat-table: wrote {len(table.splitlines()) - 2} rows into {DOC.relative_to(ROOT)}")
    elif args.check:
        if body != table:
            diff = difflib.unified_diff(body.splitlines(), table.splitlines(), "docs/gateway.md", "this run",
                                        lineterm="")
            print("\n".join(diff))
            sys.exit("compat-table: docs/gateway.md's table is not what this run served; "
                     "run scripts/compat_table.py --write and commit it")
        print("compat-table: docs/gateway.md's table is what this run served")
    else:
        sys.stdout.write(table)


if __name__ == "__main__":
    main()
