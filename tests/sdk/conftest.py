"""Fixtures that run a real origin stub process (``talon origin``) for the SDK suite.

Each stub runs in its own temporary data dir with every listener on port 0;
the fixture waits for the ``--ready-file`` JSON, yields a :class:`Stub`
describing the endpoints and credentials, and at teardown sends SIGTERM,
waits, and fails loudly (with the stub's stderr) if the process had died
or exits badly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import generated  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
TALON_BIN = REPO / "target" / "debug" / "talon"

# The well-known Azurite development key.
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURE_ACCOUNT = "devstoreaccount1"
REGION = "us-east-1"
S3_CREDENTIALS = [("AKIATALONSDKTEST0001", "talon-sdk-secret-one"), ("AKIATALONSDKTEST0002", "talon-sdk-secret-two")]

MiB = 1 << 20

# Generated objects served by every stub: (bucket, key, size, seed).
GENERATED = {
    "small": ("gen", "small.bin", 1000, 3),
    "odd": ("gen", "dir/odd size.bin", 123457, 0),
    "m24": ("gen", "big/24m.bin", 24 * MiB, 7),
    "m64": ("gen", "big/64m.bin", 64 * MiB, 0),
    "empty": ("gen", "empty.bin", 0, 0),
    "huge": ("gen", "huge.bin", 1 << 40, 5),  # 1 TiB, only ever read in ranges
}
# Spelled the way the CLI takes them, to exercise the SIZE suffixes.
_GENERATE_ARGS = [
    "gen/small.bin=1000,3",
    "gen/dir/odd size.bin=123457",
    "gen/big/24m.bin=24MiB,7",
    "gen/big/64m.bin=64MiB",
    "gen/empty.bin=0",
    "gen/huge.bin=1024GiB,5",
]

# Files written into the data dir before the stub starts.
SEEDED = {
    "hello.txt": b"hello from the data dir\n",
    "nested/deep/file.bin": bytes(range(256)) * 40,
}

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def unique(prefix: str) -> str:
    """A bucket/container name valid for both S3 and Azure."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclasses.dataclass
class Stub:
    name: str
    proc: subprocess.Popen
    data_dir: pathlib.Path
    stderr_path: pathlib.Path
    s3: str
    azure: str
    admin: str
    azure_account: str
    region: str
    s3_credentials: list  # [(access_key, secret_key)], empty when anonymous
    azure_key: str | None  # None when anonymous
    argv: list

    @property
    def authenticated(self) -> bool:
        return bool(self.s3_credentials)

    @property
    def access_key(self) -> str:
        return self.s3_credentials[0][0]

    @property
    def secret_key(self) -> str:
        return self.s3_credentials[0][1]

    @property
    def blob_endpoint(self) -> str:
        return f"{self.azure}/{self.azure_account}"

    def connection_string(self, key: str | None = None) -> str:
        return (
            "DefaultEndpointsProtocol=http;"
            f"AccountName={self.azure_account};"
            f"AccountKey={key or self.azure_key};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def stderr_tail(self, limit: int = 20000) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError as exc:
            return f"<cannot read stderr: {exc}>"
        return text[-limit:]

    def check_alive(self) -> None:
        rc = self.proc.poll()
        if rc is not None:
            pytest.fail(
                f"origin stub '{self.name}' died (exit status {rc}); argv={self.argv}\n"
                f"--- stub stderr ---\n{self.stderr_tail()}",
                pytrace=False,
            )


def stub_command() -> list:
    """How the suite starts an origin stub: ``talon origin``, or the binary that
    TALON_ORIGIN_STUB_BIN names (one that takes the stub's flags, such as the
    ``talon-origin-stub`` alias)."""
    override = os.environ.get("TALON_ORIGIN_STUB_BIN")
    path = pathlib.Path(override) if override else TALON_BIN
    if not path.is_file():
        pytest.fail(f"{path} not found: run `cargo build --workspace --bins` (or set TALON_ORIGIN_STUB_BIN)",
                    pytrace=False)
    return [str(path)] if override else [str(path), "origin"]


def start_stub(
    name: str,
    workdir: pathlib.Path,
    *,
    auth: bool,
    extra_args: list | None = None,
) -> Stub:
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    for rel, content in SEEDED.items():
        p = data_dir / "seeded" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
    ready_file = workdir / "ready.json"
    ready_file.unlink(missing_ok=True)  # a restart in the same workdir must not read a stale one
    stderr_path = workdir / "stderr.log"
    argv = [
        *stub_command(),
        "--data-dir", str(data_dir),
        "--s3-listen", "127.0.0.1:0",
        "--azure-listen", "127.0.0.1:0",
        "--admin-listen", "127.0.0.1:0",
        "--ready-file", str(ready_file),
        "--region", REGION,
        "--azure-account", AZURE_ACCOUNT,
    ]
    for spec in _GENERATE_ARGS:
        argv += ["--generate", spec]
    creds = list(S3_CREDENTIALS) if auth else []
    if auth:
        for ak, sk in creds:
            argv += ["--s3-credentials", f"{ak}:{sk}"]
        argv += ["--azure-key", AZURE_KEY]
    argv += extra_args or []

    # Keep the stub's environment free of TALON_STUB_* settings from the caller.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALON_STUB_")}
    env.setdefault("RUST_BACKTRACE", "1")
    stderr_file = open(stderr_path, "ab")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr_file, stderr=stderr_file, env=env)
    stderr_file.close()

    def ready():
        if proc.poll() is not None:
            return "exited"
        try:
            return json.loads(ready_file.read_text())
        except (OSError, ValueError):
            return None

    try:
        info = wait_until(ready, READY_TIMEOUT_S, what=f"ready file {ready_file}")
    except TimeoutError:
        proc.kill()
        proc.wait()
        pytest.fail(
            f"origin stub '{name}' did not write its ready file within {READY_TIMEOUT_S}s; argv={argv}\n"
            f"--- stub stderr ---\n{stderr_path.read_text(errors='replace')[-20000:]}",
            pytrace=False,
        )
    if info == "exited":
        pytest.fail(
            f"origin stub '{name}' exited during startup with status {proc.returncode}; argv={argv}\n"
            f"--- stub stderr ---\n{stderr_path.read_text(errors='replace')[-20000:]}",
            pytrace=False,
        )
    for field in ("s3", "azure", "admin", "azure_account"):
        assert field in info, f"ready file lacks {field!r}: {info}"
    for field in ("s3", "azure", "admin"):
        assert re.fullmatch(r"http://127\.0\.0\.1:[1-9][0-9]*", info[field]), f"ready file {field}={info[field]!r}"
    return Stub(
        name=name,
        proc=proc,
        data_dir=data_dir,
        stderr_path=stderr_path,
        s3=info["s3"],
        azure=info["azure"],
        admin=info["admin"],
        azure_account=info["azure_account"],
        region=REGION,
        s3_credentials=creds,
        azure_key=AZURE_KEY if auth else None,
        argv=argv,
    )


