# Talon's everyday commands. Install just with `cargo install --locked just`;
# nothing here is needed for the README's two quick-start commands.

# List the recipes.
default:
    @just --list

# Run every test (the README's test command).
test:
    ./scripts/test.sh

# Lints exactly as CI runs them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# The security suites (docs/security.md): authentication, names, the cluster, bounded
# resources; then the SDK cases (needs `./scripts/test.sh` once for the venv).
security:
    cargo build --workspace --bins
    cargo test -p talon-gateway --test verified_uploads --test access_policy --test names --test bounded
    cargo test -p talon-testkit --test cluster_auth --test hostile_frames
    cargo test -p talon-coordinator --test http_api
    cargo test -p talon-listener
    cargo test -p talon-protocols
    target/sdk-venv/bin/python -m pytest -q -p no:cacheprovider tests/sdk/gateway/test_gw_defaults.py tests/sdk/gateway/test_gw_auth_fidelity.py tests/sdk/gateway/test_gw_errors.py tests/sdk/gateway/test_gw_tls.py

# Format the workspace.
fmt:
    cargo fmt --all

# Run the local deployment (`talon up`); pass flags after, e.g. `just run --data-dir /data`.
run *ARGS:
    cargo run --release -- up {{ARGS}}

# What CI runs.
ci:
    ./.ci/run

# ceph/s3-tests (the shared folder's copy, unmodified) against `talon up`; a table and
# JSON (bench/results/s3-tests.json). Flags: --suite PATH, --select EXPR, --origin moto, --check.
s3-tests *ARGS:
    cargo build --bins
    python3 scripts/s3_tests.py {{ARGS}}

# The alert rules, their unit tests and the dashboard's queries through promtool
# (docs/operations.md; `apt-get install prometheus` for promtool).
monitoring-check:
    ./scripts/check_monitoring.sh

# The Helm chart, the rendered manifests, the systemd units and the Dockerfile through
# their validators (docs/operations.md); `--render` rewrites deploy/kubernetes/talon.yaml.
deploy-check *ARGS:
    ./scripts/check_deploy.sh {{ARGS}}

# The multi-host suites in full: coordinators on a real three-member etcd, and a cluster
# across network namespaces (root), as CI runs them.
cluster-suites:
    cargo build --workspace --bins
    cargo test -p talon-testkit --test etcd_membership --test etcd_warm
    cargo test -p talon-bench --test hosts

# ---- measurement (docs/BENCHMARKS.md) ----

# Criterion benches into bench/results/latest.json; `just bench -p talon-core` scopes.
bench *ARGS:
    python3 scripts/bench.py run {{ARGS}}

# Promote bench/results/latest.json to bench/baselines/NAME.json (commit it).
bench-save NAME:
    python3 scripts/bench.py save {{NAME}}

# Run the benches and diff against bench/baselines/main.json; exit 1 on a regression.
# Flags: --soft, --threshold PCT, -p CRATE, --baseline NAME, --no-run, --smoke.
bench-check *ARGS:
    python3 scripts/bench.py check {{ARGS}}

# Re-render docs/assets/bench/*.svg and the generated tables from bench/data/*.json;
# `--check` only compares (exit 1 if stale). Needs uv (`pip install uv`).
bench-charts *ARGS:
    uv run scripts/bench_charts.py {{ARGS}}

# Memory footprint: bytes per cached block and page (counting allocator), per open
# connection and idle RSS of each process; writes bench/data/memory.json.
# Flags: --conns K, --blocks N, --rounds R, --no-build, --output PATH.
memory-footprint *ARGS:
    python3 scripts/memory_footprint.py {{ARGS}}

# The data-plane load test: worker(s) and nginx under talon-loadgen; CONNS=, DEPTHS=, SECONDS_PER= tune it.
dataplane-loadtest:
    ./scripts/dataplane_loadtest.sh

# The ring-scaling sweep and open-loop tables on a many-core host (8 CPUs or more): servers
# and load generator on CPU sets of their own (docs/data-plane.md).
many-core-sweep:
    ./scripts/many_core_sweep.sh

