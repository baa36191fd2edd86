# /// script
# requires-python = ">=3.11"
# dependencies = ["matplotlib==3.9.2"]
#
# [tool.uv]
# exclude-newer = "2026-11-01T00:00:00Z"
# ///
"""Render Talon's benchmark charts and tables from the recorded data.

    uv run scripts/bench_charts.py           # rewrite docs/assets/bench/*.svg and the
                                             # generated tables in docs/BENCHMARKS.md
    uv run scripts/bench_charts.py --check   # render to a scratch dir, compare, write
                                             # nothing; exit 1 if anything is stale

`bench/data/*.json` is the single source: each file holds one bench's recorded
measurements with the hardware and the commit they came from. The SVGs and the tables
between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` markers in
docs/BENCHMARKS.md are derived from it, never edited by hand. Output is byte-reproducible
(fixed svg.hashsalt, no date metadata, text kept as text, pinned matplotlib, uv's
exclude-newer), so an unchanged source renders to identical bytes and --check means
something. --check reports drift; it never repairs it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "svg")
os.environ["PYTHONHASHSEED"] = "0"  # documents intent; the salt below is what matters

import matplotlib  # noqa: E402

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
ASSETS = ROOT / "docs" / "assets" / "bench"
DOC = ROOT / "docs" / "BENCHMARKS.md"

plt.rcParams.update(
    {
        "svg.hashsalt": "talon-bench",
        "svg.fonttype": "none",
        "font.family": "DejaVu Sans",
        "font.size": 10,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.figsize": (7.0, 3.8),
        "figure.dpi": 100,
    }
)


class DataError(Exception):
    """A data file is missing a field a chart or table needs."""


def load(name: str) -> dict | None:
    path = DATA / f"{name}.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise DataError(f"{path.relative_to(ROOT)}: not JSON: {err}") from err


def need(row: dict, key: str, where: str):
    if key not in row:
        raise DataError(f"{where}: a row lacks {key!r}: {row}")
    return row[key]


# ---- formatting ----------------------------------------------------------------------


def f_int(v) -> str:
    return f"{v:,.0f}"


def f_us(v) -> str:
    if v is None:
        return "—"
    return f"{v / 1000:,.2f} ms" if v >= 1000 else f"{v:,.0f} µs"


def f_mib(v) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def f_ns(v) -> str:
    for unit, scale in (("ms", 1e6), ("µs", 1e3)):
        if v >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.1f} ns"


def f_bytes(v) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v:,.0f} B"


def table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or ("l" + "r" * (len(headers) - 1))
    marks = {"l": "---", "r": "---:"}
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def provenance(data: dict) -> str:
    rec = data.get("recorded", {})
    hw = rec.get("hardware", {})
    commit = str(rec.get("commit", "unknown"))[:12]
    return (
        f"_Recorded {rec.get('date', '?')} at `{commit}` on {hw.get('cores', '?')} cores "
        f"({hw.get('cpu', '?')}), Linux {hw.get('kernel', '?')}._"
    )


# ---- the data-plane load test (scripts/dataplane_loadtest.sh) ------------------------


def dataplane_series(data: dict) -> dict[str, list[dict]]:
    series: dict[str, list[dict]] = {}
    for row in data["rows"]:
        where = "dataplane.json"
        label = f"{need(row, 'server', where)}, depth {need(row, 'depth', where)}"
        series.setdefault(label, []).append(row)
    for rows in series.values():
        rows.sort(key=lambda r: r["conns"])
    return series


def dataplane_table(data: dict) -> str:
    rows = []
    for label, points in dataplane_series(data).items():
        for r in points:
            user, kernel = r.get("server_cpu_user_s"), r.get("server_cpu_kernel_s")
            served = r.get("served_conns")
            rows.append(
                [
                    label,
                    f_int(r["conns"]) if served is None else f"{f_int(r['conns'])} ({f_int(served)})",
                    f_int(r["rps"]),
                    f_mib(r["mib_s"]),
                    f_us(r["p50_us"]),
                    f_us(r["p99_us"]),
                    f_us(r.get("p999_us")),
                    "—" if user is None else f"{user:.2f} / {kernel:.2f} s",
                    "—"
                    if r.get("server_cpu_per_request_us") is None
                    else f"{r['server_cpu_per_request_us']:.1f} µs",
                    f"{r['server_rss_mib']:.0f} MiB" if r.get("server_rss_mib") is not None else "—",
                ]
            )
    headers = [
        "server",
        "conns (served)",
        "rps",
        "MiB/s",
        "p50",
        "p99",
        "p999",
        "server CPU user / kernel",
        "CPU per request",
        "RSS",
    ]
    return table(headers, rows, "l" + "r" * 9) + "\n\n" + provenance(data)


def dataplane_chart(data: dict, out: Path) -> None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for label, points in dataplane_series(data).items():
        xs = [p["conns"] for p in points]
        ax1.plot(xs, [p["rps"] for p in points], marker="o", label=label)
        ax2.plot(xs, [p["p99_us"] / 1000 for p in points], marker="o", label=label)
    ticks = sorted({r["conns"] for r in data["rows"]})
    for ax, ylabel in ((ax1, "requests/s"), (ax2, "p99 latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("connections")
        ax.set_ylabel(ylabel)
    ax1.set_ylim(bottom=0)
    ax2.set_yscale("log")
    ax1.legend(fontsize=8)
    range_kib = data.get("workload", {}).get("range_bytes", 65536) // 1024
    fig.suptitle(f"Data plane: {range_kib} KiB cache-hit ranges over loopback")
    fig.tight_layout()
    save(fig, out)


# ---- the gateway bench (talon-gateway-bench) -----------------------------------------


def gateway_table(data: dict) -> str:
    rows = []
    for r in data["rows"]:
        rows.append(
            [
                need(r, "path", "gateway.json"),
                f"{r['delay_ms']:g} ms",
                f_int(r["rps"]),
                f_mib(r["mib_s"]),
                f_us(r["p50_us"]),
                f_us(r["p99_us"]),
                f_int(r["ceiling_rps"]),
                f"{r['rps'] / r['ceiling_rps'] * 100:.0f}%",
            ]
        )
    headers = ["path", "added delay", "rps", "MiB/s", "p50", "p99", "Little's-law ceiling", "achieved"]
    out = table(headers, rows, "ll" + "r" * 6)
    rss = data.get("slow_consumer", [])
    if rss:
        srows = [
            [
                r["path"],
                f"{r['consumer_mib_s']:g} MiB/s",
                f"{f_bytes(r['bytes_read'])} in {r['seconds']:g} s",
                f"{r['rss_start_mib']:.1f} MiB",
                f"{r['rss_max_mib']:.1f} MiB",
                f"{r['rss_end_mib']:.1f} MiB",
                f"{r['rss_growth_mib']:.1f} MiB (bound {r['rss_bound_mib']:g})",
            ]
            for r in rss
        ]
        out += "\n\n" + table(
            ["slow consumer", "pace", "streamed", "RSS start", "RSS max", "RSS end", "growth"],
            srows,
            "lll" + "r" * 4,
        )
    return out + "\n\n" + provenance(data)


def gateway_chart(data: dict, out: Path) -> None:
    fig, ax = plt.subplots()
    paths: dict[str, list[dict]] = {}
    for r in data["rows"]:
        paths.setdefault(r.get("route", r["path"]) + " route", []).append(r)
    for i, (path, points) in enumerate(paths.items()):
        points.sort(key=lambda r: r["delay_ms"])
        xs = [p["delay_ms"] for p in points]
        color = f"C{i}"
        ax.plot(xs, [p["rps"] for p in points], marker="o", color=color, label=f"{path}: measured")
        ax.plot(xs, [p["ceiling_rps"] for p in points], ls="--", color=color, label=f"{path}: ceiling")
    ax.set_xlabel("added delay (ms)")
    ax.set_ylabel("requests/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    conc = data.get("workload", {}).get("concurrency", "?")
    ax.set_title(f"Gateway throughput follows the delay (concurrency {conc})")
    fig.tight_layout()
    save(fig, out)


# ---- the gateway proxy bench (talon-gateway-proxy-bench) -----------------------------


def proxy_table(data: dict) -> str:
    rows = []
    for r in data["arms"]:
        spread = f"{f_int(r['rps_min'])}–{f_int(r['rps_max'])}"
        cpu = r.get("cpu_per_request_us")
        per_gib = r.get("cpu_s_per_gib")
        busy = r.get("cores_busy")
        rows.append(
            [
                need(r, "arm", "gateway_proxy.json"),
                f"{f_int(r['rps_median'])} ({spread})",
                f_mib(r["mib_s"]),
                f_us(r["p50_us"]),
                f_us(r["p99_us"]),
                f_us(cpu) if cpu is not None else "—",
                f"{per_gib:.2f}" if per_gib is not None else "—",
                f"{busy:.2f}" if busy is not None else "—",
            ]
        )
    headers = ["arm", "rps, median (min–max)", "MiB/s", "p50", "p99", "CPU/request", "CPU-s per GiB", "cores busy"]
    wl = data.get("workload", {})
    objects = int(wl.get("objects", 1))
    what = (
        f"whole GETs of {objects:,} distinct {range_text(wl.get('object_bytes', 0))} objects, one at random each"
        if wl.get("whole_object") and objects > 1
        else f"whole GETs of a {range_text(wl.get('object_bytes', 0))} object"
        if wl.get("whole_object")
        else f"{range_text(wl.get('range_bytes', 0))} ranges"
    )
    note = (
        f"\n\n{what[0].upper()}{what[1:]}, concurrency "
        f"{wl.get('concurrency', '?')}, {wl.get('rounds', '?')} paired, order-swapped rounds "
        f"of {wl.get('requests_per_arm_round', '?')} requests per arm; origin model: "
        f"{wl.get('origin_model', '?')}; client: {wl.get('client', '?')}."
    )
    return table(headers, rows, "l" + "r" * 7) + note + "\n\n" + provenance(data)


def cold_table(data: dict) -> str:
    """The proxy bench's cold reads: one row per arm."""
    rows = [
        [
            need(r, "arm", "gateway_proxy_cold.json"),
            f_us(r["median_s"] * 1e6),
            f_us(r["min_s"] * 1e6),
            f_us(r["max_s"] * 1e6),
            f"{r['ratio_to_straight']:.2f}×",
        ]
        for r in data["arms"]
    ]
    headers = ["arm", "median", "min", "max", "median against straight from the origin"]
    wl = data.get("workload", {})
    model = wl.get("origin_model") or {}
    note = (
        f"\n\nA fresh {range_text(wl.get('object_bytes', 0))} object read whole, "
        f"{wl.get('reads_per_arm', '?')} times per arm, arm order rotating; origin model: "
        f"{model.get('latency_ms_per_request', '?')} ms added to every origin request, "
        f"{(model.get('bandwidth_bytes_per_sec_per_response') or 0) / (1 << 20):g} MiB/s per response body."
    )
    return table(headers, rows, "l" + "r" * 4) + note + "\n\n" + provenance(data)


