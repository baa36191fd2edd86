#!/usr/bin/env bash
# The data-plane load test: a real talon-worker (per data plane it has) and, for
# comparison, nginx serving the same bytes from a file with sendfile, both driven by
# talon-loadgen with the same 64 KiB range workload, on loopback.
#
#   scripts/dataplane_loadtest.sh                       # defaults, ~3-4 minutes
#   CONNS=1,512 SECONDS_PER=30 scripts/dataplane_loadtest.sh
#
# Settings (environment):
#   CONNS=1,64,256,1024   connection counts swept
#   DEPTHS=1,16           pipelined requests in flight per worker connection
#                         (nginx: always 1, HTTP/1.1 without pipelining)
#   SECONDS_PER=10        measured seconds per point
#   WARMUP=3              seconds of load before each point, not sampled
#   RANGE_SIZE=64KiB      bytes per request
#   BLOCK_SIZE=4MiB       block size (the worker's page size is 1 MiB)
#   BLOCKS=1              reads spread over this many blocks (object = BLOCKS blocks)
#   PLANES=io_uring,tokio data planes to run, from PLANE_ENV below (empty: nginx alone)
#   NGINX=1               0 skips the nginx comparison
#   RATE=                 offered requests/s per point (constant rate); empty: closed loop
#   SERVER_CPUS=          CPU list (taskset -c) for the workers and nginx; empty: any CPU
#   CLIENT_CPUS=          CPU list for talon-loadgen, which then runs one thread per CPU
#                         in it (keep the two apart on a many-core host: the ring sweep)
#   BUILD=1               0 uses the binaries already in BIN (a machine without cargo)
#   BIN=target/release    where the binaries are
#   NGINX_BIN=            the nginx to run (default: the one on PATH or /usr/sbin/nginx)
#   OUT=bench/results/dataplane_loadtest.jsonl   JSON Lines, one report per point
#                         (overwritten each run)
#   TALON_CLUSTER_SECRET  the cluster secret every process shares (default: a fresh
#                         random one per run; TALON_CLUSTER_SECRET_FILE is ignored)
#
# Every server runs on this host, as does the client: read the client's "cores busy"
# next to the server's. Points are interleaved (for each connection count: every
# plane, every depth, then nginx) so drift on a shared machine lands on all targets.
# Exit status: 0 if every point succeeded, 1 if any failed (its row says "refused").
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-1,64,256,1024}
DEPTHS=${DEPTHS:-1,16}
SECONDS_PER=${SECONDS_PER:-10}
WARMUP=${WARMUP:-3}
RANGE_SIZE=${RANGE_SIZE:-64KiB}
BLOCK_SIZE=${BLOCK_SIZE:-4MiB}
BLOCKS=${BLOCKS:-1}
PLANES=${PLANES-io_uring,tokio}
NGINX=${NGINX:-1}
OUT=${OUT:-bench/results/dataplane_loadtest.jsonl}

# Each data plane the worker has, and the environment that selects it. Adding a plane
# is one more entry here (and in PLANES).
# A name after "+" is a Layer 2 variant of that plane (docs/data-plane.md): "copy"
# sends resident ranges with pread + send instead of sendfile, "uring" with io_uring
# read + send (the rings only); "unpinned" runs the rings without pinning each to a core;
# "plain" and "defer" set the rings up without IORING_SETUP_COOP_TASKRUN (the default)
# or with IORING_SETUP_DEFER_TASKRUN instead.
declare -A PLANE_ENV=(
  [io_uring]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0"
  [tokio]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=1"
  [io_uring+copy]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0 TALON_WORKER_LAYER2=copy"
  [tokio+copy]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=1 TALON_WORKER_LAYER2=copy"
  [io_uring+uring]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0 TALON_WORKER_LAYER2=uring"
  [io_uring+plain]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0 TALON_WORKER_RING_SETUP=plain"
  [io_uring+defer]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0 TALON_WORKER_RING_SETUP=defer"
  [io_uring+unpinned]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0 TALON_WORKER_DATA_PLANE_PIN_RINGS=false"
)
# "io_uring+rN": the rings with N ring threads (the ring-scaling sweep).
for n in 1 2 4 8 16; do
  PLANE_ENV[io_uring+r$n]="TALON_WORKER_FORCE_TOKIO_DATA_PLANE=0 TALON_WORKER_DATA_PLANE_RINGS=$n"
