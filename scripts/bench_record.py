#!/usr/bin/env python3
"""Record a load bench's latest run as the data the docs and charts are made from.

    scripts/bench_record.py dataplane       # bench/results/dataplane_loadtest.jsonl
    scripts/bench_record.py gateway         # bench/results/gateway-bench.jsonl
    scripts/bench_record.py gateway-proxy   # bench/results/gateway-proxy-bench.jsonl
    scripts/bench_record.py gateway-proxy-cold --from FILE.jsonl   # its --cold-reads
    scripts/bench_record.py many-core       # bench/results/many_core.jsonl (many_core_sweep.sh)
    scripts/bench_record.py NAME --from FILE.jsonl

Reads the JSON Lines a bench wrote under bench/results/ (ignored by git) and writes
bench/data/NAME.json (committed): the rows the tables and charts need, the hardware and
commit the run came from, and every raw line, so a figure in docs/BENCHMARKS.md can be
traced to the run that produced it. Then `just bench-charts` re-renders. A run with a
failed point is refused: failed runs are not data.

Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DATA = ROOT / "bench" / "data"

SOURCES = {
    "dataplane": "dataplane_loadtest.jsonl",
    "gateway": "gateway-bench.jsonl",
    "gateway-proxy": "gateway-proxy-bench.jsonl",
    "gateway-proxy-cold": "gateway-proxy-bench.jsonl",
    "many-core": "many_core.jsonl",
}
TARGETS = {
    "dataplane": "dataplane",
    "gateway": "gateway",
    "gateway-proxy": "gateway_proxy",
    "gateway-proxy-cold": "gateway_proxy_cold",
    "many-core": "many_core",
}


def die(msg: str) -> None:
    print(f"bench_record: {msg}", file=sys.stderr)
    sys.exit(2)


def read_lines(path: Path) -> list[dict]:
    try:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        die(f"{path} does not exist: run the bench first")
    except ValueError as err:
        die(f"{path}: not JSON Lines: {err}")
    if not lines:
        die(f"{path} is empty")
    return lines


def recorded(date: float, commit: str, dirty: bool, cpu: str, cores, kernel: str) -> dict:
    day = datetime.datetime.fromtimestamp(date, datetime.UTC).strftime("%Y-%m-%d")
    return {
        "date": day,
        "commit": commit + ("-dirty" if dirty else ""),
        "hardware": {"cpu": cpu, "cores": cores, "kernel": kernel},
    }


def git_head() -> str:
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dataplane(lines: list[dict]) -> dict:
    bad = [x for x in lines if not x.get("ok")]
    if bad:
        die(f"{len(bad)} point(s) failed, e.g. {bad[0].get('target')}: {bad[0].get('first_error')}")
    rows = []
    for x in lines:
        lat = x["latency_us"]
        server = x.get("server") or {}
        rows.append(
            {
                "server": x["target"],
                "protocol": x["protocol"],
                "conns": x["conns"],
                "admitted_conns": x.get("admitted_conns"),
                "served_conns": x.get("served_conns"),
                "depth": x["depth"],
                "offered_rps": x.get("offered_rps"),
                "rps": x["rps"],
                "mib_s": x["mib_per_s"],
                "p50_us": lat["p50_us"],
                "p99_us": lat["p99_us"],
                "p999_us": lat["p999_us"],
                "max_us": lat["max_us"],
                "server_cpu_user_s": server.get("user_s"),
                "server_cpu_kernel_s": server.get("kernel_s"),
                "server_cpu_per_request_us": server.get("cpu_per_request_us"),
                "server_rss_mib": server.get("rss_mib"),
                "client_cores_busy": (x.get("client") or {}).get("cores_busy"),
            }
        )
    first = lines[0]
    return {
        "bench": "dataplane-loadtest",
        "recorded": recorded(
            first["unix_time_s"],
            git_head(),
            False,
            first.get("host_cpu_model", "?"),
            first.get("host_cpus"),
            first.get("host_kernel", "?"),
        ),
        "workload": {
            "range_bytes": first["range_size"],
            "block_bytes": first["block_size"],
            "warmup_s": first["warmup_s"],
            "window_s": round(first["window_s"], 1),
        },
        "rows": rows,
        "raw": lines,
    }


def host_of(x: dict) -> dict:
    h = x.get("host") or {}
    return recorded(
        x.get("unix_time_s", 0),
        h.get("commit", "unknown"),
        bool(h.get("dirty")),
        h.get("cpu_model", "?"),
        h.get("cores"),
        h.get("kernel", "?"),
    )


def gateway(lines: list[dict]) -> dict:
    sweep = [x for x in lines if x.get("kind") == "delay-sweep"]
    slow = [x for x in lines if x.get("kind") == "slow-consumer"]
    if not sweep:
        die("no delay-sweep lines")
    bad = [x for x in sweep if x.get("errors")] + [x for x in slow if not x.get("ok")]
    if bad:
        die(f"{len(bad)} point(s) failed or broke the RSS bound: {bad[0]}")
    rows = [
        {
            "path": f"{x['route']} route (delay at the {x['delay_injected_at']})",
            "route": x["route"],
            "delay_ms": x["delay_ms"],
            "rps": x["rps"],
            "mib_s": x["mib_per_s"],
            "p50_us": x["latency_us"]["p50_us"],
            "p99_us": x["latency_us"]["p99_us"],
            "max_us": x["latency_us"]["max_us"],
            "ceiling_rps": x["little_ceiling_rps"],
            "gateway_cores_busy": x.get("gateway_cores_busy"),
        }
        for x in sweep
    ]
    slow_rows = [
        {
            "path": f"{x['route']} route",
            "consumer_mib_s": x["rate_bytes_per_s"] / (1 << 20),
            "seconds": round(x["read_s"], 1),
            "bytes_read": x["bytes_read"],
            "rss_start_mib": x["rss_start_mib"],
            "rss_max_mib": x["rss_max_mib"],
            "rss_end_mib": x["rss_end_mib"],
            "rss_growth_mib": x["rss_growth_mib"],
            "rss_bound_mib": x["rss_bound_mib"],
        }
        for x in slow
    ]
    first = sweep[0]
    return {
        "bench": "gateway-bench",
        "recorded": host_of(first),
        "workload": {
            "concurrency": first["concurrency"],
            "range_bytes": first["range_bytes"],
            "object_bytes": first["object_bytes"],
            "warmup_s": first["warmup_s"],
        },
        "rows": rows,
        "slow_consumer": slow_rows,
        "raw": lines,
    }


def gateway_proxy(lines: list[dict]) -> dict:
    rounds = [x for x in lines if x.get("kind") == "round"]
    summaries = [x for x in lines if x.get("kind") == "summary"]
    if not summaries:
        die("no summary lines: the run did not finish")
    bad = [x for x in rounds if x.get("errors")]
    if bad:
        die(f"{len(bad)} round(s) had errors, e.g. {bad[0]['arm']}: {bad[0].get('first_error')}")
    arms = []
    for s in summaries:
        lat = s.get("latency_us_pooled") or {}
        arms.append(
            {
                "arm": s["arm"],
                "rps_median": s["rps_median"],
                "rps_min": s["rps_min"],
                "rps_max": s["rps_max"],
                "mib_s": s["mib_per_s_median"],
                "p50_us": lat.get("p50_us"),
                "p99_us": lat.get("p99_us"),
                "cpu_per_request_us": s.get("arm_cpu_per_request_us"),
                "cpu_s_per_gib": s.get("arm_cpu_s_per_gib"),
                "cores_busy": s.get("arm_cores_busy"),
                "stub_cpu_per_request_us": s.get("stub_cpu_per_request_us"),
                "client_cores_busy": s.get("client_cores_busy"),
            }
        )
    first = summaries[0]
    model = first.get("origin_model") or {}
    latency = model.get("latency_ms_per_request")
    bandwidth = model.get("bandwidth_bytes_per_sec_per_response")
    model_text = ", ".join(
        t
        for t in (
            f"{latency} ms added to every origin request" if latency is not None else "",
            f"{bandwidth / (1 << 20):g} MiB/s per response body" if bandwidth else "",
        )
        if t
    )
    return {
        "bench": "gateway-proxy-bench",
        "recorded": host_of(first),
        "workload": {
            "range_bytes": first["range_bytes"],
            "object_bytes": first["object_bytes"],
            "whole_object": bool(first.get("whole_object")),
            "objects": int(first.get("objects", 1)),
            "concurrency": first["concurrency"],
            "rounds": first["rounds"],
            "requests_per_arm_round": first["requests_per_round"],
            "origin_model": model_text or json.dumps(model),
            "client": first["client"],
            "percentiles": first.get("percentiles", ""),
        },
        "arms": arms,
        "raw": lines,
    }


def gateway_proxy_cold(lines: list[dict]) -> dict:
    """The proxy bench's cold reads: each arm's whole-GET times of fresh objects, and the
    ratio of each arm's median to the median straight from the origin."""
    cold = [x for x in lines if x.get("kind") == "cold"]
    if not cold:
        die("no cold-read lines: run the proxy bench with --cold-reads N")
    arms: dict[str, list[float]] = {}
    for x in cold:
        arms.setdefault(x["arm"], []).append(x["seconds"])
    straight = next((v for k, v in arms.items() if k.startswith("straight")), None)
    if straight is None:
        die("no straight-from-the-origin arm among the cold reads")

    def median(v: list[float]) -> float:
        v = sorted(v)
        return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2

    base = median(straight)
    first = cold[0]
    return {
        "bench": "gateway-proxy-bench",
        "recorded": host_of(first),
        "workload": {
            "object_bytes": first["object_bytes"],
            "reads_per_arm": len(straight),
            "origin_model": first.get("origin_model"),
        },
        "arms": [
            {
                "arm": arm,
                "median_s": median(v),
                "min_s": min(v),
                "max_s": max(v),
                "ratio_to_straight": median(v) / base,
            }
            for arm, v in arms.items()
        ],
        "raw": cold,
    }