def range_text(size: int) -> str:
    """`1 MiB`, `64 KiB`."""
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def proxy_chart(data: dict, out: Path) -> None:
    arms = data["arms"]
    fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(arms) + 1.2))
    names = [a["arm"] for a in arms][::-1]
    med = [a["rps_median"] for a in arms][::-1]
    lo = [max(0.0, a["rps_median"] - a["rps_min"]) for a in arms][::-1]
    hi = [max(0.0, a["rps_max"] - a["rps_median"]) for a in arms][::-1]
    ax.barh(names, med, xerr=[lo, hi], color="C0", ecolor="black", capsize=3)
    ax.set_xlabel("requests/s (median of rounds; bars show min–max)")
    ax.set_title("Arms against one origin stub")
    fig.tight_layout()
    save(fig, out)


# ---- criterion baseline and memory footprint -----------------------------------------


def micro_table(baseline: dict) -> str:
    rows = [[f"`{name}`", f_ns(ns)] for name, ns in sorted(baseline.items())]
    return table(["benchmark", "median"], rows, "lr")


def memory_table(data: dict) -> str:
    rows = [
        [need(r, "item", "memory.json"), r["value"], r["how"]]
        for r in data["rows"]
    ]
    return table(["what", "bytes", "how it was measured"], rows, "lrl") + "\n\n" + provenance(data)


