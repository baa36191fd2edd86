#!/usr/bin/env python3
"""The command lines the README and the docs show, checked against the binary.

Every `talon …` (and `talon-gateway`, `talon-worker`, `talon-coordinator`,
`talon-origin-stub`, and `cargo run -- …`) line in their shell blocks and inline code is
parsed as a shell would split it; a `./scripts/…` they run must exist; its subcommand must exist, and each `--flag` it passes must be one that
command's `--help` lists (a name or an alias). A doc that names a flag the binary does
not know fails the run, with the file, the line and the flag.

What it does not check: the flags' values, and commands the docs show for other tools
(curl, aws, helm).

Usage: scripts/check_doc_commands.py [--talon target/debug/talon] [FILE ...]
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
# The part binaries are aliases of `talon PART`.
ALIASES = {
    "talon-gateway": ["gateway"],
    "talon-worker": ["worker"],
    "talon-coordinator": ["coordinator"],
    "talon-origin-stub": ["origin"],
}
SHELL_BLOCK = re.compile(r"^```(sh|bash|console|shell)?\s*$")
INLINE = re.compile(r"`(talon[a-z-]*\s[^`]*)`")
FLAG_IN_HELP = re.compile(r"--[a-z0-9][a-z0-9-]*")


def command_lines(path: pathlib.Path):
    """(line number, command text) for each talon command the file shows."""
    lines = path.read_text().splitlines()
    fenced = in_block = False
    pending, start = "", 0
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            # An opening fence says the block's language; a closing one ends any block.
            fenced = not fenced
            in_block = fenced and bool(SHELL_BLOCK.match(line))
            pending = ""
            continue
        if in_block:
            text = line.strip()
            if text.startswith("$ "):
                text = text[2:]
            if pending:
                text = pending + " " + text
            else:
                start = n
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            pending = ""
            for part in re.split(r"\s(?:&&|\|\||;|\|)\s", text):
                part = part.strip()
                # `cargo run [--release] -- ARGS` is `talon ARGS`.
                part = re.sub(r"^cargo run( --release)? -- ", "talon ", part)
                if re.match(r"^(\w+=\S*\s+)*(talon[a-z-]*|\./scripts/\S+)(\s|$)", part):
                    yield start, part
        else:
            for m in INLINE.finditer(line):
                yield n, m.group(1)


def help_flags(talon: str, words: list[str], cache: dict) -> set[str] | None:
    key = tuple(words)
    if key not in cache:
        proc = subprocess.run([talon, *words, "--help"], capture_output=True, text=True, timeout=30)
        cache[key] = set(FLAG_IN_HELP.findall(proc.stdout)) if proc.returncode == 0 else None
    return cache[key]


def subcommands(talon: str, cache: dict) -> set[str]:
    if "subcommands" not in cache:
        out = subprocess.run([talon, "--help"], capture_output=True, text=True, timeout=30).stdout
        section = out.split("Commands:", 1)[1].split("Options:", 1)[0]
        cache["subcommands"] = {m.group(1) for m in re.finditer(r"^\s{2}([a-z]+)\s", section, re.M)}
    return cache["subcommands"]


def check(talon: str, path: pathlib.Path, cache: dict) -> tuple[int, list[str]]:
    problems, checked = [], 0
    for n, text in command_lines(path):
        try:
            words = shlex.split(text, comments=True)
        except ValueError:
            words = text.split()
        while words and re.match(r"^\w+=", words[0]):
            words.pop(0)  # VAR=value before the command
        if not words:
            continue
        program, rest = words[0], words[1:]
        if program.startswith("./scripts/"):
            if not (ROOT / program).is_file():
                problems.append(f"{path}:{n}: `{program}` does not exist: {text}")
            continue
        if program in ALIASES:
            sub = ALIASES[program]
        elif program == "talon":
            if not rest or rest[0].startswith("-"):
                sub = []
            else:
                sub = [rest[0]]
                rest = rest[1:]
                if sub[0] not in subcommands(talon, cache):
                    problems.append(f"{path}:{n}: `talon {sub[0]}` is not a command: {text}")
                    continue
        else:
            continue  # talon-data, talon-loadgen and the like: not checked here
        known = help_flags(talon, sub, cache)
        if known is None:
            problems.append(f"{path}:{n}: `talon {' '.join(sub)} --help` failed")
            continue
        checked += 1
        for word in rest:
            if not word.startswith("--") or word == "--":
                continue
            flag = word.split("=", 1)[0]
            if flag not in known:
                problems.append(f"{path}:{n}: `{flag}` is not a flag of `talon {' '.join(sub)}`: {text}")
    return checked, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--talon", default=str(ROOT / "target/debug/talon"))
    parser.add_argument("files", nargs="*", default=DOCS)
    args = parser.parse_args()
    cache: dict = {}
    total, problems = 0, []
    for name in args.files:
        checked, found = check(args.talon, ROOT / name, cache)
        total += checked
        problems += found
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{total} command lines checked against --help, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
