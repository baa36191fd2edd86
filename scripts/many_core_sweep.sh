#!/usr/bin/env bash
# The data-plane runs a 2-core box cannot make (docs/data-plane.md, "Not measured yet"),
# for a many-core host: servers and load generator on CPU sets of their own.
#
#   1. The ring-scaling sweep, closed loop: the io_uring plane with 1, 2, 4 and 8 rings,
#      the Tokio plane and nginx (sendfile), 64 KiB ranges, depth 1 and 16.
#   2. Open-loop tables: the 8-ring plane, the Tokio plane and nginx at one constant
#      offered rate each (half, then four fifths, of the slowest of the three's
#      closed-loop depth-1 throughput at 64 connections), so latency compares at equal
#      load, measured from the intended send time.
#
#   scripts/many_core_sweep.sh                # builds, then ~5 minutes on 16 CPUs
#   BUILD=0 BIN=dir scripts/many_core_sweep.sh   # binaries built elsewhere
#
# Settings (environment): SERVER_CPUS (default: the first half of the CPUs),
# CLIENT_CPUS (the second half), RESULTS (bench/results), CONNS (64,1024),
# SECONDS_PER (4), WARMUP (1), REVERSE (0; 1 runs the planes in reverse order), and what scripts/dataplane_loadtest.sh reads
# (BUILD, BIN, NGINX, NGINX_BIN).
# Writes RESULTS/many_core_{sweep,open_loop_50,open_loop_80}.{md,jsonl} and all points in
# RESULTS/many_core.jsonl; exit status 1 if a point failed.
set -euo pipefail
cd "$(dirname "$0")/.."

n=$(nproc)
(( n >= ${MIN_CPUS:-8} )) || { echo "many_core_sweep: $n CPUs; this run wants ${MIN_CPUS:-8} or more" >&2; exit 1; }
half=$((n / 2))
export SERVER_CPUS=${SERVER_CPUS:-0-$((half - 1))}
export CLIENT_CPUS=${CLIENT_CPUS:-$half-$((n - 1))}
RESULTS=${RESULTS:-bench/results}
CONNS=${CONNS:-64,1024}
export SECONDS_PER=${SECONDS_PER:-4} WARMUP=${WARMUP:-1}
mkdir -p "$RESULTS"

# The largest ring count the server CPUs hold (each ring is pinned to its own core).
server_cpus=$(taskset -c "$SERVER_CPUS" nproc)
rings=()
for r in 1 2 4 8 16; do
  (( r <= server_cpus )) && rings+=("io_uring+r$r")
done
top=${rings[-1]}
planes=$(IFS=,; echo "${rings[*]},tokio")
# REVERSE=1 runs the planes in the other order (a second round, order swapped).
if [[ ${REVERSE:-0} == 1 ]]; then
  planes=$(tr ',' '\n' <<<"$planes" | tac | paste -sd,)
fi

status=0
echo "# many_core_sweep: servers on CPUs $SERVER_CPUS, client on $CLIENT_CPUS" >&2
CONNS=$CONNS DEPTHS=1,16 PLANES=$planes OUT="$RESULTS/many_core_sweep.jsonl" \
  scripts/dataplane_loadtest.sh >"$RESULTS/many_core_sweep.md" || status=1
cat "$RESULTS/many_core_sweep.md"

# The offered rate: a fraction of the slowest closed-loop depth-1 throughput at the
# smallest connection count, among the three servers the open-loop table compares.
first_conns=${CONNS%%,*}
slowest=$(python3 - "$RESULTS/many_core_sweep.jsonl" "$top" "$first_conns" <<'EOF'
import json, sys
path, top, conns = sys.argv[1], sys.argv[2], int(sys.argv[3])
wanted = {f"talon-worker/{top}", "talon-worker/tokio", "nginx (sendfile)"}
rates = []
for line in open(path):
    r = json.loads(line)
    if r.get("target") in wanted and r.get("conns") == conns and r.get("depth") == 1 and r.get("rps"):
        rates.append(r["rps"])
print(int(min(rates)) if rates else 0)
EOF
)
if (( slowest == 0 )); then
  echo "many_core_sweep: no closed-loop throughput to set the open-loop rate from" >&2
  exit 1
fi
for fraction in 50 80; do
  rate=$((slowest * fraction / 100))
  echo "# open loop: $rate requests/s ($fraction% of $slowest)" >&2
  RATE=$rate CONNS=$CONNS DEPTHS=1 PLANES="$top,tokio" \
    OUT="$RESULTS/many_core_open_loop_$fraction.jsonl" \
    scripts/dataplane_loadtest.sh >"$RESULTS/many_core_open_loop_$fraction.md" || status=1
  cat "$RESULTS/many_core_open_loop_$fraction.md"
done
# Every point of the run in one file, for scripts/bench_record.py many-core.
cat "$RESULTS/many_core_sweep.jsonl" "$RESULTS"/many_core_open_loop_{50,80}.jsonl >"$RESULTS/many_core.jsonl"
exit $status