def stop_stub(stub: Stub) -> None:
    rc = stub.proc.poll()
    if rc is not None:
        pytest.fail(
            f"origin stub '{stub.name}' had already exited (status {rc}) before teardown\n"
            f"--- stub stderr ---\n{stub.stderr_tail()}",
            pytrace=False,
        )
    stub.proc.send_signal(signal.SIGTERM)
    try:
        rc = stub.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stub.proc.kill()
        stub.proc.wait()
        pytest.fail(
            f"origin stub '{stub.name}' ignored SIGTERM for {STOP_TIMEOUT_S}s\n"
            f"--- stub stderr ---\n{stub.stderr_tail()}",
            pytrace=False,
        )
    if rc not in (0, -signal.SIGTERM):
        pytest.fail(
            f"origin stub '{stub.name}' exited with status {rc} after SIGTERM\n"
            f"--- stub stderr ---\n{stub.stderr_tail()}",
            pytrace=False,
        )


_LIVE_STUBS: list = []


@pytest.fixture(scope="session", autouse=True)
def _isolated_client_env(tmp_path_factory) -> Iterator[None]:
    """Keep host AWS/Azure configuration from leaking into the SDKs."""
    root = tmp_path_factory.mktemp("client-env")
    empty = root / "empty-config"
    empty.write_text("")
    mp = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith(("AWS_", "AZURE_")):
            mp.delenv(name)
    mp.setenv("AWS_CONFIG_FILE", str(empty))
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        mp.delenv(proxy, raising=False)
    mp.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield
    mp.undo()


def _stub_fixture(name: str, tmp_path_factory, auth: bool, extra_args=None) -> Iterator[Stub]:
    stub = start_stub(name, tmp_path_factory.mktemp(f"stub-{name}"), auth=auth, extra_args=extra_args)
    _LIVE_STUBS.append(stub)
    try:
        yield stub
    finally:
        _LIVE_STUBS.remove(stub)
        stop_stub(stub)


@pytest.fixture(scope="session")
def stub(tmp_path_factory, _isolated_client_env) -> Iterator[Stub]:
    """Authenticated stub: S3 SigV4 credentials and an Azure account key."""
    yield from _stub_fixture("auth", tmp_path_factory, auth=True)


@pytest.fixture(scope="session")
def anon_stub(tmp_path_factory, _isolated_client_env) -> Iterator[Stub]:
    """Anonymous stub: no S3 credentials, no Azure key."""
    yield from _stub_fixture("anon", tmp_path_factory, auth=False)