# ---- rendering -----------------------------------------------------------------------


def save(fig, out: Path) -> None:
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)


def render(asset_dir: Path) -> dict[str, str]:
    """Write every chart into asset_dir; return the generated tables by name."""
    asset_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, str] = {}
    if (d := load("dataplane")) is not None:
        tables["dataplane"] = dataplane_table(d)
        dataplane_chart(d, asset_dir / "dataplane.svg")
    if (d := load("gateway")) is not None:
        tables["gateway"] = gateway_table(d)
        gateway_chart(d, asset_dir / "gateway.svg")
    if (d := load("gateway_proxy")) is not None:
        tables["gateway-proxy"] = proxy_table(d)
        proxy_chart(d, asset_dir / "gateway_proxy.svg")
    if (d := load("gateway_proxy_cold")) is not None:
        tables["gateway-proxy-cold"] = cold_table(d)
    # Other range sizes of the proxy bench (bench_record.py names them by size).
    for extra in sorted(p for p in DATA.glob("gateway_proxy_*.json") if p.stem != "gateway_proxy_cold"):
        suffix = extra.stem.removeprefix("gateway_proxy_")
        d = load(extra.stem)
        tables[f"gateway-proxy-{suffix}"] = proxy_table(d)
        proxy_chart(d, asset_dir / f"{extra.stem}.svg")
    if (d := load("memory")) is not None:
        tables["memory"] = memory_table(d)
    baseline = ROOT / "bench" / "baselines" / "main.json"
    if baseline.exists():
        tables["micro"] = micro_table(json.loads(baseline.read_text()))
    return tables