done

BIN=${BIN:-target/release}
LOADGEN=$BIN/talon-loadgen
BUILD=${BUILD:-1}
SERVER_CPUS=${SERVER_CPUS:-}
CLIENT_CPUS=${CLIENT_CPUS:-}
log() { printf '[dataplane_loadtest] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Bytes from "4MiB"-style sizes (what the worker and the stub accept).
bytes() {
  local s=$1 n unit
  n=${s%%[!0-9]*}
  unit=${s#"$n"}
  [[ -n $n ]] || die "'$s' is not a size"
  case $unit in
    ""|B) echo "$n" ;;
    K|KiB) echo $((n << 10)) ;;
    M|MiB) echo $((n << 20)) ;;
    G|GiB) echo $((n << 30)) ;;
    *) die "unknown size unit in '$s'" ;;
  esac
}

if [[ $BUILD == 1 ]]; then
  log "building (release): talon-loadgen talon-worker talon-origin-stub talon-coordinator"
  cargo build --release -q -p talon-loadgen -p talon-worker -p talon-origin-stub -p talon-coordinator
fi
for b in talon-loadgen talon-worker talon-origin-stub talon-coordinator; do
  [[ -x $BIN/$b ]] || die "$BIN/$b is missing (BUILD=1 builds it)"
done

