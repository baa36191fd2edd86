#!/usr/bin/env python3
"""A/B a change under load: the worker and gateway built at REV (A) against the working
tree (B), measured alternately with the order flipped every round.

    scripts/bench_ab.py REV [--load worker|gateway] [--rounds 6] [--seconds 5]
                            [--warmup 2] [--conns 16] [--depth 4] [--range-size 65536]
                            [--route cache|origin]

A is built from REV in a git worktree under target/bench-ab/ (with its own target
folder, so the tree's target/release keeps HEAD's binaries); B is the working tree,
uncommitted changes included. Only the worker and the gateway come from each side: the
origin stub, the coordinator and the load generator (talon-loadgen) are B's, so the
measuring instruments are the same for both arms. Both deployments run at once against
one origin stub; each round runs A then B or B then A, alternating, so drift on this
shared machine lands on both arms. Every process of the run shares one cluster secret,
fresh per run (TALON_CLUSTER_SECRET; scripts/talon_cluster.py signs the script's own
coordinator requests), so REV must be a commit whose worker and gateway take it.

--load worker drives each worker's data plane with talon-loadgen over the wire protocol
(--conns connections, --depth pipelined requests each); --load gateway drives each
gateway's S3 front over HTTP/1.1 (anonymous; --route cache or origin; --conns
connections, one request in flight each).

The report gives each figure for A and B as median [min–max] over the rounds, the change
of the medians, and a verdict: "outside the noise" only when the two arms' ranges do not
overlap at all; anything else is "within the noise". JSON goes to
bench/results/bench-ab.json. To claim a change made things faster, compare against the
exact parent commit (REV = HEAD when the change is uncommitted, HEAD~1 when it is the
last commit) — never a nearby branch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import talon_cluster

ROOT = Path(__file__).resolve().parent.parent
AB_DIR = ROOT / "target" / "bench-ab"
RESULTS = ROOT / "bench" / "results"
OBJECT = ("bench", "ab.bin")
OBJECT_SIZE = 64 << 20
BLOCK_SIZE = 64 << 20
PAGE_SIZE = 1 << 20

FIGURES = [
    # (name, getter, higher is better)
    ("rps", lambda r: r["rps"], True),
    ("MiB/s", lambda r: r["mib_per_s"], True),
    ("p50 µs", lambda r: r["latency_us"]["p50_us"], False),
    ("p99 µs", lambda r: r["latency_us"]["p99_us"], False),
    ("server CPU µs/req", lambda r: (r.get("server") or {}).get("cpu_per_request_us"), False),
]


def die(msg: str) -> None:
    print(f"bench-ab: {msg}", file=sys.stderr)
    sys.exit(2)


def sh(cmd: list[str], cwd: Path = ROOT, env: dict | None = None, capture: bool = False) -> str:
    print(f"+ {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=capture)
    if proc.returncode != 0:
        if capture:
            sys.stderr.write(proc.stdout + proc.stderr)
        die(f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''} failed with exit code {proc.returncode}")
    return proc.stdout if capture else ""


def git(*args: str) -> str:
    return sh(["git", *args], capture=True).strip()


BINS_B = ["talon-worker", "talon-gateway", "talon-origin-stub", "talon-coordinator", "talon-loadgen"]


def build(rev_sha: str) -> tuple[Path, Path]:
    """Binaries for A (REV) and B (the working tree): two folders."""
    a_src = AB_DIR / f"src-{rev_sha[:12]}"
    if not a_src.exists():
        AB_DIR.mkdir(parents=True, exist_ok=True)
        sh(["git", "worktree", "add", "--detach", str(a_src), rev_sha])
    env = dict(os.environ, CARGO_TARGET_DIR=str(AB_DIR / "target"))
    sh(["cargo", "build", "--release", "-p", "talon-worker", "-p", "talon-gateway", "--bins"], cwd=a_src, env=env)
    a_bin = AB_DIR / "A"
    a_bin.mkdir(parents=True, exist_ok=True)
    for name in ("talon-worker", "talon-gateway"):
        shutil.copy2(AB_DIR / "target" / "release" / name, a_bin / name)

    # B's worker and gateway are built exactly as A's are (the same packages in one
    # cargo invocation, so the same features of every shared dependency); the binaries
    # both arms share (stub, coordinator, load generator) in a second one. Built
    # together with those, the worker and gateway were compiled against another
    # feature set than A's (an A/A run, HEAD against itself, had B 5.8% faster).
    sh(["cargo", "build", "--release", "-p", "talon-worker", "-p", "talon-gateway", "--bins"])
    b_bin = AB_DIR / "B"
    b_bin.mkdir(parents=True, exist_ok=True)
    for name in ("talon-worker", "talon-gateway"):
        shutil.copy2(ROOT / "target" / "release" / name, b_bin / name)
    shared = [arg for p in ("talon-origin-stub", "talon-coordinator", "talon-loadgen") for arg in ("-p", p)]
    sh(["cargo", "build", "--release", "--bins", *shared])
    for name in BINS_B:
        if name not in ("talon-worker", "talon-gateway"):
            shutil.copy2(ROOT / "target" / "release" / name, b_bin / name)
    return a_bin, b_bin


def takes_cluster_secret(binary: Path) -> bool:
    """Whether a worker or gateway binary has the cluster secret (--cluster-secret-file):
    one from before it neither signs its coordinator calls nor speaks the Hello exchange,
    so B's coordinator and load generator would refuse it."""
    out = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    return "--cluster-secret-file" in out.stdout + out.stderr