def data_suffix(data: dict) -> str:
    """The proxy bench is recorded once per range size: its 1 MiB point in
    gateway_proxy.json, any other in gateway_proxy_<size>.json (64KiB, ...), and whole
    GETs of a small object in gateway_proxy_whole_<size>.json (of N distinct ones:
    gateway_proxy_whole_<size>_<N>_objects.json)."""
    workload = data.get("workload", {})
    size = workload.get("range_bytes") if data.get("bench") == "gateway-proxy-bench" else None
    if size is None or (size == 1 << 20 and not workload.get("whole_object")):
        return ""
    text = next(f"{size >> s}{u}" for s, u in ((30, "GiB"), (20, "MiB"), (10, "KiB"), (0, "B"))
                if size % (1 << s) == 0 and size >= 1 << s)
    objects = int(workload.get("objects", 1))
    distinct = f"_{objects}_objects" if objects > 1 else ""
    return ("_whole_" if workload.get("whole_object") else "_") + text + distinct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("name", choices=sorted(SOURCES))
    parser.add_argument("--from", dest="source", type=Path, help="JSON Lines to read instead of bench/results/")
    args = parser.parse_args()
    lines = read_lines(args.source or RESULTS / SOURCES[args.name])
    data = {
        "dataplane": dataplane,
        "gateway": gateway,
        "gateway-proxy": gateway_proxy,
        "gateway-proxy-cold": gateway_proxy_cold,
        "many-core": lambda lines: dataplane(lines)
        | {
            "bench": "many-core-sweep",
            "note": "hardware.cores is the load generator's CPU set (taskset); the servers "
            "ran on a set of their own, as many CPUs again (scripts/many_core_sweep.sh)",
        },
    }[args.name](lines)
    DATA.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.name == "gateway-proxy-cold" else data_suffix(data)
    out = DATA / f"{TARGETS[args.name]}{suffix}.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out.relative_to(ROOT)}; now `just bench-charts` and commit both")


if __name__ == "__main__":
    main()
