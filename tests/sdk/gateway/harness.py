"""Start and stop the processes behind a Talon gateway for the gateway SDK suite.

Two deployments:

* :func:`start_talon_up` — ``talon up`` (one process: origin stub over a data folder,
  coordinator, workers, gateway); endpoints come from its ``--ready-file``.
* :func:`start_cluster` — separate processes: ``talon origin`` (authenticated,
  generated objects), ``talon coordinator``, three ``talon worker``s and two
  ``talon gateway``s (one serving each front from its own protocol's origin, one serving
  each front from the *other* protocol's origin). The gateway has no ready file, so its
  ports are picked here and the test waits until they accept connections.

Every process writes its output to a log file; a process that dies, hangs on SIGTERM or
exits badly fails the run with the tail of that log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import pathlib
import signal
import secrets
import socket
import subprocess
import time

import pytest
import requests

import generated

from conftest import _GENERATE_ARGS, AZURE_ACCOUNT, AZURE_KEY, GENERATED, REGION, wait_until

REPO = pathlib.Path(__file__).resolve().parents[3]
TARGET = REPO / "target" / "debug"

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0

# Client identities (what SDKs sign with) differ from the origin's identity (what the
# gateway and the workers sign with): the gateway must re-sign, never forward.
CLIENT_S3 = ("AKIATALONGWCLIENT001", "talon-gateway-client-secret")
ORIGIN_S3 = ("AKIATALONORIGIN00001", "talon-origin-only-secret")
# The Azure client key is the emulator's well-known key (what `talon up` requires); the
# cluster's origin has a key of its own. `talon up` without --s3-credentials requires
# the well-known development identity DEV_S3.
DEV_S3 = ("talon", "talon")
CLIENT_AZURE_KEY = AZURE_KEY
ORIGIN_AZURE_KEY = "b3JpZ2luLW9ubHkta2V5LW9yaWdpbi1vbmx5LWtleS1vcmlnaW4tb25seS1rZXktb3JpZ2luLW9ubHkh"

MiB = 1 << 20
BLOCK_SIZE = "1MiB"
PAGE_SIZE = "64KiB"

# `talon up` creates demo/random-64MiB.bin (generated, seed 0) in a new data folder.
UP_GENERATED = {"big": ("demo", "random-64MiB.bin", 64 * MiB, 0)}
CLUSTER_GENERATED = {
    "big": GENERATED["m24"],
    "small": GENERATED["small"],
    "odd": GENERATED["odd"],
    "empty": GENERATED["empty"],
    "huge": GENERATED["huge"],
}


def binary(name: str) -> pathlib.Path:
    path = TARGET / name
    if not path.is_file():
        pytest.fail(f"{path} not found: run `cargo build --workspace --bins` first", pytrace=False)
    return path


def part(name: str) -> list:
    """The command that runs one part: ``talon gateway``, ``talon worker``, ..."""
    return [binary("talon"), name]


# The cluster secret of the multi-process cluster (coordinator, workers, gateways):
# random per test session, passed in the environment, never on a command line.
CLUSTER_SECRET = secrets.token_hex(32)


def clean_env(**extra) -> dict:
    """The caller's environment without AWS_/AZURE_/TALON_ settings, plus the cluster
    secret and ``extra`` (a name given as None is left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "TALON_"))}
    env["TALON_CLUSTER_SECRET"] = CLUSTER_SECRET
    env.setdefault("RUST_BACKTRACE", "1")
    env.setdefault("RUST_LOG", "info")
    env.setdefault("NO_COLOR", "1")  # plain logs in failure reports
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ processes


@dataclasses.dataclass
class Proc:
    name: str
    argv: list
    popen: subprocess.Popen
    log: pathlib.Path
    # A server nobody here wrote (moto, Azurite): stopped without judging how it exits.
    ours: bool = True

    def tail(self, limit: int = 20000) -> str:
        try:
            return self.log.read_text(errors="replace")[-limit:]
        except OSError as exc:
            return f"<cannot read {self.log}: {exc}>"

    def fail(self, why: str):
        pytest.fail(f"{self.name}: {why}\nargv={self.argv}\n--- {self.name} output ---\n{self.tail()}", pytrace=False)

    def check_alive(self) -> None:
        rc = self.popen.poll()
        if rc is not None:
            self.fail(f"died (exit status {rc})")


LIVE: list = []  # every Proc started and not yet stopped


