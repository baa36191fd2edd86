#!/usr/bin/env python3
"""Talon's memory footprint: bytes per cached block and page, per open connection, and
each process's idle RSS. Prints a markdown table and writes bench/data/memory.json.

    scripts/memory_footprint.py [--conns 1000] [--blocks 10000] [--rounds 5] [--no-build]
                                [--output bench/data/memory.json]

Three measurements:

1. The worker's in-memory block index, exactly, with a counting global allocator:
   `target/release/examples/index_footprint --json` (worker/examples/index_footprint.rs
   says what it does). Bytes are the bytes asked of the allocator; the "how" column also
   gives them with glibc's per-chunk rounding. The coordinator's member table and the
   placement table every gateway holds are measured the same way, per worker. Its
   scratch files go to /dev/shm when writable (fsyncs there are free), else to /tmp.
2. Bytes per open connection: a real deployment of the release binaries on loopback
   (origin stub, coordinator, one worker, gateway), sharing a cluster secret fresh for
   each deployment (TALON_CLUSTER_SECRET). The worker's data plane gets K connections
   that each authenticate (the Hello exchange, scripts/talon_cluster.py) and complete
   one ReadRange of 4 KiB (spoken here with the wire protocol of core/src/wire/mod.rs)
   and stay open; the gateway gets K HTTP/1.1 keep-alive connections that each
   complete one ranged GET of 4 KiB and stay open.
   Figure: (VmRSS with them - VmRSS before) / K, after a warm-up of 32 connections
   opened and closed (so thread-pool and allocator arenas already exist). The script
   waits on conditions: the worker's `talon_worker_connections` gauge, the count of the
   gateway's open sockets in /proc/PID/fd, and RSS settling (read every 100 ms until
   five reads agree within 8 KiB). RSS counts only the pages touched, and glibc's
   calloc zeroes (touches) a fresh buffer or not depending on where it lands, so the
   figure is the median of --rounds fresh deployments, and one more deployment runs
   with GLIBC_TUNABLES=glibc.malloc.perturb (every allocation written) to give the
   bytes allocated per connection.
3. Idle RSS of each process right after it reports ready (its --ready-file, and for the
   deployment the coordinator listing the worker), and of `talon up` (the all-in-one,
   two workers) on port 0; medians over the rounds.

Only the standard library is used. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import talon_cluster

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release"
OUTPUT = ROOT / "bench" / "data" / "memory.json"

BUCKET, KEY = "bench", "memory/object.bin"
OBJECT_SIZE = 64 << 20
BLOCK_SIZE = 64 << 20
PAGE_SIZE = 1 << 20
READ_LEN = 4096
WARMUP_CONNS = 32

PACKAGES = ["talon", "talon-worker", "talon-gateway", "talon-origin-stub", "talon-coordinator"]


def die(msg: str) -> None:
    print(f"memory_footprint: {msg}", file=sys.stderr)
    sys.exit(2)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sh(cmd: list[str], capture: bool = False) -> str:
    log(f"+ {' '.join(cmd)}")
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=capture)
    if proc.returncode != 0:
        if capture:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        die(f"{' '.join(cmd[:3])} failed with exit code {proc.returncode}")
    return proc.stdout if capture else ""


def build() -> None:
    packages = [arg for p in PACKAGES for arg in ("-p", p)]
    sh(["cargo", "build", "--release", "--bins", *packages])
    sh(["cargo", "build", "--release", "-p", "talon-worker", "--example", "index_footprint"])


def raise_fd_limit(wanted: int) -> int:
    """Raises the soft open-files limit (inherited by the children) toward `wanted`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return wanted if soft == resource.RLIM_INFINITY else soft


# ---- /proc -----------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    die(f"no VmRSS for process {pid}")
    return 0


def settled_rss(pid: int, timeout: float = 15.0) -> int:
    """VmRSS once five reads 100 ms apart agree within 8 KiB (or the last read at timeout)."""
    reads: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        reads.append(rss_bytes(pid))
        last = reads[-5:]
        if len(last) == 5 and max(last) - min(last) <= 8 << 10:
            return last[-1]
        if time.monotonic() > deadline:
            log(f"  (RSS of {pid} still moving after {timeout:.0f} s: {last})")
            return last[-1]
        time.sleep(0.1)  # polling RSS for a condition (it stopped changing)


