#!/usr/bin/env python3
"""Resource-exhaustion run against a whole `talon up` (docs/security.md, issue 8).

Starts `talon up` on free ports, measures a normal client (one keep-alive connection
from 127.0.0.1, GETs of a small object and of a 1 MiB range) idle, then under each
attack in turn, from other loopback addresses:

  idle-10k        10,000 connections that send nothing (4 attacker addresses)
  slow-headers    2,000 connections that send one header byte a second
  slow-bodies     500 PUTs that announce 1 MiB and send one byte a second
  never-read-1    one GET of the 64 MiB sample that never reads (receive buffer 4 KiB)
  never-read-200  200 of them at once: more than the gateway's buffer budget holds
  dribble-worker  500 connections to a worker's data plane that send one byte a second
                  and never authenticate

For each phase it records the process's resident memory (VmRSS of `talon up`, every
part of the deployment is in that one process) at its peak, its CPU use, how many
attack connections the gateway still held at the end, and the normal client's p50/p99.
Each attack phase is paired with an idle phase beside it, the pair's order swapped
every round; the figure is the median over rounds of the pair's p99 ratio. Ends with a
table and one JSON line.

  python3 scripts/exhaustion.py [--binary target/release/talon] [--phase-seconds 20]
                                [--rounds 3] [--only slow-bodies,never-read-200]

Needs `ulimit -n` above 20,000 (the script raises its own soft limit to the hard one).
Traffic goes to loopback only and every phase ends by itself.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Normal:
    """One keep-alive client doing alternating small and 1 MiB GETs."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.conn = None

    def _conn(self):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30,
                                                   source_address=("127.0.0.1", 0))
        return self.conn

    def sample(self, n: int) -> list[float]:
        out = []
        for i in range(n):
            path, headers = (("/demo/hello.txt", {}) if i % 2 == 0 else
                             ("/demo/random-64MiB.bin", {"Range": f"bytes={(i % 60) << 20}-{((i % 60) << 20) + (1 << 20) - 1}"}))
            t = time.perf_counter()
            ok = False
            # Like an SDK: a kept-alive connection the server closed while idle is
            # replaced once; any other failure counts.
            for attempt in range(2):
                reused = self.conn is not None
                try:
                    c = self._conn()
                    c.request("GET", path, headers=headers)
                    r = c.getresponse()
                    r.read()
                    ok = r.status in (200, 206)
                    break
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    self.conn = None
                    if not reused or attempt == 1:
                        break
                except OSError:
                    self.conn = None
                    break
            dt = time.perf_counter() - t
            out.append(dt if ok else float("inf"))
        return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def attackers(n: int, base: int) -> list[str]:
    return [f"127.0.0.{base + i}" for i in range(n)]


def open_socket(src: str, port: int, rcvbuf: int | None = None) -> socket.socket | None:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        s.bind((src, 0))
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        return s
    except OSError:
        s.close()
        return None


