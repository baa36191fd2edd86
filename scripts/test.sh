#!/usr/bin/env bash
# Runs every Talon test on a fresh machine: the Rust workspace (unit, property,
# conformance and integration tests; the origin client's conformance suite also against
# moto's S3 server and Azurite, installed here), then the SDK acceptance suite, which drives a
# real origin-stub process and real Talon deployments (talon up, a multi-process cluster)
# with unmodified boto3, aws CLI, azure-storage-blob, rclone and the JavaScript SDKs
# (@aws-sdk/client-s3 with lib-storage, @azure/storage-blob).
# Python packages go into a venv under target/ (pinned in tests/sdk/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Installs a Debian package where this is a root shell with apt-get, else says what to
# install and fails.
apt_install() {
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "$1"
  else
    echo "$1 is required: apt-get install $1" >&2
    exit 1
  fi
}

# Binaries first: integration tests and the SDK suite start them as real processes.
step "build the binaries"
cargo build --workspace --bins

VENV=target/sdk-venv
if [ ! -x "$VENV/bin/python" ]; then
  step "create the Python venv at $VENV"
  if ! python3 -m venv "$VENV"; then
    apt_install python3-venv
    python3 -m venv "$VENV"
  fi
fi
step "install the SDKs and moto's S3 server (pinned)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/sdk/requirements.txt

# From npm, into tests/sdk/js/node_modules, exactly as tests/sdk/js/package-lock.json
# pins them: the JavaScript SDKs the SDK suite drives and Azurite, the Azure Storage
# emulator (an Azure origin nobody here wrote). Reinstalled only when the lock changes.
JS_DIR=tests/sdk/js
JS_STAMP="$JS_DIR/node_modules/.talon-lock-sha256"
JS_LOCK_SHA=$(sha256sum "$JS_DIR/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$JS_STAMP" 2>/dev/null)" != "$JS_LOCK_SHA" ]; then
  step "npm ci in $JS_DIR (the JavaScript SDKs and Azurite, pinned)"
  command -v npm >/dev/null || apt_install npm
  npm ci --prefix "$JS_DIR" --no-audit --no-fund --loglevel=error
  echo "$JS_LOCK_SHA" > "$JS_STAMP"
fi
# The origin conformance suite runs against moto and Azurite; here they must be there.
export TALON_REQUIRE_INDEPENDENT_ORIGINS=1

# The data-plane conformance suite (talon-testkit's tests and the worker's) runs on
# both planes: first everything on the default (io_uring where the probe passes), then
# the data-plane suites again with the Tokio plane forced. Each run checks that every
# worker it starts serves on the plane it names (TALON_TEST_EXPECT_DATA_PLANE). The first
# run reads the workers over TCP; the second through their local sockets (the
# co-located fast path, TALON_TEST_LOCAL_SOCKETS=1), which the Tokio plane's code serves.
# etcd from Debian: testkit/tests/etcd_membership.rs and etcd_warm.rs start a real three-member cluster
# on loopback for the coordinators' shared membership and warm jobs.
step "etcd (Debian's etcd-server) for the shared-membership suite"
command -v etcd >/dev/null || apt_install etcd-server
# openssl makes the CA and certificates of the TLS-to-etcd test.
command -v openssl >/dev/null || apt_install openssl
# Headless Chromium renders the coordinator's status page (coordinator/tests/status_page.rs).
step "chromium (Debian's) for the status page test"
command -v chromium >/dev/null || apt_install chromium

step "cargo test --workspace (data plane: the default, reads over TCP)"
TALON_TEST_EXPECT_DATA_PLANE=default cargo test --workspace

step "the data-plane suites again on the Tokio plane, reads through the local sockets"
TALON_WORKER_FORCE_TOKIO_DATA_PLANE=1 TALON_TEST_EXPECT_DATA_PLANE=tokio TALON_TEST_LOCAL_SOCKETS=1 \
  cargo test -p talon-testkit -p talon-worker -p talon-cache-client

# The fail-open promise under faults, bounded (docs/reliability.md): SIGKILL and SIGSTOP
# of workers, an origin failing 30% of its requests, a slow origin, and an object
# overwritten at the origin every 1.5 s, under readers of both fronts; a wrong byte, a
# stuck request or an error the origin did not cause fails it. A first-byte deadline of
# 1 s, so the 3 s hangs and the slow origin also exercise it.
step "talon-chaos, 40 s of kills, hangs, origin faults and overwrites (debug binaries)"
TALON_GATEWAY_WORKER_FIRST_BYTE_MS=1000 ./target/debug/talon-chaos --seconds 40 --hang-ms 3000 \
  --faults kill,hang,origin,origin-slow --origin-fault-ms 3000 --overwrite-ms 1500 \
  --out target/chaos-ci.jsonl

