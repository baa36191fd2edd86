#!/usr/bin/env python3
"""Where the gateway's cache route spends its CPU: one deployment of the release
binaries (origin stub, coordinator, one worker, a gateway on route `cache`), loaded by
talon-loadgen with ranged GETs of one 64 MiB object through the gateway's S3 front, all
hits after a warm-up pass; while the load runs, each pass measures one thing:

1. **cpu**: user and kernel CPU of the gateway and of the worker (/proc/PID/stat), and
   their context switches (voluntary and not, summed over every thread: each voluntary
   one is a thread going to sleep, so it counts wake-ups), per request;
2. **perf**: `perf record -e cpu-clock -g` of both (this kernel exposes no hardware
   counters), then the top symbols of each process, user and kernel;
3. **syscalls**: `strace -c -f` of each, per request (strace slows the process down,
   which is why it is a pass of its own: counts per request stay valid);
4. **allocations**: a uprobe on glibc's `malloc` (`perf probe`), counted with
   `perf stat`, per request.

    scripts/profile_gateway.py [--range-size 1MiB] [--conns 8] [--seconds 8]
                               [--warmup 2] [--out bench/results/profile]
                               [--bin-dir target/release] [--perf-data FILE]

Per-request figures divide a pass's counts by the requests of that pass's measured window
(loadgen's rps × the window), so they hold at steady state, which a pass of hits is.
Writes `<out>/gateway-<range>x<conns>.md` (tables and the top symbols) and `.json`.
Needs root for perf's uprobe (skipped with a line saying so otherwise). Only the
standard library is used, and scripts/bench_ab.py's deployment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import talon_cluster
from bench_ab import Deployment, loadgen, start_arms

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
MALLOC_EVENT = "probe_libc:malloc"
LIBC_CANDIDATES = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]


def die(msg: str) -> None:
    print(f"profile-gateway: {msg}", file=sys.stderr)
    sys.exit(2)


def size_arg(s: str) -> int:
    m = re.fullmatch(r"(\d+)\s*(B|KiB|MiB|GiB)?", s.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{s!r} is not a size such as 64KiB or 1MiB")
    return int(m.group(1)) << {None: 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.group(2)]


def human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user, kernel) CPU seconds of every thread of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def ctx_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches summed over the threads of `pid`."""
    vol = invol = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # the thread ended between listing and reading
        vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", text, re.M).group(1))
        invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", text, re.M).group(1))
    return vol, invol


class Load:
    """talon-loadgen against the gateway for warmup + seconds, in a thread; `report`
    once joined."""

    def __init__(self, bins: Path, arm: dict, args, secret: str):
        self.report: dict | None = None
        load_args = SimpleNamespace(range_size=args.range_size, conns=args.conns, seconds=args.seconds, depth=1)
        self.thread = threading.Thread(
            target=lambda: setattr(self, "report", loadgen(bins, arm, load_args, "gateway", args.warmup, secret)))

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join()

    def requests(self, seconds: float) -> float:
        """Requests the gateway served in `seconds` of the measured window."""
        assert self.report is not None
        return self.report["rps"] * seconds


def pass_cpu(bins: Path, arm: dict, args, secret: str, pids: dict[str, int]) -> dict:
    with Load(bins, arm, args, secret) as load:
        time.sleep(args.warmup)  # the measured window starts after loadgen's warm-up
        before = {n: (proc_cpu(p), ctx_switches(p)) for n, p in pids.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds * 0.9)  # stay inside loadgen's window
        after = {n: (proc_cpu(p), ctx_switches(p)) for n, p in pids.items()}
        elapsed = time.monotonic() - t0
    reqs = load.requests(elapsed)
    out = {"loadgen": load.report, "requests": reqs, "window_s": elapsed, "processes": {}}
    for name in pids:
        (u0, k0), (v0, i0) = before[name]
        (u1, k1), (v1, i1) = after[name]
        out["processes"][name] = {
            "user_us_per_request": (u1 - u0) * 1e6 / reqs,
            "kernel_us_per_request": (k1 - k0) * 1e6 / reqs,
            "cores": (u1 - u0 + k1 - k0) / elapsed,
            "voluntary_switches_per_request": (v1 - v0) / reqs,
            "involuntary_switches_per_request": (i1 - i0) / reqs,
        }
    return out


def perf_report(data: Path, pid: int, sort: str, limit: float) -> str:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--pid", str(pid), "--no-children", "--sort", sort,
         "--stdio", "--percentage", "relative", "--percent-limit", str(limit), "-g", "none"],
        capture_output=True, text=True)
    return "\n".join(line for line in out.stdout.splitlines() if line.strip() and not line.startswith("#"))


