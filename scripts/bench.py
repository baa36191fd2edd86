#!/usr/bin/env python3
"""Talon's microbenchmark harness: criterion runs -> a stable JSON map -> baseline diffs.

    scripts/bench.py run   [-p CRATE] [--smoke] [-- CRITERION_ARGS...]
    scripts/bench.py save  NAME
    scripts/bench.py check [-p CRATE] [--smoke] [--soft] [--threshold PCT]
                           [--baseline NAME] [--no-run]

`run` runs every criterion bench target in the workspace (or one crate's) and writes
`bench/results/latest.json`: `{"<bench target>::<criterion id>": median_ns}`, sorted, one
entry per benchmark, nothing else, so that diffs of it are meaningful. Details (the
confidence interval, the commit, the hardware) go to `bench/results/latest.meta.json`.
`save NAME` promotes latest.json to `bench/baselines/NAME.json` (commit that file).
`check` runs (unless --no-run), then prints a markdown table against the baseline and
exits 1 if any benchmark is slower than the baseline by more than the threshold
(default 10 %), unless --soft.

--smoke compiles every bench with the dev profile (reusing the test build) and runs each
benchmark for a fraction of a second: it proves the benches build and run and prints the
table, but its timings are not comparable, so it never fails on a timing. CI uses it.

Only the standard library is used: this runs before any venv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BASELINES = ROOT / "bench" / "baselines"
LATEST = RESULTS / "latest.json"
LATEST_META = RESULTS / "latest.meta.json"

# Smoke mode: enough for criterion to produce an estimate, nothing more.
SMOKE_ARGS = ["--warm-up-time", "0.05", "--measurement-time", "0.1", "--sample-size", "10"]


def die(msg: str) -> None:
    print(f"bench.py: {msg}", file=sys.stderr)
    sys.exit(2)


def cargo_metadata() -> dict:
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def bench_targets(meta: dict, package: str | None) -> list[tuple[str, str]]:
    """(package, bench target) for every criterion bench, optionally in one package."""
    found = []
    names = {p["name"] for p in meta["packages"]}
    if package and package not in names:
        die(f"no package {package!r} in the workspace (have: {', '.join(sorted(names))})")
    for pkg in meta["packages"]:
        if package and pkg["name"] != package:
            continue
        for target in pkg["targets"]:
            if "bench" in target["kind"]:
                found.append((pkg["name"], target["name"]))
    return sorted(found)


def snapshot(criterion_dir: Path) -> dict[Path, int]:
    """Every estimate file criterion has written, with its modification time (ns)."""
    if not criterion_dir.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in criterion_dir.glob("**/new/estimates.json")}


def collect(criterion_dir: Path, before: dict[Path, int], bench: str) -> dict[str, dict]:
    """Every estimate written or rewritten since `before` was taken, keyed by id."""
    found: dict[str, dict] = {}
    for est, mtime in snapshot(criterion_dir).items():
        if before.get(est) == mtime:
            continue
        try:
            info = json.loads((est.parent / "benchmark.json").read_text())
            estimates = json.loads(est.read_text())
        except (OSError, ValueError) as err:
            print(f"bench.py: skipping unreadable {est}: {err}", file=sys.stderr)
            continue
        median = estimates["median"]
        found[f"{bench}::{info['full_id']}"] = {
            "median_ns": median["point_estimate"],
            "ci95_ns": [
                median["confidence_interval"]["lower_bound"],
                median["confidence_interval"]["upper_bound"],
            ],
        }
    return found


def hardware() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "machine": platform.machine(),
    }


def git_commit() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(package: str | None, smoke: bool, extra: list[str]) -> dict[str, float]:
    meta = cargo_metadata()
    criterion_dir = Path(meta["target_directory"]) / "criterion"
    targets = bench_targets(meta, package)
    if not targets:
        die("no bench targets found")
    details: dict[str, dict] = {}
    for i, (pkg, bench) in enumerate(targets, 1):
        print(f"\n[{i}/{len(targets)}] {pkg} :: {bench}", flush=True)
        cmd = ["cargo", "bench", "-p", pkg, "--bench", bench]
        if smoke:
            cmd += ["--profile", "dev"]
        cmd += ["--"] + (SMOKE_ARGS if smoke else []) + extra
        # What criterion writes or rewrites from now on belongs to this target.
        before = snapshot(criterion_dir)
        proc = subprocess.run(cmd, cwd=ROOT)
        if proc.returncode != 0:
            die(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
        got = collect(criterion_dir, before, bench)
        if not got:
            die(f"{bench} ran but wrote no criterion estimates under {criterion_dir}")
        details.update(got)

    latest = {k: round(v["median_ns"], 3) for k, v in sorted(details.items())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    LATEST.write_text(json.dumps(latest, indent=2, sort_keys=True) + "\n")
    LATEST_META.write_text(
        json.dumps(
            {
                "commit": git_commit(),
                "hardware": hardware(),
                "smoke": smoke,
                "package": package,
                "benchmarks": dict(sorted(details.items())),
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"\nwrote {LATEST.relative_to(ROOT)} ({len(latest)} benchmarks)")
    return latest


def load(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        die(f"{path.relative_to(ROOT)} does not exist")
    except ValueError as err:
        die(f"{path.relative_to(ROOT)} is not JSON: {err}")
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        die(f"{path.relative_to(ROOT)} is not a {{name: median_ns}} map")
    return data


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "—"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.1f} ns"


def compare(
    baseline: dict[str, float],
    current: dict[str, float],
    threshold: float,
    scope: set[str] | None,
    smoke: bool,
) -> tuple[str, int]:
    """The markdown table and the number of regressions beyond the threshold."""
    rows = ["| benchmark | baseline | current | Δ | verdict |", "|---|---:|---:|---:|---|"]
    regressions = 0
    names = sorted(set(baseline) | set(current))
    for name in names:
        if scope is not None and name.split("::", 1)[0] not in scope:
            continue
        base, cur = baseline.get(name), current.get(name)
        if base is None:
            delta, verdict = "—", "new"
        elif cur is None:
            delta, verdict = "—", "missing"
        else:
            change = (cur - base) / base * 100.0
            delta = f"{change:+.1f}%"
            if smoke:
                verdict = "smoke (not judged)"
            elif change > threshold:
                verdict = "**regressed**"
                regressions += 1
            elif change < -threshold:
                verdict = "improved"
            else:
                verdict = "ok"
        rows.append(f"| `{name}` | {fmt_ns(base)} | {fmt_ns(cur)} | {delta} | {verdict} |")
    return "\n".join(rows), regressions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="run the criterion benches and write bench/results/latest.json")
    p_run.add_argument("-p", "--package", help="only this crate's benches")
    p_run.add_argument("--smoke", action="store_true", help="dev profile, a fraction of a second each")
    p_run.add_argument("criterion_args", nargs="*", help="passed to criterion after --")

    p_save = sub.add_parser("save", help="promote latest.json to bench/baselines/NAME.json")
    p_save.add_argument("name")

    p_check = sub.add_parser("check", help="run, then diff against a baseline")
    p_check.add_argument("-p", "--package", help="only this crate's benches")
    p_check.add_argument("--smoke", action="store_true", help="as for run; never fails on a timing")
    p_check.add_argument("--soft", action="store_true", help="print the table but exit 0 on regressions")
    p_check.add_argument("--threshold", type=float, default=10.0, help="percent slower that fails (10)")
    p_check.add_argument("--baseline", default="main", help="bench/baselines/NAME.json (main)")
    p_check.add_argument("--no-run", action="store_true", help="compare the existing latest.json")
    p_check.add_argument("criterion_args", nargs="*", help="passed to criterion after --")

    args = parser.parse_args()

    if args.command == "run":
        run(args.package, args.smoke, args.criterion_args)
    elif args.command == "save":
        if not args.name.replace("-", "").replace("_", "").isalnum():
            die("a baseline name is letters, digits, '-' and '_'")
        if not LATEST.exists():
            die("no bench/results/latest.json yet: run `just bench` first")
        current = load(LATEST)
        meta = json.loads(LATEST_META.read_text()) if LATEST_META.exists() else {}
        if meta.get("smoke"):
            die("latest.json comes from a smoke run; its timings are not a baseline")
        if meta.get("package"):
            die(f"latest.json covers only {meta['package']}; run all benches before saving")
        BASELINES.mkdir(parents=True, exist_ok=True)
        dest = BASELINES / f"{args.name}.json"
        shutil.copyfile(LATEST, dest)
        if LATEST_META.exists():
            shutil.copyfile(LATEST_META, BASELINES / f"{args.name}.meta.json")
        print(f"saved {len(current)} benchmarks to {dest.relative_to(ROOT)}")
    else:
        if args.threshold <= 0:
            die("--threshold is a positive percentage")
        baseline_path = BASELINES / f"{args.baseline}.json"
        if args.smoke and not baseline_path.exists():
            baseline = {}  # a smoke run only proves the benches run
        else:
            baseline = load(baseline_path)  # fail before spending minutes on a run
        current = load(LATEST) if args.no_run else run(args.package, args.smoke, args.criterion_args)
        scope = None
        if args.package:
            scope = {bench for _, bench in bench_targets(cargo_metadata(), args.package)}
        table, regressions = compare(baseline, current, args.threshold, scope, args.smoke)
        print(f"\n### bench-check against {baseline_path.relative_to(ROOT)} (threshold ±{args.threshold:g}%)\n")
        print(table)
        if args.smoke:
            print("\nsmoke run: dev profile and tiny samples, so Δ says nothing about speed.")
        elif regressions:
            print(f"\n{regressions} benchmark(s) slower than the baseline by more than {args.threshold:g}%.")
            if not args.soft:
                sys.exit(1)
        else:
            print("\nno regressions beyond the threshold.")


if __name__ == "__main__":
    main()