@pytest.fixture(autouse=True)
def _stubs_still_alive() -> Iterator[None]:
    """After every test, fail it if a stub process has died meanwhile."""
    yield
    for s in list(_LIVE_STUBS):
        s.check_alive()


# ---------------------------------------------------------------- S3 helpers


def s3_client(stub: Stub, access_key=None, secret_key=None, unsigned=False, **config):
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    cfg = dict(
        s3={"addressing_style": "path"},
        signature_version=UNSIGNED if unsigned else "s3v4",
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=16,
    )
    cfg.update(config)
    if stub.authenticated and not unsigned:
        access_key = access_key or stub.access_key
        secret_key = secret_key or stub.secret_key
    session = boto3.session.Session(
        aws_access_key_id=access_key or "AKIAANONYMOUSDUMMY00",
        aws_secret_access_key=secret_key or "anonymous-dummy-secret",
        region_name=stub.region,
    )
    return session.client("s3", endpoint_url=stub.s3, config=Config(**cfg))


@pytest.fixture(scope="session")
def s3(stub):
    return s3_client(stub)


@pytest.fixture(scope="session")
def anon_s3(anon_stub):
    return s3_client(anon_stub)


@pytest.fixture
def bucket(s3) -> str:
    """A fresh bucket on the authenticated stub, created through S3."""
    name = unique("sdk")
    s3.create_bucket(Bucket=name)
    return name


def signed_request(stub: Stub, method: str, path: str, headers=None, body: bytes = b"", params=None,
                   access_key=None, secret_key=None):
    """A raw HTTP request signed with SigV4 (header auth) by botocore's signer.

    ``path`` must already be URI-encoded (e.g. ``/bucket/key``).
    """
    import requests
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = stub.s3 + path
    req = AWSRequest(method=method, url=url, headers=dict(headers or {}), data=body, params=params or {})
    creds = Credentials(access_key or stub.access_key, secret_key or stub.secret_key)
    S3SigV4Auth(creds, "s3", stub.region).add_auth(req)
    prepared = req.prepare()
    return requests.request(method, prepared.url, headers=dict(prepared.headers), data=body, timeout=60)


def parse_s3_error(body: bytes) -> dict:
    """Parse an S3 XML error body into {Code, Message, RequestId, ...}."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(body)
    assert root.tag == "Error", f"not an S3 <Error> document: {body[:500]!r}"
    return {child.tag: (child.text or "") for child in root}


def assert_s3_error(resp, status: int, code: str) -> dict:
    """Check a raw S3 error response: status, XML Code, x-amz-request-id == <RequestId>."""
    assert resp.status_code == status, f"expected {status} {code}, got {resp.status_code}: {resp.content[:500]!r}"
    err = parse_s3_error(resp.content)
    assert err.get("Code") == code, f"expected Code {code}, got {err}"
    assert resp.headers.get("x-amz-request-id"), f"no x-amz-request-id header: {dict(resp.headers)}"
    assert err.get("RequestId") == resp.headers["x-amz-request-id"], (
        f"<RequestId> {err.get('RequestId')!r} != x-amz-request-id {resp.headers['x-amz-request-id']!r}"
    )
    return err


def client_error(excinfo) -> tuple:
    """(status, code) of a botocore ClientError."""
    e = excinfo.value
    return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]


# ------------------------------------------------------------- Azure helpers


def blob_service(stub: Stub, **kwargs):
    from azure.storage.blob import BlobServiceClient

    kwargs.setdefault("retry_total", 0)
    kwargs.setdefault("connection_timeout", 10)
    kwargs.setdefault("read_timeout", 60)
    if stub.azure_key:
        return BlobServiceClient.from_connection_string(stub.connection_string(), **kwargs)
    return BlobServiceClient(account_url=stub.blob_endpoint, **kwargs)


@pytest.fixture(scope="session")
def azure(stub):
    return blob_service(stub)


@pytest.fixture(scope="session")
def anon_azure(anon_stub):
    return blob_service(anon_stub)


@pytest.fixture
def container(azure) -> str:
    """A fresh container on the authenticated stub, created through Azure."""
    name = unique("az")
    azure.create_container(name)
    return name


# --------------------------------------------------------- metrics helpers


def read_metrics(stub: Stub) -> dict:
    """Parse the Prometheus text at {admin}/metrics into {(name, frozenset(labels)): value}."""
    import requests

    resp = requests.get(stub.admin + "/metrics", timeout=30)
    assert resp.status_code == 200, resp.text
    out = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in resp.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        assert m, f"unparseable metrics line: {line!r}"
        labels = frozenset(label_re.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(metrics: dict, name: str, **labels) -> float:
    return metrics.get((name, frozenset(labels.items())), 0.0)


def generated_sha(which: str) -> str:
    b, k, size, seed = GENERATED[which]
    return generated.sha256_of_generated(b, k, size, seed)