def spawn(name: str, argv: list, workdir: pathlib.Path, env: dict) -> Proc:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    out = open(log, "ab")
    try:
        popen = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
    finally:
        out.close()
    proc = Proc(name=name, argv=[str(a) for a in argv], popen=popen, log=log)
    LIVE.append(proc)
    return proc


def wait_for(proc: Proc, predicate, what: str, timeout: float = READY_TIMEOUT_S):
    """Poll ``predicate`` until truthy; fail with the process's log if it exits or the deadline passes."""

    def check():
        if proc.popen.poll() is not None:
            return "exited"
        return predicate()

    try:
        value = wait_until(check, timeout, what=f"{proc.name}: {what}")
    except TimeoutError:
        stop(proc, check=False)
        proc.fail(f"no {what} within {timeout}s")
    if value == "exited":
        LIVE.remove(proc)
        proc.fail(f"exited during startup with status {proc.popen.returncode}")
    return value


def read_json(path: pathlib.Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def stop(proc: Proc, check: bool = True) -> None:
    """SIGTERM, wait; with ``check``, fail if it had died, hung or exited badly."""
    if proc in LIVE:
        LIVE.remove(proc)
    rc = proc.popen.poll()
    if rc is not None:
        if check:
            proc.fail(f"had already exited (status {rc}) before teardown")
        return
    proc.popen.send_signal(signal.SIGTERM)
    try:
        rc = proc.popen.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.popen.kill()
        proc.popen.wait()
        if check:
            proc.fail(f"ignored SIGTERM for {STOP_TIMEOUT_S}s")
        return
    if check and rc not in (0, -signal.SIGTERM):
        proc.fail(f"exited with status {rc} after SIGTERM")


def stop_all(procs: list) -> None:
    """Stop in reverse start order; report the first failure after stopping everything."""
    errors = []
    for proc in reversed(procs):
        try:
            stop(proc, check=proc.ours)
        except BaseException as exc:  # pytest.fail raises a BaseException subclass
            errors.append(exc)
    if errors:
        raise errors[0]


# ------------------------------------------------------------------ fronts


@dataclasses.dataclass
class Front:
    """One gateway's endpoints, shaped like conftest's ``Stub`` so its S3/Azure helpers take it."""

    name: str
    s3: str
    blob_endpoint: str  # the Azure account URL
    admin: str  # the gateway's /metrics
    origin_admin: str  # the origin stub's /metrics
    data_dir: pathlib.Path  # the origin's data folder
    s3_credentials: list  # [(access_key, secret_key)]; empty: any credentials are accepted
    azure_key: str | None  # None: anonymous Azure access
    generated: dict  # name -> (bucket, key, size, seed) served by the origin
    procs: list  # processes of this deployment (for logs on failure)
    azure_account: str = AZURE_ACCOUNT
    region: str = REGION
    # name -> ETag of a generated object the origin stores as uploaded (moto, Azurite);
    # the stub's are computed (generated.generated_etag).
    seeded_etags: dict = dataclasses.field(default_factory=dict)
    # What serves the objects: "stub" (the origin stub), "moto" (S3) or "azurite" (Azure).
    origin_kind: str = "stub"

    @property
    def keeps_acls(self) -> bool:
        """Whether canned ACLs are kept here (``talon up`` gives its gateway an ACL file;
        the stub and the cluster's gateway keep none and answer ACL writes 501)."""
        return self.name.startswith("up-")

    @property
    def max_header_bytes(self) -> int:
        """The header section a request may have: the stub takes S3's 8 KiB, a gateway
        16 KiB (its default ``Limits::max_header_bytes``)."""
        return 8 * 1024 if self.name == "stub" else 16 * 1024

    @property
    def s3_multipart_etags(self) -> bool:
        """Whether the S3 front's ETags are S3's: a single PUT's the MD5 of its bytes, a
        multipart upload's ``<md5>-<parts>``. Not over an Azure origin, whose ETags are
        the blob's (docs/gateway.md)."""
        return self.origin_kind != "azurite"

    @property
    def default_content_type(self) -> str:
        """The content type an object written without one reads back with (moto's is S3's)."""
        return "binary/octet-stream" if self.origin_kind == "moto" else "application/octet-stream"

    def generated_etag(self, name: str) -> str:
        """The ETag a reader sees for ``generated[name]`` at this deployment's origin."""
        if name in self.seeded_etags:
            return self.seeded_etags[name]
        b, k, size, seed = self.generated[name]
        return generated.generated_etag(b, k, size, seed)

    @property
    def authenticated(self) -> bool:
        return bool(self.s3_credentials)

    @property
    def access_key(self) -> str:
        return self.s3_credentials[0][0] if self.s3_credentials else "AKIAANYCLIENTKEY0001"

    @property
    def secret_key(self) -> str:
        return self.s3_credentials[0][1] if self.s3_credentials else "any-client-secret"

    def connection_string(self, key: str | None = None) -> str:
        return (
            "DefaultEndpointsProtocol=http;"
            f"AccountName={self.azure_account};"
            f"AccountKey={key or self.azure_key or CLIENT_AZURE_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def logs(self, limit: int = 4000) -> str:
        return "\n".join(f"--- {p.name} output (last {limit} chars) ---\n{p.tail(limit)}" for p in self.procs)


# ------------------------------------------------------------------ talon up


def start_talon_up(name: str, workdir: pathlib.Path, *, auth: bool, workers: int = 2,
                   anonymous: str | None = None, extra: list | None = None, env: dict | None = None) -> Front:
    """``talon up``: with ``auth``, the suite's own client identity; without, the
    well-known development identity. ``anonymous`` is passed as ``--anonymous``."""
    data_dir = workdir / "data"  # must not exist: `talon up` creates it with the sample
    ready = workdir / "ready.json"
    argv = [
        binary("talon"), "up",
        "--s3-port", "0", "--azure-port", "0", "--admin-port", "0", "--coordinator-port", "0", "--status-port", "0",
        "--data-dir", data_dir, "--ready-file", ready,
        "--workers", str(workers), "--block-size", BLOCK_SIZE, "--page-size", PAGE_SIZE,
        "--capacity", "256MiB",
    ]
    if auth:
        argv += ["--s3-credentials", f"{CLIENT_S3[0]}:{CLIENT_S3[1]}"]
    if anonymous:
        argv += ["--anonymous", anonymous]
    argv += extra or []
    proc = spawn(f"talon-up-{name}", argv, workdir, clean_env(**(env or {})))
    info = wait_for(proc, lambda: read_json(ready), f"ready file {ready}")
    # With --origin there is no local origin, and no origin_admin.
    local_origin = "--origin" not in [str(a) for a in argv]
    for field in ("s3", "azure", "admin", "azure_account", "coordinator") + (("origin_admin",) if local_origin else ()):
        assert field in info, f"talon up ready file lacks {field!r}: {info}"
    assert info["azure"].endswith("/" + info["azure_account"]), info
    return Front(
        name=f"up-{name}",
        s3=info["s3"],
        blob_endpoint=info["azure"],
        admin=info["admin"],
        origin_admin=info.get("origin_admin", ""),
        data_dir=data_dir,
        s3_credentials=[CLIENT_S3] if auth else [DEV_S3],
        azure_key=None if anonymous else CLIENT_AZURE_KEY,
        generated=dict(UP_GENERATED),
        procs=[proc],
        azure_account=info["azure_account"],
    )


# ------------------------------------------------- talon up over origins nobody here wrote

MOTO_SERVER = REPO / "target" / "sdk-venv" / "bin" / "moto_server"
AZURITE_BLOB = REPO / "tests" / "sdk" / "js" / "node_modules" / ".bin" / "azurite-blob"
# Any credentials moto accepts; Azurite's is the emulator's published account and key.
MOTO_S3 = ("AKIAMOTOORIGIN000001", "moto-origin-secret")
AZURITE_KEY = AZURE_KEY


def start_independent_origin(kind: str, workdir: pathlib.Path) -> tuple[Proc, str]:
    """moto's S3 server or Azurite's Blob service on a free loopback port: the process and
    its endpoint (Azurite's account URL)."""
    port = free_port()
    if kind == "moto":
        if not MOTO_SERVER.is_file():
            pytest.fail(f"{MOTO_SERVER} not found: scripts/test.sh installs moto[server]", pytrace=False)
        argv = [MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)]
        endpoint = f"http://127.0.0.1:{port}"
    else:
        if not AZURITE_BLOB.is_file():
            pytest.fail(f"{AZURITE_BLOB} not found: scripts/test.sh installs Azurite", pytrace=False)
        argv = [AZURITE_BLOB, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location",
                workdir / "azurite", "--silent", "--skipApiVersionCheck"]
        endpoint = f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}"
    proc = spawn(kind, argv, workdir, clean_env())
    wait_for(proc, lambda: accepts(port), f"{kind} accepting on {port}")
    return proc, endpoint


