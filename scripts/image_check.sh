#!/usr/bin/env bash
# Builds the container image from deploy/docker/Dockerfile with buildah (no Docker daemon:
# none runs on the CI machine) and drives it with podman: the image's configuration, its
# uid, `talon up` over a mounted folder answering boto3 and the Azure SDK (bytes compared
# by SHA-256, a write landing in the folder as the image's user), the image's HEALTHCHECK,
# and a clean stop on SIGTERM. Run by scripts/test.sh; alone: scripts/image_check.sh.
#
# What it cannot do here, and does instead (docs/operations.md, "The container image"):
# - no registry can be reached, so `debian:bookworm-slim` is made from a debootstrap of
#   Debian bookworm (minbase, trimmed like the official slim image) under that name;
# - no Rust image can be pulled for the Dockerfile's build stage, so an image named
#   `rust:1.95-slim-bookworm` stands in whose `cargo build` copies the binary this
#   checkout built (TALON_BIN, default target/debug/talon; give target/release/talon
#   for an image to ship) and whose `strip` is Debian's. The Dockerfile itself is used
#   unchanged.
#
# Environment: TALON_BIN, TAG (localhost/talon:0.1.0), IMAGE_DIR (target/image: the
# tools' storage and the cached base image), PYTHON (a Python with boto3 and
# azure-storage-blob; default target/sdk-venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
W=${IMAGE_DIR:-$REPO/target/image}
TALON_BIN=${TALON_BIN:-$REPO/target/debug/talon}
TAG=${TAG:-localhost/talon:0.1.0}
PYTHON=${PYTHON:-$REPO/target/sdk-venv/bin/python}
DOCKERFILE=deploy/docker/Dockerfile
start=$SECONDS
say() { printf '[image %3ss] %s\n' "$((SECONDS - start))" "$*"; }
fail() { printf 'image check FAILED: %s\n' "$*" >&2; exit 1; }

[ -x "$TALON_BIN" ] || fail "$TALON_BIN not found: build it first (cargo build --bin talon)"
[ "$(id -u)" = 0 ] || fail "buildah and podman need root here (no rootless user namespaces set up)"
mkdir -p "$W"

# 1. The tools, from Debian's packages.
if ! command -v buildah >/dev/null || ! command -v podman >/dev/null || ! command -v runc >/dev/null \
  || ! command -v debootstrap >/dev/null; then
  say "installing buildah, podman, runc, debootstrap"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    buildah podman runc debootstrap uidmap ca-certificates >/dev/null
fi