def held(socks: list[socket.socket]) -> int:
    """Connections the server has not closed yet (whatever it sent before)."""
    alive = 0
    for s in socks:
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break  # closed by the server
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of the process and its threads."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(name: str, pid: int, normal: Normal, seconds: float, start, tick=None) -> dict:
    socks = start()
    peak = rss_mib(pid)
    cpu0, t0 = cpu_s(pid), time.monotonic()
    samples: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if tick:
            tick(socks)
        samples += normal.sample(10)
        peak = max(peak, rss_mib(pid))
    busy = (cpu_s(pid) - cpu0) / (time.monotonic() - t0)
    result = {
        "phase": name,
        "server_cpu_pct": round(busy * 100, 1),
        "attack_connections": len(socks),
        "still_held": held(socks),
        "peak_rss_mib": round(peak, 1),
        "p50_ms": round(pct(samples, 0.5) * 1000, 2),
        "p99_ms": round(pct(samples, 0.99) * 1000, 2),
        "failed": sum(1 for s in samples if s == float("inf")),
    }
    for s in socks:
        s.close()
    time.sleep(1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(ROOT / "target/release/talon")
                    if (ROOT / "target/release/talon").exists() else str(ROOT / "target/debug/talon"))
    ap.add_argument("--phase-seconds", type=float, default=20)
    ap.add_argument("--only", default="", help="comma-separated attack phases to run (default: all)")
    ap.add_argument("--rounds", type=int, default=1, help="pairs (idle, attack) per phase, order swapped each round")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = pathlib.Path(tempfile.mkdtemp(prefix="talon-exhaustion-"))
    ready = work / "ready.json"
    log = open(work / "talon.log", "wb")
    proc = subprocess.Popen([args.binary, "up", "--data-dir", str(work / "data"), "--ready-file", str(ready),
                             "--s3-port", "0", "--azure-port", "0", "--admin-port", "0", "--coordinator-port", "0", "--status-port", "0",
                             "--anonymous", "read-write", "--workers", "2"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TALON_LOG": "warn"})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                print((work / "talon.log").read_text(), file=sys.stderr)
                return 1
            time.sleep(0.1)
        info = json.loads(ready.read_text())
        port = int(info["s3"].rsplit(":", 1)[1])
        normal = Normal("127.0.0.1", port)
        # Warm the cache: every range the client asks for (60 distinct 1 MiB ranges,
        # odd samples only), so no phase, the idle one included, measures fills.
        normal.sample(240)
        t0 = time.monotonic()
        secs = args.phase_seconds
        plan = []  # (phase, start, tick)

        def idle_10k():
            out = []
            for i in range(10_000):
                s = open_socket(attackers(4, 10)[i % 4], port)
                if s:
                    out.append(s)
            return out

        plan.append(("idle-10k", idle_10k, None))

        def slow_start():
            out = []
            for i in range(2000):
                s = open_socket(attackers(4, 20)[i % 4], port)
                if s:
                    try:
                        s.send(b"GET /demo/hello.txt HTTP/1.1\r\n")
                    except OSError:
                        pass
                    out.append(s)
            return out

        drip = {"at": time.monotonic(), "next": 0, "owed": 0.0}

        def dribble(socks):
            # One byte per connection per second, the connections taking turns through
            # the second (slow clients, not one synchronised burst a second).
            if not socks:
                return
            now = time.monotonic()
            if drip.get("socks") is not socks:  # a new phase
                drip.update(socks=socks, at=now, owed=0.0)
            drip["owed"] += (now - drip["at"]) * len(socks)
            drip["at"] = now
            while drip["owed"] >= 1:
                s = socks[drip["next"] % len(socks)]
                drip["next"] += 1
                drip["owed"] -= 1
                try:
                    s.send(b"X")
                except OSError:
                    pass

        plan.append(("slow-headers", slow_start, dribble))

        def slow_bodies():
            out = []
            for i in range(500):
                s = open_socket(attackers(4, 30)[i % 4], port)
                if s:
                    try:
                        s.send(f"PUT /demo/slow-{i} HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n".encode())
                    except OSError:
                        pass
                    out.append(s)
            return out

        plan.append(("slow-bodies", slow_bodies, dribble))

        def never_read_one():
            s = open_socket("127.0.0.40", port, rcvbuf=4096)
            if not s:
                return []
            try:
                s.send(b"GET /demo/random-64MiB.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            except OSError:
                pass
            return [s]

        plan.append(("never-read-1", never_read_one, None))

        def never_read():
            out = []
            for i in range(200):
                s = open_socket(attackers(4, 40)[i % 4], port, rcvbuf=4096)
                if s:
                    try:
                        s.send(b"GET /demo/random-64MiB.bin HTTP/1.1\r\nHost: x\r\n\r\n")
                    except OSError:
                        pass
                    out.append(s)
            return out

        plan.append(("never-read-200", never_read, None))

        members = None
        try:
            # The worker addresses are not published without the cluster secret; find
            # the data-plane ports from the process's listening sockets instead.
            out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
            ports = sorted({int(l.split()[3].rsplit(":", 1)[1]) for l in out.splitlines()
                            if f"pid={proc.pid}," in l})
            members = [p for p in ports if p not in (port, int(info["azure"].split(":")[2].split("/")[0]),
                                                     int(info["admin"].rsplit(":", 1)[1]))]
        except (OSError, ValueError, IndexError):
            members = []

        def worker_dribble():
            out = []
            for i in range(500):
                if not members:
                    break
                s = open_socket(attackers(4, 50)[i % 4], members[i % len(members)])
                if s:
                    out.append(s)
            return out

        plan.append(("dribble-worker", worker_dribble, dribble))
        plan = [p for p in plan if not only or p[0] in only]
        # Each attack phase is paired with an idle phase next to it, the order swapped
        # every other round, and the ratio of the pair's p99s is the figure: the host's
        # drift between phases (it is shared) then cancels instead of landing in a ratio.
        rounds: dict[str, list[tuple[dict, dict]]] = {name: [] for name, _, _ in plan}
        for rnd in range(args.rounds):
            for name, start, tick in plan:
                pair = [("idle", lambda: [], None), (name, start, tick)]
                if rnd % 2:
                    pair.reverse()
                got = {n: phase(n, proc.pid, normal, secs, st, tk) for n, st, tk in pair}
                rounds[name].append((got[name], got["idle"]))
                print(f"round {rnd + 1}/{args.rounds} {name}: p99 {got[name]['p99_ms']} ms, "
                      f"idle beside it {got['idle']['p99_ms']} ms", file=sys.stderr, flush=True)
        results = []
        for name, pairs in rounds.items():
            ratios = [a["p99_ms"] / i["p99_ms"] if i["p99_ms"] else float("inf") for a, i in pairs]
            results.append({
                "phase": name,
                "rounds": len(pairs),
                "attack_connections": max(a["attack_connections"] for a, _ in pairs),
                "still_held": min(a["still_held"] for a, _ in pairs),
                "peak_rss_mib": max(a["peak_rss_mib"] for a, _ in pairs),
                "server_cpu_pct": statistics.median(a["server_cpu_pct"] for a, _ in pairs),
                "idle_server_cpu_pct": statistics.median(i["server_cpu_pct"] for _, i in pairs),
                "p50_ms": statistics.median(a["p50_ms"] for a, _ in pairs),
                "p99_ms": statistics.median(a["p99_ms"] for a, _ in pairs),
                "idle_p99_ms": statistics.median(i["p99_ms"] for _, i in pairs),
                "p99_ratio": round(statistics.median(ratios), 2),
                "p99_ratios": [round(r, 2) for r in ratios],
                "failed": sum(a["failed"] for a, _ in pairs),
            })
        print("\n| phase | attack conns | still held | peak RSS MiB | server CPU % (idle beside it) "
              "| p50 ms | p99 ms | idle p99 ms | p99 / idle (median of rounds) | failed |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['phase']} | {r['attack_connections']} | {r['still_held']} | {r['peak_rss_mib']} | "
                  f"{r['server_cpu_pct']} ({r['idle_server_cpu_pct']}) | {r['p50_ms']} | {r['p99_ms']} | "
                  f"{r['idle_p99_ms']} | {r['p99_ratio']} {r['p99_ratios']} | {r['failed']} |")
        print(json.dumps({"binary": args.binary, "phase_seconds": secs, "rounds": args.rounds, "cores": os.cpu_count(),
                          "elapsed_s": round(time.monotonic() - t0, 1), "results": results}))
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