def start_talon_up_over(kind: str, workdir: pathlib.Path) -> Front:
    """``talon up --origin`` in front of moto (S3) or Azurite (Azure): both fronts over that
    one origin, one of them across protocols. The origin is seeded first with what
    ``talon up``'s own origin serves (``UP_GENERATED``), so the same tests read it."""
    origin_proc, endpoint = start_independent_origin(kind, workdir)
    bucket, key, size, seed = UP_GENERATED["big"]
    body = generated.generated_bytes(bucket, key, seed, 0, size)
    if kind == "moto":
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=MOTO_S3[0],
                          aws_secret_access_key=MOTO_S3[1], config=Config(s3={"addressing_style": "path"}))
        s3.create_bucket(Bucket=bucket)
        etag = s3.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
        origin = ["--origin", f"s3+http://{endpoint.removeprefix('http://')}"]
        env = {"AWS_ACCESS_KEY_ID": MOTO_S3[0], "AWS_SECRET_ACCESS_KEY": MOTO_S3[1], "AWS_REGION": REGION}
    else:
        from azure.storage.blob import BlobServiceClient

        az = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};")
        az.create_container(bucket)
        etag = az.get_blob_client(bucket, key).upload_blob(body)["etag"]
        origin = ["--origin", f"az+http://{endpoint.removeprefix('http://')}"]
        env = {"AZURE_STORAGE_KEY": AZURITE_KEY}
    front = start_talon_up(kind, workdir, auth=True, extra=origin, env=env)
    front.name = f"up-over-{kind}"
    front.seeded_etags = {"big": etag}
    front.origin_kind = kind
    origin_proc.ours = False
    front.procs.append(origin_proc)
    return front