# 2. Settings this machine needs. Root lacks CAP_SYS_RESOURCE, so a container cannot be
# given more open files than the hard limit here, nor more processes than podman's own
# (podman's defaults, 1048576 files, fail: "setrlimit RLIMIT_NOFILE: Operation not
# permitted"); crun refuses the hybrid cgroup hierarchy ("cgroups in hybrid mode not
# supported"), runc with cgroupfs works; no systemd runs the health-check timer.
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
nproc=$(ulimit -u); { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
driver=overlay # where the kernel mounts overlayfs here; else vfs (slower, larger)
mkdir -p "$W/probe/lower" "$W/probe/upper" "$W/probe/work" "$W/probe/merged"
if mount -t overlay overlay -o "lowerdir=$W/probe/lower,upperdir=$W/probe/upper,workdir=$W/probe/work" \
  "$W/probe/merged" 2>/dev/null; then
  umount "$W/probe/merged"
else
  driver=vfs
fi
rm -rf "$W/probe"
cat >"$W/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
cat >"$W/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$W/storage-$driver"
runroot = "$W/run-$driver"
EOF
export CONTAINERS_CONF=$W/containers.conf CONTAINERS_STORAGE_CONF=$W/storage.conf
bud=(buildah bud --pull=never --isolation chroot --layers=false)

# 3. debian:bookworm-slim from Debian's own packages (kept in IMAGE_DIR between runs).
if ! buildah inspect --type image docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  if [ ! -f "$W/base/rootfs.tar" ]; then
    say "debootstrap bookworm (minbase) from $mirror"
    rm -rf "$W/rootfs" && mkdir -p "$W/base"
    debootstrap --variant=minbase bookworm "$W/rootfs" "$mirror" >"$W/debootstrap.log" 2>&1 \
      || { tail -20 "$W/debootstrap.log" >&2; fail "debootstrap"; }
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s-security bookworm-security main\n' \
      "$mirror" "$mirror" "$mirror" >"$W/rootfs/etc/apt/sources.list"
    # As the official slim image: apt keeps no package caches or translations, and the
    # documentation is left out.
    printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
      'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";' 'Acquire::Languages "none";' \
      >"$W/rootfs/etc/apt/apt.conf.d/docker-clean"
    find "$W/rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$W/rootfs/usr/share/man/"* "$W/rootfs/usr/share/info/"* "$W/rootfs/usr/share/locale/"* \
      "$W/rootfs/var/lib/apt/lists/"* "$W/rootfs/var/cache/apt/"*.bin "$W/rootfs/var/cache/apt/archives/"*.deb
    tar --numeric-owner -C "$W/rootfs" -cf "$W/base/rootfs.tar" . && rm -rf "$W/rootfs"
  fi
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$W/base/Containerfile"
  say "base image debian:bookworm-slim ($driver storage)"
  "${bud[@]}" -t docker.io/library/debian:bookworm-slim "$W/base" >"$W/base.log" 2>&1 \
    || { tail -20 "$W/base.log" >&2; fail "building the base image"; }
fi

# 4. The stand-in for the build stage's Rust image.
rust_image=$(sed -n 's/^FROM \([^ ]*\) AS build.*/\1/p' "$DOCKERFILE")
[ -n "$rust_image" ] || fail "$DOCKERFILE has no 'FROM … AS build' stage"
mkdir -p "$W/builder" "$W/prebuilt"
cp "$TALON_BIN" "$W/prebuilt/talon"
if ! buildah inspect --type image "docker.io/library/$rust_image" >/dev/null 2>&1; then
  cat >"$W/builder/cargo" <<'EOF'
#!/bin/sh
# Stands in for cargo in the Dockerfile's build stage: copies the binary built outside,
# mounted at /prebuilt/talon, where `cargo build [--release]` would have put it.
set -eu
case " $* " in *" build "*) ;; *) echo "stand-in cargo: only 'build'" >&2; exit 1 ;; esac
profile=debug; case " $* " in *" --release "*) profile=release ;; esac
mkdir -p "target/$profile" && cp /prebuilt/talon "target/$profile/talon"
EOF
  chmod +x "$W/builder/cargo"
  printf '%s\n' 'FROM docker.io/library/debian:bookworm-slim' \
    'RUN apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/lib/apt/lists/*' \
    'COPY cargo /usr/local/cargo/bin/cargo' \
    'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    >"$W/builder/Containerfile"
  say "stand-in build image $rust_image"
  "${bud[@]}" -t "docker.io/library/$rust_image" "$W/builder" >"$W/builder.log" 2>&1 \
    || { tail -20 "$W/builder.log" >&2; fail "building the stand-in build image"; }
fi

# 5. The repository's Dockerfile, unchanged (HEALTHCHECK needs the docker format).
say "buildah bud -f $DOCKERFILE -t $TAG"
"${bud[@]}" --format docker -v "$W/prebuilt:/prebuilt:ro" -f "$DOCKERFILE" -t "$TAG" "$REPO" \
  >"$W/build.log" 2>&1 || { tail -30 "$W/build.log" >&2; fail "buildah bud $DOCKERFILE"; }

# 6. Drive it.
config=$(podman image inspect "$TAG" \
  --format '{{.Config.User}}|{{json .Config.Entrypoint}}|{{.Config.WorkingDir}}|{{if .HealthCheck}}healthcheck{{end}}')
[ "$config" = '10001:10001|["/usr/local/bin/talon"]|/var/cache/talon|healthcheck' ] \
  || fail "image configuration: $config"