def open_sockets(pid: int) -> int:
    n = 0
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def wait_for(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # polling a condition, not synchronising on time
    die(f"timed out waiting for {what}")
    return None


# ---- processes -------------------------------------------------------------------------


class Processes:
    """Processes this script started; all stopped on exit."""

    def __init__(self, tmp: Path, secret: str, env: dict[str, str] | None = None):
        self.tmp = tmp
        self.secret = secret  # the cluster secret every process shares
        self.env = env or {}
        self.children: list[subprocess.Popen] = []

    def spawn(self, name: str, cmd: list[str], ready: Path, timeout: float = 60.0) -> tuple[subprocess.Popen, dict]:
        log_file = open(self.tmp / f"{name}.log", "w")
        env = talon_cluster.child_env(self.secret, TALON_LOG=os.environ.get("TALON_LOG", "warn"), **self.env)
        child = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.children.append(child)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.poll() is not None:
                die(f"{name} exited with {child.returncode}; its log:\n{(self.tmp / f'{name}.log').read_text()[-3000:]}")
            try:
                return child, json.loads(ready.read_text())
            except (OSError, ValueError):
                time.sleep(0.05)  # polling a file for a condition, not synchronising on time
        die(f"{name} wrote no ready file within {timeout:.0f} s")
        return child, {}

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children.clear()


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as reply:
        return reply.read()


def live_members(coordinator: str, secret: str) -> int:
    headers = talon_cluster.auth_headers(secret, "GET", "/v1/members")
    try:
        return len(json.loads(http_get(f"{coordinator}/v1/members", headers=headers))["members"])
    except (OSError, ValueError, KeyError):
        return 0


def worker_connections(admin: str) -> int:
    for line in http_get(f"{admin}/metrics").decode().splitlines():
        if line.startswith("talon_worker_connections "):
            return int(float(line.split()[1]))
    die("the worker's /metrics has no talon_worker_connections")
    return 0


def host_port(addr: str) -> tuple[str, int]:
    addr = addr.split("://", 1)[-1].rstrip("/")
    host, port = addr.rsplit(":", 1)
    return host, int(port)


# ---- the worker wire protocol (core/src/wire/mod.rs) -------------------------------------

MAGIC, VERSION = 0x544C, 1
READ_RANGE, READ_RANGE_REPLY, ERROR = 0x03, 0x83, 0xFF


def wire_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def read_range_frame(request_id: int, version: str, offset: int, length: int) -> bytes:
    payload = (
        b"\x01" + wire_str(BUCKET) + wire_str(KEY)  # object id: S3, bucket, path
        + wire_str(version) + struct.pack(">QQ", 0, BLOCK_SIZE)  # version, block offset, size
        + struct.pack(">QQI", OBJECT_SIZE, offset, length)
    )
    return struct.pack(">HBBHHII", MAGIC, VERSION, READ_RANGE, 0, 0, request_id, len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            die("the worker closed a connection mid-reply")
        out += chunk
    return bytes(out)


def worker_read(sock: socket.socket, request_id: int, version: str) -> None:
    sock.sendall(read_range_frame(request_id, version, 0, READ_LEN))
    magic, _, kind, _, _, rid, length = struct.unpack(">HBBHHII", recv_exact(sock, 16))
    payload = recv_exact(sock, length)
    if magic != MAGIC or rid != request_id:
        die("the worker sent a frame that is not the reply")
    if kind == ERROR:
        die(f"the worker answered an error: {payload[4:].decode(errors='replace')}")
    if kind != READ_RANGE_REPLY or length != READ_LEN:
        die(f"unexpected reply type {kind:#x} of {length} bytes")


def worker_conns(addr: str, version: str, k: int, secret: str) -> list[socket.socket]:
    host, port = host_port(addr)
    socks = []
    for i in range(k):
        s = socket.create_connection((host, port), timeout=30)
        try:
            talon_cluster.hello(s, secret)
        except (ConnectionError, OSError) as e:
            die(f"the worker's Hello failed: {e}")
        worker_read(s, i + 1, version)
        socks.append(s)
    return socks


def gateway_conns(url: str, k: int) -> list[http.client.HTTPConnection]:
    host, port = host_port(url)
    conns = []
    for _ in range(k):
        c = http.client.HTTPConnection(host, port, timeout=30)
        c.request("GET", f"/{BUCKET}/{KEY}", headers={"Range": f"bytes=0-{READ_LEN - 1}"})
        r = c.getresponse()
        body = r.read()
        if r.status != 206 or len(body) != READ_LEN:
            die(f"the gateway answered {r.status} with {len(body)} bytes")
        if (r.getheader("Connection") or "").lower() == "close":
            die("the gateway closed a keep-alive connection")
        conns.append(c)
    return conns


def close_all(conns: list) -> None:
    for c in conns:
        c.close()


# ---- measurements ----------------------------------------------------------------------


def index_footprint(blocks: int, tmp: Path) -> dict:
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp
    exe = BIN / "examples" / "index_footprint"
    log(f"+ {exe} --json --blocks {blocks} --dir {base}")
    out = subprocess.run([str(exe), "--json", "--blocks", str(blocks), "--dir", str(base)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        die(f"index_footprint failed with exit code {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_conn(before: int, after: int, k: int) -> float:
    return (after - before) / k


def deployment(procs: Processes, tmp: Path, k: int) -> dict:
    (tmp / "origin").mkdir()
    stub, stub_ready = procs.spawn(
        "origin-stub",
        [
            str(BIN / "talon-origin-stub"), "--data-dir", str(tmp / "origin"),
            "--s3-listen", "127.0.0.1:0", "--azure-listen", "off", "--admin-listen", "off",
            "--generate", f"{BUCKET}/{KEY}={OBJECT_SIZE},7", "--ready-file", str(tmp / "stub.json"),
        ],
        tmp / "stub.json",
    )
    coord, coord_ready = procs.spawn(
        "coordinator",
        [str(BIN / "talon-coordinator"), "--listen", "127.0.0.1:0", "--ready-file", str(tmp / "coord.json"),
         "--block-size", str(BLOCK_SIZE), "--page-size", str(PAGE_SIZE)],
        tmp / "coord.json",
    )
    coordinator = coord_ready["url"]
    worker, worker_ready = procs.spawn(
        "worker",
        [
            str(BIN / "talon-worker"), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
            "--cache-dir", str(tmp / "cache"), "--capacity", "1GiB", "--page-size", str(PAGE_SIZE),
            "--coordinator", coordinator, "--id", "memory-w0", "--s3-endpoint", stub_ready["s3"],
            "--ready-file", str(tmp / "worker.json"),
        ],
        tmp / "worker.json",
    )
    wait_for("the coordinator to list the worker", lambda: live_members(coordinator, procs.secret) >= 1)
    gateway, gateway_ready = procs.spawn(
        "gateway",
        [
            str(BIN / "talon-gateway"), "--s3-listen", "127.0.0.1:0", "--azure-listen", "off",
            "--admin-listen", "off", "--origin-s3-endpoint", stub_ready["s3"],
            "--coordinator", coordinator, "--block-size", str(BLOCK_SIZE), "--anonymous",
            # Every connection comes from 127.0.0.1: lift the per-peer cap (512) above K.
            "--max-connections-per-peer", str(k + 64), "--max-connections", str(max(4096, k + 64)),
            "--ready-file", str(tmp / "gateway.json"),
        ],
        tmp / "gateway.json",
    )
    idle = {name: settled_rss(p.pid) for name, p in
            (("origin-stub", stub), ("coordinator", coord), ("worker", worker), ("gateway", gateway))}
    for name, v in idle.items():
        log(f"  idle RSS {name}: {v / 2**20:.1f} MiB")

    # The version (ETag) a ReadRange names, from the origin.
    req = urllib.request.Request(f"{stub_ready['s3']}/{BUCKET}/{KEY}", method="HEAD")
    with urllib.request.urlopen(req, timeout=10) as reply:
        version = reply.headers["ETag"]

    # Worker data plane.
    addr, admin = worker_ready["addr"], worker_ready["admin"]
    base = worker_connections(admin)
    close_all(worker_conns(addr, version, WARMUP_CONNS, procs.secret))
    wait_for("the warm-up connections to close", lambda: worker_connections(admin) <= base)
    w_before = settled_rss(worker.pid)
    socks = worker_conns(addr, version, k, procs.secret)
    wait_for(f"{k} open worker connections", lambda: worker_connections(admin) >= base + k)
    w_with = settled_rss(worker.pid)
    close_all(socks)
    wait_for("the worker connections to close", lambda: worker_connections(admin) <= base)
    w_after = settled_rss(worker.pid)
    log(f"  worker RSS: {w_before / 2**20:.1f} MiB before, {w_with / 2**20:.1f} MiB with {k} connections, "
        f"{w_after / 2**20:.1f} MiB after they closed")

    # Gateway S3 front.
    url = gateway_ready["s3"]
    pre = open_sockets(gateway.pid)
    close_all(gateway_conns(url, WARMUP_CONNS))
    # What stays open after the warm-up: listeners and the gateway's own pooled
    # connections to the worker, the coordinator and the origin.
    wait_for("the warm-up connections to close", lambda: open_sockets(gateway.pid) <= pre + 8)
    base_socks = open_sockets(gateway.pid)
    g_before = settled_rss(gateway.pid)
    conns = gateway_conns(url, k)
    wait_for(f"{k} open gateway connections", lambda: open_sockets(gateway.pid) >= base_socks + k)
    g_with = settled_rss(gateway.pid)
    close_all(conns)
    wait_for("the gateway connections to close", lambda: open_sockets(gateway.pid) <= base_socks + 4)
    g_after = settled_rss(gateway.pid)
    log(f"  gateway RSS: {g_before / 2**20:.1f} MiB before, {g_with / 2**20:.1f} MiB with {k} connections, "
        f"{g_after / 2**20:.1f} MiB after they closed")
    return {
        "idle": idle,
        "worker_conn": per_conn(w_before, w_with, k),
        "worker_after_close": w_after - w_before,
        "gateway_conn": per_conn(g_before, g_with, k),
        "gateway_after_close": g_after - g_before,
    }


def talon_up(procs: Processes, tmp: Path) -> int:
    up, _ = procs.spawn(
        "talon-up",
        [
            str(BIN / "talon"), "up", "--data-dir", str(tmp / "up-data"), "--ready-file", str(tmp / "up.json"),
            "--s3-port", "0", "--azure-port", "0", "--admin-port", "0", "--coordinator-port", "0", "--status-port", "0",
        ],
        tmp / "up.json",
    )
    rss = settled_rss(up.pid)
    log(f"  idle RSS talon up: {rss / 2**20:.1f} MiB")
    return rss


# glibc fills every allocation with a byte, so RSS counts the bytes allocated rather than
# the pages a calloc'd buffer happened to touch.
TOUCHED = {"GLIBC_TUNABLES": "glibc.malloc.perturb=165"}


def deployment_round(tmp: Path, k: int, env: dict[str, str] | None = None, with_up: bool = True) -> dict:
    tmp.mkdir(parents=True)
    procs = Processes(tmp, talon_cluster.new_secret(), env)
    try:
        dep = deployment(procs, tmp, k)
        procs.stop()
        if with_up:
            dep["idle"]["talon up"] = talon_up(procs, tmp)
    finally:
        procs.stop()
    return dep


def summarise(runs: list[dict], touched: dict) -> dict:
    """Medians over the rounds, with each figure's range and the touched run's value."""

    def spread(values: list[float]) -> dict:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    return {
        "idle": {name: statistics.median(r["idle"][name] for r in runs) for name in runs[0]["idle"]},
        "idle_range": {name: spread([r["idle"][name] for r in runs]) for name in runs[0]["idle"]},
        "worker_conn": spread([r["worker_conn"] for r in runs]),
        "gateway_conn": spread([r["gateway_conn"] for r in runs]),
        "worker_after_close": statistics.median(r["worker_after_close"] for r in runs),
        "gateway_after_close": statistics.median(r["gateway_after_close"] for r in runs),
        "worker_conn_touched": touched["worker_conn"],
        "gateway_conn_touched": touched["gateway_conn"],
        "rounds": len(runs),
    }


# ---- output ----------------------------------------------------------------------------


def f_bytes(v: float) -> str:
    if abs(v) < 0.005:
        return "0 B"
    return f"≈ {v:,.2f} B" if abs(v) < 10 else f"≈ {v:,.0f} B"


def f_range(d: dict) -> str:
    return f"{d['min']:,.0f}–{d['max']:,.0f} B"


def f_mib(v: float) -> str:
    return f"≈ {v / 2**20:,.1f} MiB"


def recorded() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit or "unknown",
        "hardware": {"cpu": cpu, "cores": os.cpu_count() or 0, "kernel": platform.release()},
    }


def rows(ix: dict, dep: dict, k: int) -> list[dict]:
    n, rounds = ix["blocks"], dep["rounds"]
    by = ix["per_block_by_pages"]
    one, big = by["1"], by["1024"]
    per_page = ix["per_page"]
    fixed = {m: one[m] - per_page[m] for m in ("requested", "malloc")}
    ex = "worker/examples/index_footprint.rs"
    alloc = f"counting allocator, {n:,} blocks ({ex})"

    def malloc(d: dict) -> str:
        return f"{d['malloc']:,.0f} B with glibc's chunk rounding"

    out = [
        {
            "item": f"worker index per cached block (key of {ix['key_len']} bytes)",
            "value": f_bytes(fixed["requested"]),
            "how": (
                f"{alloc}: 1-page and 1024-page blocks, the line's intercept; {malloc(fixed)}, "
                f"{one['allocations']:.0f} allocations; bucket of {ix['bucket_len']} B, ETag of "
                f"{ix['version_len']} B, block file paths of {ix['block_path_len']} B; plus one open file descriptor"
            ),
        },
        {
            "item": "worker index per cached page",
            "value": f_bytes(per_page["requested"]),
            "how": (
                f"{alloc}: slope between blocks of 1 and 1024 pages; allocated when the block is created, "
                "whether or not its pages are ever filled"
            ),
        },
        {
            "item": "worker index per cached block of 256 pages (256 MiB blocks, 1 MiB pages)",
            "value": f_bytes(by["256"]["requested"]),
            "how": f"{alloc}, measured directly; {malloc(by['256'])}",
        },
        {
            "item": "worker index per cached block of 1024 pages (1 GiB blocks, 1 MiB pages)",
            "value": f_bytes(big["requested"]),
            "how": f"{alloc}, measured directly; {malloc(big)}",
        },
        {
            "item": "worker index per extra byte of object key",
            "value": f_bytes(ix["per_key_byte"]["requested"]),
            "how": f"{alloc}: keys of 40 and 200 bytes",
        },
        {
            "item": "worker index added by a block's first fill",
            "value": f_bytes(ix["first_fill_per_block"]["requested"]),
            "how": (
                f"counting allocator, {ix['fill_blocks']:,} blocks filled through plan/reserve/commit_fill/"
                "finish_fill; the fill list's buffer, kept after the fill ends"
            ),
        },
        {
            "item": "worker index added per page filled after that",
            "value": f_bytes(ix["later_fill_per_page"]["requested"]),
            "how": f"counting allocator, 7 more pages in each of {ix['fill_blocks']:,} blocks",
        },
        {
            "item": "worker eviction ghost queue per cached block (cache full and evicting)",
            "value": f_bytes(ix["ghosts_per_cached_block"]["requested"]),
            "how": (
                f"counting allocator, a cache of {ix['ghost_blocks']:,} blocks after 3 times as many more "
                f"arrived; {malloc(ix['ghosts_per_cached_block'])}"
            ),
        },
        {
            "item": "coordinator member table per worker",
            "value": f_bytes(ix["coordinator_per_worker"]["requested"]),
            "how": f"counting allocator, {ix['workers']:,} workers registered (ids of 11 B, addresses of ~14 B)",
        },
        {
            "item": "placement table per worker (each gateway and cache client)",
            "value": f_bytes(ix["placement_per_worker"]["requested"]),
            "how": f"counting allocator, RendezvousPlacement over {ix['workers']:,} workers",
        },
        {
            "item": "worker data plane per open connection",
            "value": f_bytes(dep["worker_conn"]["median"]),
            "how": (
                f"VmRSS with {k:,} idle connections minus before, / {k:,}, each after one {READ_LEN // 1024} KiB "
                f"ReadRange; median of {rounds} deployments ({f_range(dep['worker_conn'])}); allocated: "
                f"{dep['worker_conn_touched']:,.0f} B (every allocation touched, glibc.malloc.perturb): the "
                "connection's 8 KiB read buffer, its reader and writer tasks and the reply queue"
            ),
        },
        {
            "item": "gateway S3 front per open keep-alive connection",
            "value": f_bytes(dep["gateway_conn"]["median"]),
            "how": (
                f"VmRSS with {k:,} idle HTTP/1.1 connections minus before, / {k:,}, each after one ranged GET "
                f"of {READ_LEN // 1024} KiB; median of {rounds} deployments ({f_range(dep['gateway_conn'])}); allocated: "
                f"{dep['gateway_conn_touched']:,.0f} B (every allocation touched, glibc.malloc.perturb)"
            ),
        },
    ]
    for name, label, what in (
        ("origin-stub", "origin stub", "talon-origin-stub, one generated object"),
        ("coordinator", "coordinator", "talon-coordinator, one worker"),
        ("worker", "worker", "talon-worker, empty cache, registered"),
        ("gateway", "gateway", "talon-gateway, S3 front, cache route"),
        ("talon up", "talon up (all in one)", "origin stub, coordinator, 2 workers and gateway in one process"),
    ):
        r = dep["idle_range"][name]
        out.append({
            "item": f"idle RSS: {label}",
            "value": f_mib(dep["idle"][name]),
            "how": (
                f"VmRSS right after ready, median of {rounds} starts "
                f"({r['min'] / 2**20:.1f}–{r['max'] / 2**20:.1f} MiB); {what}"
            ),
        })
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conns", type=int, default=1000, help="connections per server (default 1000)")
    p.add_argument("--blocks", type=int, default=10_000, help="blocks per index measurement (default 10000)")
    p.add_argument("--rounds", type=int, default=5, help="fresh deployments to take the median of (default 5)")
    p.add_argument("--no-build", action="store_true", help="use the binaries already in target/release")
    p.add_argument("--output", type=Path, default=OUTPUT, help="where to write the JSON")
    args = p.parse_args()
    if not Path("/proc/self/status").exists():
        die("needs Linux (/proc)")

    # The worker holds 2 descriptors per connection and 1 per cached block; the example
    # holds one per block; this script one per connection.
    limit = raise_fd_limit(max(2 * args.conns, args.blocks) + 512)
    k = min(args.conns, (limit - 256) // 2)
    blocks = min(args.blocks, limit - 256)
    if k < args.conns or blocks < args.blocks:
        log(f"open-files limit {limit}: {k} connections, {blocks} blocks")

    if not args.no_build:
        build()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="talon-memory-"))
    try:
        ix = index_footprint(blocks, tmp)
        runs = []
        for r in range(args.rounds):
            log(f"round {r + 1} of {args.rounds}")
            runs.append(deployment_round(tmp / f"round{r}", k))
        log("with every allocation touched (GLIBC_TUNABLES=glibc.malloc.perturb)")
        touched = deployment_round(tmp / "touched", k, env=TOUCHED, with_up=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dep = summarise(runs, touched)

    table = rows(ix, dep, k)
    data = {"recorded": recorded(), "rows": table}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    print("| what | bytes | how it was measured |")
    print("|---|---:|---|")
    for r in table:
        print(f"| {r['item']} | {r['value']} | {r['how']} |")
    print(
        f"\nworker RSS after its {k:,} connections closed: {dep['worker_after_close'] / 2**20:+.1f} MiB; "
        f"gateway: {dep['gateway_after_close'] / 2**20:+.1f} MiB (memory the allocator kept)"
    )
    try:
        shown = args.output.resolve().relative_to(ROOT)
    except ValueError:
        shown = args.output
    log(f"wrote {shown} in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