# ------------------------------------------------------------------ cluster


@dataclasses.dataclass
class Cluster:
    main: Front  # S3 front over the S3 origin, Azure front over the Azure origin
    cross: Front  # S3 front over the Azure origin, Azure front over the S3 origin
    origin_s3: str
    origin_azure: str  # account URL
    coordinator: str
    procs: list


def coordinator_auth(method: str, path: str, body: bytes = b"", role: str = "reader",
                     secret: str | None = None) -> dict:
    """The ``x-talon-auth`` header of a coordinator API request, computed here from the
    documented formula (talon_core::cluster_auth), not by Talon's code."""
    key = hmac.new((secret or CLUSTER_SECRET).encode(), b"talon cluster key v1", hashlib.sha256).digest()
    ts = int(time.time())
    text = f"talon api v1\n{role}\n{method}\n{path}\n{ts}\n{hashlib.sha256(body).hexdigest()}"
    sig = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    return {"x-talon-auth": f"{role} {ts} {sig}"}


def _live_members(coordinator: str) -> list:
    try:
        resp = requests.get(coordinator + "/v1/members", headers=coordinator_auth("GET", "/v1/members"),
                            timeout=5)
    except requests.RequestException:
        return []
    if resp.status_code != 200:
        return []
    return [m for m in resp.json().get("members", []) if m.get("state") == "live"]


def origin_url(protocol: str, endpoint: str) -> str:
    """`http://HOST:PORT[/ACCOUNT]` as an origin URL: `s3+http://…` or `az+http://…`."""
    assert endpoint.startswith("http://"), endpoint
    return f"{protocol}+{endpoint}"


def start_gateway(name: str, workdir: pathlib.Path, *, origin_s3: str, origin_azure: str, coordinator: str,
                  identities: pathlib.Path, extra: list) -> tuple:
    s3_port, az_port, admin_port = free_port(), free_port(), free_port()
    argv = [
        *part("gateway"),
        "--s3-listen", f"127.0.0.1:{s3_port}",
        "--azure-listen", f"127.0.0.1:{az_port}",
        "--admin-listen", f"127.0.0.1:{admin_port}",
        # The origins as URLs (the one spelling every binary takes).
        "--origin", origin_url("s3", origin_s3),
        "--origin", origin_url("az", origin_azure),
        "--coordinator", coordinator,
        "--block-size", BLOCK_SIZE,
        "--identities", identities,
        *extra,
    ]
    env = clean_env(AWS_ACCESS_KEY_ID=ORIGIN_S3[0], AWS_SECRET_ACCESS_KEY=ORIGIN_S3[1],
                    AZURE_STORAGE_KEY=ORIGIN_AZURE_KEY)
    proc = spawn(name, argv, workdir, env)
    for port in (s3_port, az_port, admin_port):
        wait_for(proc, lambda p=port: accepts(p), f"a listener on port {port}")
    return proc, s3_port, az_port, admin_port


