#!/usr/bin/env bash
# The 1,024-connection open-loop comparison on a many-core host, point by point, with
# each server's per-thread CPU (scripts/thread_cpu.py) and optional perf profiles: the
# run behind BENCHMARKS.md's "Open loop at 1,024 connections, per thread" (2026-12-05).
#
#   scripts/many_core_open_loop.sh                    # binaries in target/release
#   SERVER_CPUS=0-3 CLIENT_CPUS=4-15 RINGS=4 scripts/many_core_open_loop.sh
#
# Each point is its own scripts/dataplane_loadtest.sh run (one server), so the sampler
# knows whose threads it reads. Order: closed loop at depth 1 (rings, Tokio, nginx) to
# find the slowest; open loop at 80% of it, ROUNDS order-swapped rounds; PERF_BIN set:
# a profiled point of each plane at 80% (perf record -g on the worker for 3 s; its
# latencies are not comparable); open loop at 50%; SWEEP=1: the closed sweep at CONNS
# (1, 2, 4 rings, RINGS, Tokio, nginx; depth 1 and 16).
#
# Settings (environment): SERVER_CPUS (0-7), CLIENT_CPUS (8-15), RINGS (8), CONNS
# (1024), SECONDS_PER (5), WARMUP (1), ROUNDS (2), SAMPLE (3.5 s of each window read by
# the sampler), RESULTS (bench/results/many_core_open_loop), PERF_BIN (empty: none),
# SWEEP (1), BIN, NGINX_BIN as scripts/dataplane_loadtest.sh reads them.
# Writes RESULTS/TAG.{jsonl,md,err,threads.json} per point, profiles as
# RESULTS/TAG.perf-{comm,sym,graph}.txt, and RESULTS/summary.txt (one line per point).
set -u
cd "$(dirname "$0")/.."
R=${RESULTS:-bench/results/many_core_open_loop}
mkdir -p "$R"
export BUILD=${BUILD:-0} BIN=${BIN:-target/release}
export SERVER_CPUS=${SERVER_CPUS:-0-7} CLIENT_CPUS=${CLIENT_CPUS:-8-15}
export SECONDS_PER=${SECONDS_PER:-5} WARMUP=${WARMUP:-1}
C=${CONNS:-1024}; SAMPLE=${SAMPLE:-3.5}; RINGS=${RINGS:-8}; ROUNDS=${ROUNDS:-2}
P=io_uring+r$RINGS
: >"$R/summary.txt"
T0=$SECONDS

row() { # one line per point of a JSON Lines file
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); l = r.get("latency_us") or {}; s = r.get("server") or {}
    f = lambda v: "-" if v is None else f"{v/1000:.2f}"
    print(f'  {r.get("target")} c{r["conns"]} d{r["depth"]} offered={r.get("offered_rps")} rps={r.get("rps") or 0:.0f} '
          f'p50={f(l.get("p50_us"))} p99={f(l.get("p99_us"))} p999={f(l.get("p999_us"))} ms cpu/req={s.get("cpu_per_request_us") or 0:.1f}us '
          f'srv_cores={s.get("cores_busy") or 0:.2f} cli_cores={(r.get("client") or {}).get("cores_busy") or 0:.2f} err={r.get("errors")}')
PY
}

point() { # TAG PROFILE(0/1) VAR=VALUE...
  local tag=$1 profile=$2 i=0 rc
  shift 2
  env "$@" OUT="$R/$tag.jsonl" scripts/dataplane_loadtest.sh >"$R/$tag.md" 2>"$R/$tag.err" &
  local run=$!
  # The measured point's load generator is the one with a --label (the warm-up has none).
  until pgrep -f -- '--label' >/dev/null; do
    sleep 0.02
    ((++i > 3000)) && break
  done
  sleep "$WARMUP"
  sleep 0.3
  scripts/thread_cpu.py "$R/$tag.threads.json" "$SAMPLE" talon-worker nginx &
  local sampler=$!
  if [[ $profile == 1 && -n ${PERF_BIN:-} ]]; then
    "$PERF_BIN" record -e cpu-clock -F 1999 -g -p "$(pgrep -x talon-worker | head -1)" \
      -o "$R/$tag.perf.data" -- sleep 3 >"$R/$tag.perf.log" 2>&1
  fi
  wait "$sampler"
  wait "$run"
  rc=$?
  echo "[$((SECONDS - T0)) s] $tag exit $rc" >>"$R/summary.txt"
  [[ -s $R/$tag.jsonl ]] && row "$R/$tag.jsonl" >>"$R/summary.txt"
  [[ $rc == 0 ]] || tail -3 "$R/$tag.err" >>"$R/summary.txt"
  if [[ -f $R/$tag.perf.data ]]; then
    "$PERF_BIN" report -i "$R/$tag.perf.data" --stdio --no-children --sort comm -g none >"$R/$tag.perf-comm.txt" 2>/dev/null
    "$PERF_BIN" report -i "$R/$tag.perf.data" --stdio --no-children --sort dso,sym --percent-limit 0.4 -g none >"$R/$tag.perf-sym.txt" 2>/dev/null
    "$PERF_BIN" report -i "$R/$tag.perf.data" --stdio --no-children --sort sym --percent-limit 2 -g caller,1,callee,function,percent 2>/dev/null | head -1500 >"$R/$tag.perf-graph.txt"
    rm -f "$R/$tag.perf.data"
  fi
}

server() { # rings|tokio|nginx -> the VAR=VALUE settings of a one-server run
  case $1 in
    rings) echo "PLANES=$P NGINX=0" ;;
    tokio) echo "PLANES=tokio NGINX=0" ;;
    nginx) echo "PLANES= NGINX=1" ;;
  esac
}

for s in rings tokio nginx; do
  # shellcheck disable=SC2046
  point "closed_$s" 0 $(server $s) CONNS="$C" DEPTHS=1
done
slowest=$(cat "$R"/closed_{rings,tokio,nginx}.jsonl | python3 -c 'import sys, json; print(int(min(json.loads(l)["rps"] or 0 for l in sys.stdin)))')
(( slowest > 0 )) || { echo "many_core_open_loop: a closed-loop point failed" >&2; cat "$R/summary.txt"; exit 1; }
r80=$((slowest * 80 / 100)); r50=$((slowest * 50 / 100))
echo "slowest closed loop $slowest requests/s: 80% $r80, 50% $r50" >>"$R/summary.txt"
order=(rings tokio nginx)
for ((round = 1; round <= ROUNDS; round++)); do
  for s in "${order[@]}"; do
    # shellcheck disable=SC2046
    point "open80_${s}_$round" 0 $(server $s) CONNS="$C" DEPTHS=1 RATE=$r80
  done
  order=("${order[2]}" "${order[1]}" "${order[0]}")
done
if [[ -n ${PERF_BIN:-} ]]; then
  for s in rings tokio; do
    # shellcheck disable=SC2046
    point "profiled80_$s" 1 $(server $s) CONNS="$C" DEPTHS=1 RATE=$r80
  done
fi
for s in rings tokio nginx; do
  # shellcheck disable=SC2046
  point "open50_$s" 0 $(server $s) CONNS="$C" DEPTHS=1 RATE=$r50
done
if [[ ${SWEEP:-1} == 1 ]]; then
  point closed_sweep 0 PLANES="io_uring+r1,io_uring+r2,io_uring+r4,$P,tokio" NGINX=1 CONNS="$C" DEPTHS=1,16
fi
echo "done in $((SECONDS - T0)) s" >>"$R/summary.txt"
cat "$R/summary.txt"