[ "$(podman run --rm --no-healthcheck --entrypoint id "$TAG" -u)" = 10001 ] || fail "the image does not run as 10001"
data=$W/data
rm -rf "$data" && mkdir -p "$data/demo" && echo "hello from the talon image" >"$data/demo/hello.txt"
chown -R 10001:10001 "$data"
# Five free ports below the kernel's ephemeral range, so that no port 0 the workers bind
# meanwhile can take one (the health check needs the admin port before the start).
read -r s3 azure admin coordinator status < <(python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
picked = []
while len(picked) < 5:
    port = random.randrange(max(1024, low - 12000), low)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    if port not in picked:
        picked.append(port)
print(*picked)
')
name=talon-image-check
podman rm -f -t 2 "$name" >/dev/null 2>&1 || true
cleanup() { podman rm -f -t 2 "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
podman run -d --name "$name" --network host -e TALON_HEALTH_PORT="$admin" -v "$data:/data" "$TAG" \
  up --data-dir /data --s3-port "$s3" --azure-port "$azure" --admin-port "$admin" \
  --coordinator-port "$coordinator" --status-port "$status" >/dev/null 2>"$W/run.err" || true
for _ in $(seq 1 120); do
  curl -fsS -o /dev/null "http://127.0.0.1:$admin/readyz" 2>/dev/null && break
  sleep 0.25
done
curl -fsS -o /dev/null "http://127.0.0.1:$admin/readyz" || { podman logs "$name" 2>&1 | tail -20 >&2; fail "talon up in the image never became ready"; }
say "talon up in the image is ready; driving it with boto3 and the Azure SDK"
S3="http://127.0.0.1:$s3" AZURE="http://127.0.0.1:$azure/devstoreaccount1" DATA="$data" "$PYTHON" - <<'EOF' \
  || { podman logs "$name" 2>&1 | tail -20 >&2; fail "the SDKs against the image"; }
import hashlib, os, pathlib
import boto3
from azure.storage.blob import BlobServiceClient
s3 = boto3.client("s3", endpoint_url=os.environ["S3"], aws_access_key_id="talon",
                  aws_secret_access_key="talon", region_name="us-east-1")
sha = lambda b: hashlib.sha256(b).hexdigest()
assert s3.get_object(Bucket="demo", Key="hello.txt")["Body"].read() == b"hello from the talon image\n"
body = os.urandom(3 << 20)
s3.put_object(Bucket="demo", Key="written/by-boto3.bin", Body=body)
for _ in range(2):  # a fill, then a hit
    assert sha(s3.get_object(Bucket="demo", Key="written/by-boto3.bin")["Body"].read()) == sha(body)
on_disk = pathlib.Path(os.environ["DATA"], "demo/written/by-boto3.bin")
assert sha(on_disk.read_bytes()) == sha(body) and on_disk.stat().st_uid == 10001, on_disk.stat()
keys = [o["Key"] for o in s3.list_objects_v2(Bucket="demo")["Contents"]]
assert "written/by-boto3.bin" in keys, keys
azure = BlobServiceClient.from_connection_string(
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey="
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    f"BlobEndpoint={os.environ['AZURE']};")
blob = azure.get_blob_client("demo", "written/by-boto3.bin").download_blob().readall()
assert sha(blob) == sha(body)
print("boto3 and the Azure SDK: read, write, list, bytes equal")
EOF
podman healthcheck run "$name" >/dev/null || fail "the image's HEALTHCHECK failed"
# (podman says it cannot remove the health-check timer without systemd: harmless.)
podman stop -t 15 "$name" >/dev/null 2>>"$W/run.err"
code=$(podman inspect "$name" --format '{{.State.ExitCode}}')
[ "$code" = 0 ] || { podman logs "$name" 2>&1 | tail -20 >&2; fail "talon up exited $code on SIGTERM"; }
size=$(podman image inspect "$TAG" --format '{{.Size}}')
say "image $TAG ($((size >> 20)) MiB, $driver storage): configuration, uid 10001, SDKs, HEALTHCHECK, stop 0: ok"