def start_cluster(workdir: pathlib.Path) -> Cluster:
    procs = []
    try:
        # The origin: authenticated with the origin identity only.
        stub_dir = workdir / "origin"
        data_dir = stub_dir / "data"
        data_dir.mkdir(parents=True)
        ready = stub_dir / "ready.json"
        argv = [
            *part("origin"), "--data-dir", data_dir,
            "--s3-listen", "127.0.0.1:0", "--azure-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
            "--ready-file", ready, "--region", REGION, "--azure-account", AZURE_ACCOUNT,
            "--s3-credentials", f"{ORIGIN_S3[0]}:{ORIGIN_S3[1]}", "--azure-key", ORIGIN_AZURE_KEY,
        ]
        for spec in _GENERATE_ARGS:
            argv += ["--generate", spec]
        stub = spawn("origin-stub", argv, stub_dir, clean_env())
        procs.append(stub)
        info = wait_for(stub, lambda: read_json(ready), f"ready file {ready}")
        origin_s3 = info["s3"]
        origin_azure = f"{info['azure']}/{info['azure_account']}"

        coord_dir = workdir / "coordinator"
        ready = coord_dir / "ready.json"
        coord = spawn("coordinator", [
            *part("coordinator"), "--listen", "127.0.0.1:0", "--ready-file", ready,
            "--heartbeat-interval-ms", "200", "--expiry-ms", "1500",
            "--block-size", BLOCK_SIZE, "--page-size", PAGE_SIZE,
        ], coord_dir, clean_env())
        procs.append(coord)
        coordinator = wait_for(coord, lambda: (read_json(ready) or {}).get("url"), f"ready file {ready}")

        worker_env = clean_env(AWS_ACCESS_KEY_ID=ORIGIN_S3[0], AWS_SECRET_ACCESS_KEY=ORIGIN_S3[1],
                               AZURE_STORAGE_KEY=ORIGIN_AZURE_KEY)
        for n in range(3):
            wdir = workdir / f"worker-{n}"
            ready = wdir / "ready.json"
            w = spawn(f"worker-w{n}", [
                *part("worker"), "--listen", "127.0.0.1:0", "--admin-listen", "off",
                "--cache-dir", wdir / "cache", "--capacity", "256MiB", "--page-size", PAGE_SIZE,
                "--coordinator", coordinator, "--id", f"w{n}", "--heartbeat-interval-ms", "200",
                "--origin", f"{origin_url('s3', origin_s3)},{origin_url('az', origin_azure)}",
                "--ready-file", ready,
            ], wdir, worker_env)
            procs.append(w)
            wait_for(w, lambda r=ready: read_json(r), f"ready file {ready}")
        wait_for(coord, lambda: len(_live_members(coordinator)) == 3, "3 live members in /v1/members")

        identities = workdir / "identities.json"
        identities.write_text(json.dumps({
            "s3": [{"access_key": CLIENT_S3[0], "secret_key": CLIENT_S3[1]}],
            "azure": {"account": AZURE_ACCOUNT, "key": CLIENT_AZURE_KEY},
            "anonymous": False,
        }))
        fronts = {}
        # The main gateway reads the workers over TCP, as a gateway on another host would;
        # the cross gateway takes their local sockets (the co-located fast path), as
        # `talon up` does: the suite covers both ways a gateway reaches a worker.
        for name, extra in (("gateway-main", ["--local-reads", "false"]),
                            ("gateway-cross", ["--s3-front-origin", "azure", "--azure-front-origin", "s3"])):
            gw, s3_port, az_port, admin_port = start_gateway(
                name, workdir / name, origin_s3=origin_s3, origin_azure=origin_azure, coordinator=coordinator,
                identities=identities, extra=extra)
            procs.append(gw)
            fronts[name] = Front(
                name=f"cluster-{name}",
                s3=f"http://127.0.0.1:{s3_port}",
                blob_endpoint=f"http://127.0.0.1:{az_port}/{AZURE_ACCOUNT}",
                admin=f"http://127.0.0.1:{admin_port}",
                origin_admin=info["admin"],
                data_dir=data_dir,
                s3_credentials=[CLIENT_S3],
                azure_key=CLIENT_AZURE_KEY,
                generated=dict(CLUSTER_GENERATED),
                procs=procs,
            )
        return Cluster(main=fronts["gateway-main"], cross=fronts["gateway-cross"], origin_s3=origin_s3,
                       origin_azure=origin_azure, coordinator=coordinator, procs=procs)
    except BaseException:
        for p in reversed(procs):
            stop(p, check=False)
        raise