def pass_perf(bins: Path, arm: dict, args, secret: str, pids: dict[str, int], tmp: Path) -> dict:
    data = tmp / "perf.data"
    with Load(bins, arm, args, secret):
        time.sleep(args.warmup)
        subprocess.run(
            ["perf", "record", "-e", "cpu-clock", "-F", "1999", "-g", "-o", str(data),
             "-p", ",".join(str(p) for p in pids.values()), "--", "sleep", f"{args.seconds * 0.9:.1f}"],
            capture_output=True, text=True, check=True)
    if args.perf_data:
        shutil.copy(data, args.perf_data)
    result = {}
    for name, pid in pids.items():
        every = perf_report(data, pid, "sym", 0.0)
        kernel = sum(float(m.group(1)) for m in re.finditer(r"^\s*([\d.]+)%\s+\[k\]", every, re.M))
        result[name] = {
            "kernel_share_pct": kernel,
            "by_dso": perf_report(data, pid, "dso", 0.5),
            "top_symbols": perf_report(data, pid, "sym", 1.0),
            "by_thread": perf_report(data, pid, "comm", 1.0),
        }
    return result


STRACE_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$")


def pass_syscalls(bins: Path, arm: dict, args, secret: str, pids: dict[str, int], tmp: Path) -> dict:
    if not shutil.which("strace"):
        return {"skipped": "strace is not installed (apt-get install strace)"}
    outs = {name: tmp / f"strace-{name}.txt" for name in pids}
    with Load(bins, arm, args, secret) as load:
        time.sleep(args.warmup)
        tracers = [
            subprocess.Popen(["strace", "-c", "-f", "-q", "-o", str(outs[name]), "-p", str(pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in pids.items()
        ]
        t0 = time.monotonic()
        time.sleep(args.seconds * 0.9)
        for t in tracers:
            t.send_signal(2)  # SIGINT: strace detaches and writes its summary
        for t in tracers:
            t.wait(timeout=30)
        elapsed = time.monotonic() - t0
    reqs = load.requests(elapsed)
    result = {"requests": reqs, "note": "under strace, so fewer requests per second than the cpu pass"}
    for name in pids:
        calls = {}
        for line in outs[name].read_text().splitlines():
            if (m := STRACE_LINE.match(line)) and m.group(3) != "total":
                calls[m.group(3)] = int(m.group(1))
        result[name] = {
            "per_request": {k: v / reqs for k, v in sorted(calls.items(), key=lambda kv: -kv[1])},
            "total_per_request": sum(calls.values()) / reqs,
        }
    return result


def malloc_probe() -> str | None:
    """Why the malloc uprobe cannot be used, or None when it is ready."""
    if os.geteuid() != 0:
        return "needs root (perf probe)"
    if not Path("/sys/kernel/tracing/uprobe_events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], capture_output=True)
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    if MALLOC_EVENT in listed:
        return None
    libc = next((p for p in LIBC_CANDIDATES if Path(p).exists()), None)
    if libc is None:
        return "glibc not found"
    added = subprocess.run(["perf", "probe", "-x", libc, "--add", "malloc"], capture_output=True, text=True)
    return None if added.returncode == 0 else f"perf probe failed: {added.stderr.strip()[-300:]}"


def pass_allocations(bins: Path, arm: dict, args, secret: str, pids: dict[str, int], tmp: Path) -> dict:
    why = malloc_probe()
    if why:
        return {"skipped": why}
    result: dict = {}
    outs = {name: tmp / f"mallocs-{name}.txt" for name in pids}
    with Load(bins, arm, args, secret) as load:
        time.sleep(args.warmup)
        counters = [
            subprocess.Popen(["perf", "stat", "-x", ",", "-e", MALLOC_EVENT, "-o", str(outs[name]), "-p", str(pid),
                              "--", "sleep", f"{args.seconds * 0.9:.1f}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in pids.items()
        ]
        t0 = time.monotonic()
        for c in counters:
            c.wait(timeout=args.seconds * 2 + 30)
        elapsed = time.monotonic() - t0
    reqs = load.requests(elapsed)
    result["requests"] = reqs
    for name in pids:
        line = next((l for l in outs[name].read_text().splitlines() if MALLOC_EVENT in l), "")
        count = line.split(",")[0]
        result[name] = {"mallocs_per_request": int(count) / reqs if count.isdigit() else None}
    return result


def render(args, host: str, cpu: dict, perf: dict, calls: dict, allocs: dict) -> str:
    lg = cpu["loadgen"]
    lines = [
        f"# Gateway cache route, {human(args.range_size)} ranges × {args.conns} connections (all hits)",
        "",
        f"{host}; {lg['rps']:,.0f} requests/s, {lg['mib_per_s']:,.0f} MiB/s, "
        f"p50 {lg['latency_us']['p50_us']:,.0f} µs, p99 {lg['latency_us']['p99_us']:,.0f} µs in the cpu pass.",
        "",
        "| process | user µs/req | kernel µs/req | cores | CPU-s per GiB | voluntary switches/req | involuntary/req "
        "| syscalls/req | mallocs/req | kernel share (perf) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    gib_per_req = args.range_size / (1 << 30)
    for name, p in cpu["processes"].items():
        total = p["user_us_per_request"] + p["kernel_us_per_request"]
        sc = calls.get(name, {}).get("total_per_request")
        ma = allocs.get(name, {}).get("mallocs_per_request")
        lines.append(
            f"| {name} | {p['user_us_per_request']:.1f} | {p['kernel_us_per_request']:.1f} | {p['cores']:.2f} "
            f"| {total / 1e6 / gib_per_req:.2f} | {p['voluntary_switches_per_request']:.1f} "
            f"| {p['involuntary_switches_per_request']:.2f} | {'-' if sc is None else f'{sc:.1f}'} "
            f"| {'-' if ma is None else f'{ma:.1f}'} | {perf[name]['kernel_share_pct']:.0f}% |")
    for name in cpu["processes"]:
        lines += ["", f"## {name}", "", "System calls per request:", ""]
        per = calls.get(name, {}).get("per_request", {})
        lines.append(", ".join(f"`{k}` {v:.2f}" for k, v in list(per.items())[:12]) or "(not measured)")
        lines += ["", "Top symbols (share of this process's samples, ≥ 1%):", "", "```",
                  perf[name]["top_symbols"], "```", "", "By thread:", "", "```", perf[name]["by_thread"], "```"]
    for key, part in (("syscalls", calls), ("allocations", allocs)):
        if "skipped" in part:
            lines += ["", f"The {key} pass was skipped: {part['skipped']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--range-size", type=size_arg, default=1 << 20)
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "profile")
    p.add_argument("--bin-dir", type=Path, default=ROOT / "target" / "release")
    p.add_argument("--perf-data", type=Path, help="also keep perf.data here (for perf report -g)")
    args = p.parse_args()
    bins = args.bin_dir.resolve()
    for name in ("talon-worker", "talon-gateway", "talon-origin-stub", "talon-coordinator", "talon-loadgen"):
        if not (bins / name).exists():
            die(f"{bins / name} is missing: cargo build --release --workspace --bins")
    if not shutil.which("perf"):
        die("perf is not installed (apt-get install linux-perf)")
    host = f"{os.cpu_count()} CPUs, kernel {os.uname().release}"
    with tempfile.TemporaryDirectory(prefix="talon-profile-") as tmp_name:
        tmp = Path(tmp_name)
        dep = Deployment(tmp, talon_cluster.new_secret())
        try:
            arm = start_arms(dep, {"P": bins}, bins, "gateway")["P"]
            pids = {"gateway": arm["gateway_pid"], "worker": arm["worker_pid"]}
            print("warming the cache (every range read once)", file=sys.stderr)
            warm = SimpleNamespace(range_size=args.range_size, conns=args.conns, seconds=2.0, depth=1)
            loadgen(bins, arm, warm, "gateway", 1.0, dep.secret)
            print("pass 1/4: CPU and context switches", file=sys.stderr)
            cpu = pass_cpu(bins, arm, args, dep.secret, pids)
            print("pass 2/4: perf record", file=sys.stderr)
            perf = pass_perf(bins, arm, args, dep.secret, pids, tmp)
            print("pass 3/4: strace -c", file=sys.stderr)
            calls = pass_syscalls(bins, arm, args, dep.secret, pids, tmp)
            print("pass 4/4: malloc uprobe", file=sys.stderr)
            allocs = pass_allocations(bins, arm, args, dep.secret, pids, tmp)
        finally:
            dep.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"gateway-{human(args.range_size)}x{args.conns}"
    text = render(args, host, cpu, perf, calls, allocs)
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(
        {"range_size": args.range_size, "conns": args.conns, "host": host, "cpu": cpu, "perf": perf,
         "syscalls": calls, "allocations": allocs}, indent=2, default=str) + "\n")
    print(text)
    print(f"wrote {stem}.md and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