# A short soak (docs/reliability.md): 60 s of mixed reads of both fronts, one worker
# restarted in the middle; every byte checked, and every process's memory and open
# descriptors must not grow from the warm-up to the end.
step "talon-chaos --soak, 60 s, one worker restarted (debug binaries)"
./target/debug/talon-chaos --soak --seconds 60 --faults kill --every-ms 30000 \
  --out target/chaos-soak-ci.jsonl

# Requests, not only bytes (docs/BENCHMARKS.md, the dataset bench): a small generated
# dataset read cold, warm and after T through both fronts and straight from the stub;
# every byte checked, and --check fails the step unless Talon's arm sent at most one
# origin request per cold object, none in the warm epoch inside T, and answered no 503.
step "talon-dataset-bench --check, 500 objects, both fronts (debug binaries)"
./target/debug/talon-dataset-bench --objects 500 --connections 16 --max-staleness-ms 15000 \
  --check --out target/dataset-ci.jsonl

step "rclone (the gateway suite drives the Debian package)"
command -v rclone >/dev/null || apt_install rclone

step "SDK acceptance suite (tests/sdk)"
rm -rf target/compat
"$VENV/bin/python" -m pytest tests/sdk -q -p no:cacheprovider

# docs/architecture.md names files, functions and crate links that exist.
step "docs/architecture.md against the tree (scripts/check_architecture.py)"
python3 scripts/check_architecture.py

step "protocol knowledge in protocols: no x-amz-/x-ms- literal outside it (scripts/check_protocol_literals.py)"
python3 scripts/check_protocol_literals.py

step "the command lines of the README and docs/ against --help (scripts/check_doc_commands.py)"
python3 scripts/check_doc_commands.py

# docs/gateway.md's compatibility table is what the gateway suite just served.
step "the compatibility table against this run (scripts/compat_table.py)"
python3 scripts/compat_table.py --check

# ceph/s3-tests, unmodified, from the shared folder beside the repository (a clone does
# not carry it): the read and listing selection against `talon up`, every failure named
# in scripts/s3_tests.py's KNOWN_FAILURES with its reason.
S3_TESTS="${TALON_S3_TESTS:-../shared/s3-tests}"
if [ -f "$S3_TESTS/s3tests/functional/test_s3.py" ]; then
  step "ceph/s3-tests against talon up ($S3_TESTS)"
  python3 scripts/s3_tests.py --suite "$S3_TESTS" --check --json-out target/s3-tests.json
  # In front of a second S3 server nobody here wrote: s3s-fs (installed under target/ by
  # the script). The selection runs against s3s-fs alone first; what fails there is the
  # origin's own, and --check holds Talon to what s3s-fs passes alone.
  step "ceph/s3-tests against talon up over s3s-fs, and against s3s-fs alone"
  python3 scripts/s3_tests.py --suite "$S3_TESTS" --origin s3s-fs --check --json-out target/s3-tests-s3s-fs.json
else
  step "ceph/s3-tests skipped: no suite at $S3_TESTS (set TALON_S3_TESTS)"
fi

# The alert rules, their unit tests, and the dashboard's queries, by Prometheus's own
# promtool (that the queries name exported metrics is gateway/tests/dashboards.rs).
step "monitoring: promtool on deploy/prometheus and deploy/grafana"
command -v promtool >/dev/null || apt_install prometheus
./scripts/check_monitoring.sh

# The Helm chart (lint, render, the rendered manifests against Kubernetes' schemas), the
# systemd units (systemd-analyze verify) and the Dockerfile (hadolint).
step "deployment: scripts/check_deploy.sh"
./scripts/check_deploy.sh

# The container image, built from deploy/docker/Dockerfile with buildah (no Docker engine
# runs here) and driven with podman: boto3 and the Azure SDK against `talon up` in it,
# its HEALTHCHECK and a clean stop (docs/operations.md, "The container image").
step "the container image: scripts/image_check.sh (buildah, podman)"
./scripts/image_check.sh

step "all tests passed"
