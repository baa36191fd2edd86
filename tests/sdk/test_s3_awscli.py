"""The aws CLI (v1, ``python -m awscli``) against the stub's S3 API."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import generated
from conftest import GENERATED, MiB, generated_sha, sha256, unique


@pytest.fixture(scope="module")
def aws(stub, tmp_path_factory):
    """Run ``python -m awscli ARGS`` against the authenticated stub; returns stdout."""
    home = tmp_path_factory.mktemp("awscli-home")
    config = home / "config"
    config.write_text(f"[default]\nregion = {stub.region}\ns3 =\n    addressing_style = path\n")
    creds = home / "credentials"
    creds.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=stub.access_key,
        AWS_SECRET_ACCESS_KEY=stub.secret_key,
        AWS_DEFAULT_REGION=stub.region,
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE=str(creds),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="1",
        AWS_PAGER="",
        HOME=str(home),
    )

    def run(*args, check=True):
        cmd = [sys.executable, "-m", "awscli", "--endpoint-url", stub.s3, *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=180)
        if check and proc.returncode != 0:
            pytest.fail(
                f"aws {' '.join(args)} failed with {proc.returncode}\n"
                f"stdout: {proc.stdout.decode(errors='replace')}\nstderr: {proc.stderr.decode(errors='replace')}"
            )
        return proc

    return run


@pytest.fixture(scope="module")
def cli_bucket(s3):
    name = unique("cli")
    s3.create_bucket(Bucket=name)
    return name


def test_ls_buckets(aws, cli_bucket):
    out = aws("s3", "ls").stdout.decode()
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert cli_bucket in names and "gen" in names and "seeded" in names, out


def test_ls_prefix(aws):
    out = aws("s3", "ls", "s3://gen/big/").stdout.decode()
    rows = {line.split()[-1]: int(line.split()[-2]) for line in out.splitlines() if line.strip()}
    assert rows == {"24m.bin": GENERATED["m24"][2], "64m.bin": GENERATED["m64"][2]}, out
    out = aws("s3", "ls", "s3://gen/").stdout.decode()
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    assert "PRE big/" in lines and "PRE dir/" in lines, out
    out = aws("s3", "ls", "--recursive", "s3://seeded/").stdout.decode()
    assert sorted(line.split(maxsplit=3)[-1] for line in out.splitlines() if line.strip()) == [
        "hello.txt", "nested/deep/file.bin"
    ], out


def test_cp_upload_and_download(aws, s3, cli_bucket, tmp_path):
    body = np.random.default_rng(21).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    src = tmp_path / "up.bin"
    src.write_bytes(body)
    aws("s3", "cp", str(src), f"s3://{cli_bucket}/cli/up file.bin")
    assert sha256(s3.get_object(Bucket=cli_bucket, Key="cli/up file.bin")["Body"].read()) == sha256(body)
    dest = tmp_path / "down.bin"
    aws("s3", "cp", f"s3://{cli_bucket}/cli/up file.bin", str(dest))
    assert sha256(dest.read_bytes()) == sha256(body)


def test_cp_multipart_upload_and_download(aws, s3, cli_bucket, tmp_path):
    """Above the CLI's default 8 MiB threshold: multipart upload, ranged download."""
    body = np.random.default_rng(22).integers(0, 256, 18 * MiB, dtype=np.uint8).tobytes()
    src = tmp_path / "big.bin"
    src.write_bytes(body)
    aws("s3", "cp", str(src), f"s3://{cli_bucket}/cli/big.bin")
    head = s3.head_object(Bucket=cli_bucket, Key="cli/big.bin")
    assert head["ContentLength"] == len(body) and head["ETag"].endswith('-3"'), head["ETag"]
    dest = tmp_path / "big-down.bin"
    aws("s3", "cp", f"s3://{cli_bucket}/cli/big.bin", str(dest))
    assert sha256(dest.read_bytes()) == sha256(body)


def test_cp_download_generated(aws, tmp_path):
    dest = tmp_path / "24m.bin"
    aws("s3", "cp", "s3://gen/big/24m.bin", str(dest))
    assert sha256(dest.read_bytes()) == generated_sha("m24")


def test_s3api_get_object_range(aws, tmp_path):
    b, k, size, seed = GENERATED["m24"]
    for first, last in ((0, 0), (12345, 99999), (size - 1000, size - 1)):
        out = tmp_path / f"range-{first}.bin"
        proc = aws("s3api", "get-object", "--bucket", b, "--key", k, "--range", f"bytes={first}-{last}", str(out))
        meta = json.loads(proc.stdout)
        assert meta["ContentRange"] == f"bytes {first}-{last}/{size}"
        assert meta["ContentLength"] == last - first + 1
        assert meta["ETag"] == generated.generated_etag(b, k, size, seed)
        assert sha256(out.read_bytes()) == sha256(generated.generated_bytes(b, k, seed, first, last + 1))


def test_s3api_head_and_missing_key(aws, cli_bucket):
    meta = json.loads(aws("s3api", "head-object", "--bucket", "gen", "--key", "small.bin").stdout)
    assert meta["ContentLength"] == GENERATED["small"][2]
    proc = aws("s3api", "get-object", "--bucket", cli_bucket, "--key", "missing", os.devnull, check=False)
    assert proc.returncode != 0
    assert b"NoSuchKey" in proc.stderr, proc.stderr