# Servers and client on CPU sets of their own, when asked: a command prefix that
# execs (so "$!" stays the server's own pid).
SERVER_ON=()
CLIENT_ON=()
[[ -n $SERVER_CPUS ]] && SERVER_ON=(taskset -c "$SERVER_CPUS")
[[ -n $CLIENT_CPUS ]] && CLIENT_ON=(taskset -c "$CLIENT_CPUS")
# The number of CPUs in a taskset list such as "0-7" or "8-11,14".
cpu_count() {
  local n=0 part
  for part in ${1//,/ }; do
    if [[ $part == *-* ]]; then n=$((n + ${part#*-} - ${part%-*} + 1)); else n=$((n + 1)); fi
  done
  echo "$n"
}
if [[ -n $CLIENT_CPUS ]]; then
  LOADGEN_THREADS=(--threads "$(cpu_count "$CLIENT_CPUS")")
else
  LOADGEN_THREADS=()
fi
SERVER_PROCS=$(if [[ -n $SERVER_CPUS ]]; then cpu_count "$SERVER_CPUS"; else nproc; fi)

# The cluster secret: the coordinator, the worker(s) and talon-loadgen (--addr) all read
# it from the environment; the membership poll signs with it (scripts/talon_cluster.py).
# A secret file would take precedence over the variable in the binaries: drop it.
if [[ -z ${TALON_CLUSTER_SECRET:-} ]]; then
  TALON_CLUSTER_SECRET=$(python3 scripts/talon_cluster.py new-secret) || die "could not make a cluster secret"
fi
export TALON_CLUSTER_SECRET
unset TALON_CLUSTER_SECRET_FILE

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
conns_max=$(tr ',' '\n' <<<"$CONNS" | sort -n | tail -1)
(( $(ulimit -n) > conns_max + 256 )) || die "open-file limit $(ulimit -n) is too low for $conns_max connections"

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits for a ready file written by process $2.
wait_ready() {
  local file=$1 pid=$2 what=$3 i
  for ((i = 0; i < 300; i++)); do
    [[ -s $file ]] && return 0
    kill -0 "$pid" 2>/dev/null || die "$what exited during start-up; its log: $(tail -5 "$TMP/$what.log")"
    sleep 0.1
  done
  die "$what did not become ready in 30 s"
}

# The value of a string field in a one-level JSON file (the ready files).
json_field() { sed -n "s/^ *\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -1; }

block_bytes=$(bytes "$BLOCK_SIZE")
object_bytes=$((block_bytes * BLOCKS))

log "host: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The origin: one generated object, deterministic content.
$BIN/talon-origin-stub --generate "bench/block.bin=$object_bytes" \
  --s3-listen 127.0.0.1:0 --azure-listen off --admin-listen off \
  --ready-file "$TMP/origin.json" >"$TMP/origin.log" 2>&1 &
PIDS+=($!)
wait_ready "$TMP/origin.json" "$!" origin
S3=$(json_field "$TMP/origin.json" s3)
log "origin stub at $S3 serving bench/block.bin ($object_bytes bytes)"

# The coordinator each worker registers with, as in a deployment (the load generator
# still talks to the worker directly, as a cache client would once it has located it).
$BIN/talon-coordinator --listen 127.0.0.1:0 --ready-file "$TMP/coordinator.json" \
  --block-size "$BLOCK_SIZE" --page-size 1MiB >"$TMP/coordinator.log" 2>&1 &
PIDS+=($!)
wait_ready "$TMP/coordinator.json" "$!" coordinator
COORDINATOR=$(sed -n 's/.*"url": *"\([^"]*\)".*/\1/p' "$TMP/coordinator.json")
log "coordinator at $COORDINATOR"

# Waits until the coordinator lists worker $1 as a member.
wait_member() {
  local id=$1 i auth
  for ((i = 0; i < 300; i++)); do
    auth=$(python3 scripts/talon_cluster.py sign GET "/v1/members/$id") || die "could not sign the membership request"
    curl -sf -H "x-talon-auth: $auth" "$COORDINATOR/v1/members/$id" >/dev/null && return 0
    sleep 0.1
  done
  die "worker $id never joined the coordinator's membership"
}

# One worker per data plane, each with its own cache folder.
declare -A WORKER_ADDR WORKER_PID
for plane in ${PLANES//,/ }; do
  [[ -n ${PLANE_ENV[$plane]+x} ]] || die "unknown data plane '$plane' (known: ${!PLANE_ENV[*]})"
  "${SERVER_ON[@]}" env ${PLANE_ENV[$plane]} TALON_LOG=warn $BIN/talon-worker \
    --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --cache-dir "$TMP/cache-$plane" --capacity 1GiB --page-size 1MiB \
    --s3-endpoint "$S3" --ready-file "$TMP/worker-$plane.json" \
    --coordinator "$COORDINATOR" --id "loadtest-${plane//+/-}" \
    >"$TMP/worker-$plane.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_ready "$TMP/worker-$plane.json" "$pid" "worker-$plane"
  WORKER_ADDR[$plane]=$(json_field "$TMP/worker-$plane.json" addr)
  serving=$(json_field "$TMP/worker-$plane.json" data_plane)
  [[ $serving == "${plane%%+*}" ]] || die "the $plane worker serves on '$serving' (see $TMP/worker-$plane.log): refusing to label its rows $plane"
  WORKER_PID[$plane]=$pid
  wait_member "loadtest-${plane//+/-}"
  # Warm: read the blocks end to end once so every point measures the hit path.
  $LOADGEN --addr "${WORKER_ADDR[$plane]}" --object s3/bench/block.bin \
    --block-size "$BLOCK_SIZE" --blocks "$BLOCKS" --range-size "$RANGE_SIZE" \
    --prefetch --conns 1 --duration 1 --warmup 0 --quiet >"$TMP/warm-$plane.txt" 2>&1 \
    || die "warming the $plane worker failed: $(cat "$TMP/warm-$plane.txt")"
  log "worker ($plane data plane) at ${WORKER_ADDR[$plane]}, pid $pid, warmed"
done

# nginx: the same bytes from a file, sendfile on, one worker process per core.
NGINX_URL=
if [[ $NGINX == 1 ]]; then
  NGINX_BIN=${NGINX_BIN:-$(command -v nginx || true)}
  [[ -z $NGINX_BIN && -x /usr/sbin/nginx ]] && NGINX_BIN=/usr/sbin/nginx
  if [[ -z $NGINX_BIN ]] && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing nginx (apt-get)"
    (apt-get update -qq && (apt-get install -y -qq nginx-light || apt-get install -y -qq nginx)) >"$TMP/apt.log" 2>&1 \
      || log "apt-get failed: $(tail -3 "$TMP/apt.log")"
    NGINX_BIN=$(command -v nginx || true)
    [[ -z $NGINX_BIN && -x /usr/sbin/nginx ]] && NGINX_BIN=/usr/sbin/nginx
  fi
  command -v curl >/dev/null || die "curl is needed to copy the object for nginx (or set NGINX=0)"
  if [[ -z $NGINX_BIN ]]; then
    log "nginx is not installed and could not be installed: skipping the nginx rows (NGINX=0 to silence)"
  else
    mkdir -p "$TMP/www/bench" "$TMP/nginx"
    curl -sf -o "$TMP/www/bench/block.bin" "$S3/bench/block.bin" || die "could not copy the object from the origin"
    [[ $(stat -c %s "$TMP/www/bench/block.bin") == "$object_bytes" ]] || die "the copied object has the wrong size"
    chmod 755 "$TMP" "$TMP/www" "$TMP/www/bench"
    chmod 644 "$TMP/www/bench/block.bin"
    for attempt in 1 2 3 4 5; do
      port=$((20000 + RANDOM % 30000))
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
      cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes $SERVER_PROCS;
worker_rlimit_nofile 65536;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  sendfile on;
  keepalive_timeout 300s;
  keepalive_requests 100000000;
  client_body_temp_path $TMP/nginx/body;
  proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/fastcgi;
  uwsgi_temp_path $TMP/nginx/uwsgi;
  scgi_temp_path $TMP/nginx/scgi;
  server {
    listen 127.0.0.1:$port backlog=4096;
    root $TMP/www;
    location / { }
  }
}
EOF
      "${SERVER_ON[@]}" "$NGINX_BIN" -e "$TMP/nginx/error.log" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -g 'daemon off;' \
        >"$TMP/nginx.log" 2>&1 &
      NGINX_PID=$!
      PIDS+=("$NGINX_PID")
      for ((i = 0; i < 50; i++)); do
        curl -sf -o /dev/null -r 0-0 "http://127.0.0.1:$port/bench/block.bin" && break
        kill -0 "$NGINX_PID" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$NGINX_PID" 2>/dev/null; then
        NGINX_URL="http://127.0.0.1:$port/bench/block.bin"
        break
      fi
      log "nginx did not start on port $port: $(tail -2 "$TMP/nginx/error.log" 2>/dev/null)"
    done
    [[ -n $NGINX_URL ]] || die "nginx would not start"
    log "nginx $("$NGINX_BIN" -v 2>&1 | sed 's/.*nginx\///') at $NGINX_URL, master pid $NGINX_PID, $SERVER_PROCS workers"
  fi
fi

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
failed=0
common=(--block-size "$BLOCK_SIZE" --blocks "$BLOCKS" --range-size "$RANGE_SIZE"
  --duration "$SECONDS_PER" --warmup "$WARMUP" --json --quiet)
# RATE=N: a constant offered load of N requests/s per point (all connections
# together) instead of a closed loop, so p99 compares at equal load.
if [[ -n ${RATE:-} ]]; then
  common+=(--rate "$RATE")
fi
point() { # label, then talon-loadgen flags
  local label=$1
  shift
  log "$label: $*"
  if ! "${CLIENT_ON[@]}" $LOADGEN --label "$label" "${LOADGEN_THREADS[@]}" "${common[@]}" "$@" >>"$OUT" 2>"$TMP/point.err"; then
    failed=1
    log "FAILED: $(tail -1 "$TMP/point.err")"
  fi
}
for conns in ${CONNS//,/ }; do
  for plane in ${PLANES//,/ }; do
    for depth in ${DEPTHS//,/ }; do
      point "talon-worker/$plane" --addr "${WORKER_ADDR[$plane]}" --object s3/bench/block.bin \
        --conns "$conns" --depth "$depth" --server-pid "${WORKER_PID[$plane]}"
    done
  done
  if [[ -n $NGINX_URL ]]; then
    point "nginx (sendfile)" --http "$NGINX_URL" \
      --conns "$conns" --depth 1 --server-pid "$NGINX_PID" --server-children
  fi
done

echo
echo "## Data-plane load test: $RANGE_SIZE ranges, ${SECONDS_PER} s measured after ${WARMUP} s warmup, loopback"
echo
echo "Host: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r); $(if [[ -n $SERVER_CPUS$CLIENT_CPUS ]]; then echo "servers on CPUs ${SERVER_CPUS:-any}, client on ${CLIENT_CPUS:-any}"; else echo "client and servers share it"; fi)."
echo
$LOADGEN --summarize "$OUT"
echo
echo "Depth = requests in flight per connection (pipelined on the wire protocol; nginx is"
echo "HTTP/1.1 without pipelining, so always 1). Server CPU is user / kernel seconds in the"
echo "window (nginx: master and workers). JSON Lines: $OUT"
exit $failed