class Deployment:
    """Processes started for the run; all killed on exit."""

    def __init__(self, tmp: Path, secret: str):
        self.tmp = tmp
        self.secret = secret  # the cluster secret every process of the run shares
        self.children: list[subprocess.Popen] = []

    def spawn(self, name: str, cmd: list[str], ready: Path, timeout: float = 60.0) -> dict:
        log = open(self.tmp / f"{name}.log", "w")
        # The per-prefix origin request limit (2026-12-04) on, but far above any rate
        # here, as in the Rust benches (bench/src/deployment.rs UNTHROTTLED); older
        # binaries ignore the variables.
        env = talon_cluster.child_env(
            self.secret,
            TALON_LOG=os.environ.get("TALON_LOG", "warn"),
            TALON_GATEWAY_ORIGIN_REQUESTS_PER_PREFIX="1000000",
            TALON_WORKER_ORIGIN_REQUESTS_PER_PREFIX="1000000",
        )
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.children.append(child)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.poll() is not None:
                die(f"{name} exited with {child.returncode}; its log:\n{(self.tmp / f'{name}.log').read_text()[-3000:]}")
            try:
                return json.loads(ready.read_text())
            except (OSError, ValueError):
                time.sleep(0.05)  # polling a file for a condition, not synchronising on time
        die(f"{name} wrote no ready file within {timeout:.0f} s")
        return {}

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def wait_members(coordinator: str, n: int, secret: str, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(f"{coordinator}/v1/members",
                                         headers=talon_cluster.auth_headers(secret, "GET", "/v1/members"))
            with urllib.request.urlopen(req, timeout=2) as reply:
                members = json.loads(reply.read())["members"]
            if len(members) >= n:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    die(f"{coordinator} never listed {n} live worker(s)")


def start(dep: Deployment, a_bin: Path, b_bin: Path, load: str, route: str = "cache") -> dict[str, dict]:
    """Arm A's worker and gateway from a_bin, arm B's from b_bin, over one origin stub."""
    return start_arms(dep, {"A": a_bin, "B": b_bin}, b_bin, load, route)


def start_arms(dep: Deployment, arm_bins: dict[str, Path], tools: Path, load: str,
               route: str = "cache") -> dict[str, dict]:
    """One origin stub (from `tools`), then for each arm its own coordinator (from
    `tools`), worker and (with load "gateway") gateway (from the arm's folder); returns
    each arm's addresses and process ids."""
    tmp = dep.tmp
    (tmp / "origin").mkdir(exist_ok=True)
    stub = dep.spawn(
        "origin-stub",
        [
            str(tools / "talon-origin-stub"),
            "--data-dir", str(tmp / "origin"),
            "--s3-listen", "127.0.0.1:0", "--azure-listen", "off", "--admin-listen", "off",
            "--generate", f"{OBJECT[0]}/{OBJECT[1]}={OBJECT_SIZE},7",
            "--ready-file", str(tmp / "stub.json"),
        ],
        tmp / "stub.json",
    )
    arms = {}
    for arm, bins in arm_bins.items():
        coord = dep.spawn(
            f"coordinator-{arm}",
            [str(tools / "talon-coordinator"), "--listen", "127.0.0.1:0", "--ready-file", str(tmp / f"coord-{arm}.json"),
             "--block-size", str(BLOCK_SIZE), "--page-size", str(PAGE_SIZE)],
            tmp / f"coord-{arm}.json",
        )["url"]
        worker_ready = tmp / f"worker-{arm}.json"
        worker_cmd = [
            str(bins / "talon-worker"),
            "--listen", "127.0.0.1:0", "--admin-listen", "off",
            "--cache-dir", str(tmp / f"cache-{arm}"),
            "--capacity", str(4 * OBJECT_SIZE), "--page-size", str(PAGE_SIZE),
            "--coordinator", coord, "--id", f"ab-{arm}",
            "--s3-endpoint", stub["s3"],
            "--ready-file", str(worker_ready),
        ]
        worker = dep.spawn(f"worker-{arm}", worker_cmd, worker_ready)
        wait_members(coord, 1, dep.secret)
        pids = {c.args[0]: c.pid for c in dep.children}
        info = {"label": arm, "worker": worker["addr"], "worker_pid": pids[str(bins / "talon-worker")]}
        if load == "gateway":
            gw_ready = tmp / f"gateway-{arm}.json"
            gw = dep.spawn(
                f"gateway-{arm}",
                [
                    str(bins / "talon-gateway"),
                    "--s3-listen", "127.0.0.1:0", "--azure-listen", "off", "--admin-listen", "off",
                    "--origin-s3-endpoint", stub["s3"], "--coordinator", coord,
                    "--block-size", str(BLOCK_SIZE), "--anonymous", "--ready-file", str(gw_ready),
                    "--s3-route", route,
                ],
                gw_ready,
            )
            info["gateway"] = gw["s3"]
            info["gateway_pid"] = dep.children[-1].pid
        arms[arm] = info
    return arms


def loadgen(b_bin: Path, arm: dict, args, load: str, warmup: float, secret: str, prefetch: bool = False) -> dict:
    cmd = [str(b_bin / "talon-loadgen")]
    if load == "worker":
        cmd += ["--addr", arm["worker"], "--object", f"s3/{OBJECT[0]}/{OBJECT[1]}", "--depth", str(args.depth)]
        cmd += ["--server-pid", str(arm["worker_pid"])]
    else:
        cmd += ["--http", f"{arm['gateway']}/{OBJECT[0]}/{OBJECT[1]}", "--server-pid", str(arm["gateway_pid"])]
    cmd += [
        "--block-size", str(BLOCK_SIZE), "--range-size", str(args.range_size),
        "--conns", str(args.conns), "--duration", f"{args.seconds:g}", "--warmup", f"{warmup:g}",
        "--json", "--quiet", "--label", arm["label"],
    ]
    if prefetch:
        cmd.append("--prefetch")
    # The cluster secret: --addr authenticates each connection with it (Hello).
    out = subprocess.run(cmd, capture_output=True, text=True, env=talon_cluster.child_env(secret))
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.stderr.write(out.stderr[-3000:])
        die(f"talon-loadgen failed (exit {out.returncode})")
    report = json.loads(lines[-1])
    if not report.get("ok"):
        die(f"talon-loadgen reported errors: {report.get('first_error')}")
    return report


def summarise(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def verdict(a: dict, b: dict, higher_better: bool) -> str:
    if a["max"] < b["min"]:
        return "outside the noise: B " + ("better" if higher_better else "worse")
    if b["max"] < a["min"]:
        return "outside the noise: B " + ("worse" if higher_better else "better")
    return "within the noise"


def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("rev", help="the A side: a commit, tag or branch (B is the working tree)")
    p.add_argument("--load", choices=["worker", "gateway"], default="worker")
    p.add_argument("--route", choices=["cache", "origin"], default="cache",
                   help="the gateway's S3 route (gateway load)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=5.0, help="measured window per arm per round")
    p.add_argument("--warmup", type=float, default=2.0, help="warmup per arm per round (not sampled)")
    p.add_argument("--conns", type=int, default=16)
    p.add_argument("--depth", type=int, default=4, help="pipelined requests per connection (worker load)")
    p.add_argument("--range-size", type=int, default=65536)
    args = p.parse_args()
    if args.rounds < 2:
        die("--rounds must be at least 2 (the order flips every round)")

    rev_sha = git("rev-parse", "--verify", f"{args.rev}^{{commit}}")
    head = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    a_label = f"A = {args.rev} ({rev_sha[:12]})"
    b_label = f"B = working tree ({head[:12]}{', with uncommitted changes' if dirty else ''})"
    print(f"bench-ab: {a_label}; {b_label}; load {args.load}, route {args.route}", flush=True)

    a_bin, b_bin = build(rev_sha)
    for name in ("talon-worker", "talon-gateway"):
        if not takes_cluster_secret(a_bin / name):
            die(f"{name} at {args.rev} predates the cluster secret, so it cannot join B's authenticated "
                "coordinator or answer B's load generator; compare against a commit that has it")
    tmp = Path(tempfile.mkdtemp(prefix="talon-bench-ab-"))
    dep = Deployment(tmp, talon_cluster.new_secret())
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    try:
        arms = start(dep, a_bin, b_bin, args.load, args.route)
        # Warm each cache once (a long warmup the first time fills the block).
        for arm in ("A", "B"):
            print(f"warming {arm}", flush=True)
            loadgen(b_bin, arms[arm], argparse.Namespace(**{**vars(args), "seconds": 1.0}), args.load, 1.0, dep.secret, prefetch=True)
        for r in range(args.rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for arm in order:
                report = loadgen(b_bin, arms[arm], args, args.load, args.warmup, dep.secret)
                runs[arm].append(report)
                print(
                    f"round {r + 1}/{args.rounds} {arm}: {report['rps']:,.0f} rps, "
                    f"p50 {report['latency_us']['p50_us']:,.0f} µs, p99 {report['latency_us']['p99_us']:,.0f} µs",
                    flush=True,
                )
    finally:
        dep.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    rows, summary = [], {}
    for name, get, higher in FIGURES:
        a_vals = [v for v in (get(x) for x in runs["A"]) if v is not None]
        b_vals = [v for v in (get(x) for x in runs["B"]) if v is not None]
        if not a_vals or not b_vals:
            continue
        a, b = summarise(a_vals), summarise(b_vals)
        change = (b["median"] - a["median"]) / a["median"] * 100 if a["median"] else 0.0
        v = verdict(a, b, higher)
        summary[name] = {"A": a, "B": b, "change_pct": change, "verdict": v}
        rows.append(
            f"| {name} | {fmt(a['median'])} [{fmt(a['min'])}–{fmt(a['max'])}] "
            f"| {fmt(b['median'])} [{fmt(b['min'])}–{fmt(b['max'])}] | {change:+.1f}% | {v} |"
        )
    print(f"\n### bench-ab: {args.load} load, {args.rounds} rounds, order flipped every round\n")
    print(f"{a_label}  \n{b_label}\n")
    print("| figure | A median [min–max] | B median [min–max] | Δ median | verdict |")
    print("|---|---:|---:|---:|---|")
    print("\n".join(rows))
    if args.load == "worker":
        shape = f"{args.conns} connections × depth {args.depth}"
    else:
        shape = f"{args.conns} connections, HTTP/1.1"
    print(f"\n{args.range_size} B ranges, {shape}, {args.seconds:g} s measured after {args.warmup:g} s warmup per arm per round.")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "a": {"rev": args.rev, "commit": rev_sha},
        "b": {"commit": head, "dirty": dirty},
        "load": args.load,
        "route": args.route,
        "settings": {k: v for k, v in vars(args).items() if k != "rev"},
        "hardware": {"cores": os.cpu_count(), "kernel": platform.release()},
        "figures": summary,
        "runs": runs,
    }
    (RESULTS / "bench-ab.json").write_text(json.dumps(out, indent=2) + "\n")
    print("\nwrote bench/results/bench-ab.json")


if __name__ == "__main__":
    main()