# The 1,024-connection open loop on a many-core host, one server per run, with each
# server's per-thread CPU (scripts/thread_cpu.py) and, given PERF_BIN, perf profiles.
many-core-open-loop:
    ./scripts/many_core_open_loop.sh

# Layer 2 with io_uring's registered buffers and SEND_ZC beside sendfile and a copy, at equal
# load, one loopback connection (docs/data-plane.md); `just layer2-zerocopy SECONDS ROUNDS`.
layer2-zerocopy SECONDS="3" ROUNDS="6":
    cargo run --release -p talon-worker --example layer2_zerocopy -- {{SECONDS}} {{ROUNDS}}

# Gateway bench: the HTTP runtime around controlled worker/origin delays, then a slow
# consumer with the gateway's RSS sampled; bench/results/gateway-bench.jsonl. `--help` for flags.
gateway-bench *ARGS:
    cargo build --release --workspace --bins
    ./target/release/talon-gateway-bench {{ARGS}}

# S3 × Azure × cache/origin through real deployments, plus a control arm and peers: nginx's
# slice cache with sendfile on and off, and Varnish (installed with apt-get when running as
# root; each skipped if it cannot be).
gateway-proxy-bench *ARGS:
    cargo build --release --workspace --bins
    command -v nginx >/dev/null 2>&1 || [ "$(id -u)" != 0 ] || apt-get install -y nginx >/dev/null 2>&1 || (apt-get update >/dev/null 2>&1 && apt-get install -y nginx >/dev/null 2>&1) || echo "nginx could not be installed: the nginx arms will be skipped"
    command -v varnishd >/dev/null 2>&1 || [ -x /usr/sbin/varnishd ] || [ "$(id -u)" != 0 ] || apt-get install -y varnish >/dev/null 2>&1 || (apt-get update >/dev/null 2>&1 && apt-get install -y varnish >/dev/null 2>&1) || echo "varnish could not be installed: the varnish arm will be skipped"
    # The Debian packages start their own services; the bench runs its own instances.
    [ "$(id -u)" != 0 ] || { systemctl stop varnish nginx 2>/dev/null || true; }
    ./target/release/talon-gateway-proxy-bench {{ARGS}}

# A dataset of many small objects (default one million, 4-256 KiB) read epoch after epoch
# (cold, warm, after T), through Talon and straight to the throttled origin, order-swapped:
# objects a second, p50/p99, origin requests per object, client 503s, RSS;
# bench/results/dataset-bench.jsonl. `--objects 20000 --max-staleness-ms 60000`, `--help`.
dataset-bench *ARGS:
    cargo build --release --workspace --bins
    ./target/release/talon-dataset-bench {{ARGS}}

# Workers killed and frozen, the origin failing or slow, an object overwritten at the
# origin, under SHA-verified readers of both fronts (route cache): no wrong byte, no stuck
# request, no error the origin did not cause; bench/results/chaos.jsonl. `--faults kill
# --seconds 330` for the 100 kills of docs/reliability.md, `--faults
# kill,hang,origin,origin-slow --overwrite-ms 1500` for everything, `--help` for the rest.
chaos *ARGS:
    cargo build --release --workspace --bins
    ./target/release/talon-chaos {{ARGS}}

# Where the gateway's cache route spends its CPU: per-request CPU (user, kernel), context
# switches, syscalls, mallocs and perf's top symbols of the gateway and the worker;
# bench/results/profile/. `--range-size 64KiB --conns 64`, `--help`.
profile-gateway *ARGS:
    cargo build --release --workspace --bins
    python3 scripts/profile_gateway.py {{ARGS}}

# A/B under load: the worker and gateway at REV (A) against the working tree (B),
# alternated with the order flipped every round; `--load gateway [--route origin]`, `--rounds N`, `--help`.
bench-ab REV *ARGS:
    python3 scripts/bench_ab.py {{REV}} {{ARGS}}