MARKER = re.compile(r"(<!-- generated:([\w-]+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.S)


def fill_doc(doc: str, tables: dict[str, str]) -> tuple[str, list[str]]:
    """The document with each marked block replaced; and the markers with no table."""
    unknown: list[str] = []

    def sub(m: re.Match) -> str:
        name = m.group(2)
        if name not in tables:
            unknown.append(name)
            return m.group(0)
        return f"{m.group(1)}{tables[name]}\n{m.group(4)}"

    return MARKER.sub(sub, doc), unknown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if stale")
    args = parser.parse_args()

    try:
        if args.check:
            with tempfile.TemporaryDirectory() as scratch:
                tables = render(Path(scratch))
                stale = []
                fresh = {p.name: p.read_bytes() for p in Path(scratch).glob("*.svg")}
                committed = {p.name: p.read_bytes() for p in ASSETS.glob("*.svg")} if ASSETS.exists() else {}
                for name in sorted(set(fresh) | set(committed)):
                    if fresh.get(name) != committed.get(name):
                        why = "missing" if name not in committed else "orphaned" if name not in fresh else "stale"
                        stale.append(f"docs/assets/bench/{name}: {why}")
        else:
            tables = render(ASSETS)
            stale = []
        doc = DOC.read_text() if DOC.exists() else ""
        new_doc, unknown = fill_doc(doc, tables)
    except DataError as err:
        print(f"bench_charts: {err}", file=sys.stderr)
        return 2

    for name in unknown:
        print(f"bench_charts: docs/BENCHMARKS.md marks a table {name!r} that no data file provides", file=sys.stderr)
    if args.check:
        if new_doc != doc:
            diff = difflib.unified_diff(doc.splitlines(), new_doc.splitlines(), "committed", "rendered", lineterm="", n=1)
            stale.append("docs/BENCHMARKS.md: generated tables differ:\n" + "\n".join(list(diff)[:40]))
        for line in stale:
            print(f"STALE {line}")
        if stale or unknown:
            print("\nrun `just bench-charts` and commit the result", file=sys.stderr)
            return 1
        print(f"charts and tables are current ({len(tables)} tables checked)")
        return 0
    if new_doc != doc:
        DOC.write_text(new_doc)
    print(f"rendered {len(list(ASSETS.glob('*.svg')))} charts into {ASSETS.relative_to(ROOT)}; {len(tables)} tables")
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
