"""The aws CLI (v1, ``python -m awscli`` from the venv) through the gateway's S3 front."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import generated
from conftest import MiB, s3_client, sha256, unique


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(5000 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def tree(root) -> dict:
    """{relative path: sha256} of every file under ``root``."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def make_aws(gw, home, s3_config: str = "", read_timeout: int = 30):
    """Run ``python -m awscli --endpoint-url GATEWAY ARGS``; path-style addressing from a config file."""
    home.mkdir()
    config = home / "config"
    config.write_text(f"[default]\nregion = {gw.region}\ns3 =\n    addressing_style = path\n{s3_config}")
    creds = home / "credentials"
    creds.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=gw.access_key,
        AWS_SECRET_ACCESS_KEY=gw.secret_key,
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE=str(creds),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="1",
        AWS_PAGER="",
        HOME=str(home),
    )

    def run(*args, check=True):
        cmd = [sys.executable, "-m", "awscli", "--endpoint-url", gw.s3, "--cli-read-timeout", str(read_timeout),
               *map(str, args)]
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=180)
        if check and proc.returncode != 0:
            pytest.fail(
                f"aws {' '.join(map(str, args))} failed with {proc.returncode}\n"
                f"stdout: {proc.stdout.decode(errors='replace')}\nstderr: {proc.stderr.decode(errors='replace')}"
            )
        return proc

    return run


@pytest.fixture
def aws(gw, tmp_path):
    return make_aws(gw, tmp_path / "awscli-home")


def test_ls_cp_both_ways_and_get_object_range(aws, gw, gw_s3, gw_bucket, tmp_path):
    # cp up: one single-part file and one above the CLI's 8 MiB multipart threshold.
    small, big = payload(300_000, 1), payload(9 * MiB + 5, 2)
    (tmp_path / "small file.bin").write_bytes(small)
    (tmp_path / "big.bin").write_bytes(big)
    aws("s3", "cp", tmp_path / "small file.bin", f"s3://{gw_bucket}/cli/small file.bin")
    aws("s3", "cp", tmp_path / "big.bin", f"s3://{gw_bucket}/cli/big.bin")
    assert sha256(gw_s3.get_object(Bucket=gw_bucket, Key="cli/small file.bin")["Body"].read()) == sha256(small)
    if gw.s3_multipart_etags:
        assert gw_s3.head_object(Bucket=gw_bucket, Key="cli/big.bin")["ETag"].endswith('-2"')

    # ls: buckets, a prefix, recursive.
    out = aws("s3", "ls").stdout.decode()
    assert gw_bucket in [line.split()[-1] for line in out.splitlines() if line.strip()], out
    out = aws("s3", "ls", f"s3://{gw_bucket}/").stdout.decode()
    assert [line.strip() for line in out.splitlines() if line.strip()] == ["PRE cli/"], out
    out = aws("s3", "ls", "--recursive", f"s3://{gw_bucket}/").stdout.decode()
    rows = {line.split(maxsplit=3)[3]: int(line.split(maxsplit=3)[2]) for line in out.splitlines() if line.strip()}
    assert rows == {"cli/small file.bin": len(small), "cli/big.bin": len(big)}, out

    # cp down, through the cache (the big one as parallel ranged GETs).
    aws("s3", "cp", f"s3://{gw_bucket}/cli/small file.bin", tmp_path / "small-down.bin")
    aws("s3", "cp", f"s3://{gw_bucket}/cli/big.bin", tmp_path / "big-down.bin")
    assert sha256((tmp_path / "small-down.bin").read_bytes()) == sha256(small)
    assert sha256((tmp_path / "big-down.bin").read_bytes()) == sha256(big)

    # s3api get-object --range on the generated object.
    b, k, size, seed = gw.generated["big"]
    for first, last in ((0, 0), (1 * MiB - 7, 1 * MiB + 70000), (size - 1000, size - 1)):
        out = tmp_path / f"range-{first}.bin"
        meta = json.loads(aws("s3api", "get-object", "--bucket", b, "--key", k, "--range",
                              f"bytes={first}-{last}", out).stdout)
        assert meta["ContentRange"] == f"bytes {first}-{last}/{size}"
        assert meta["ContentLength"] == last - first + 1
        assert meta["ETag"] == gw.generated_etag("big")
        assert sha256(out.read_bytes()) == sha256(generated.generated_bytes(b, k, seed, first, last + 1))
    proc = aws("s3api", "get-object", "--bucket", gw_bucket, "--key", "missing", os.devnull, check=False)
    assert proc.returncode != 0 and b"NoSuchKey" in proc.stderr, proc.stderr


def test_head_and_cp_of_a_generated_object(aws, gw, tmp_path):
    """From the origin stub's own suite: `s3api head-object` and a whole `s3 cp` download of
    an object the origin generates, on every target."""
    b, k, size, seed = gw.generated["big"]
    meta = json.loads(aws("s3api", "head-object", "--bucket", b, "--key", k).stdout)
    assert meta["ContentLength"] == size and meta["ETag"] == gw.generated_etag("big")
    dest = tmp_path / "generated.bin"
    aws("s3", "cp", f"s3://{b}/{k}", dest)
    assert sha256(dest.read_bytes()) == sha256(generated.generated_bytes(b, k, seed, 0, size))


def test_sync_up_and_back_down(aws, gw_s3, tmp_path):
    bucket = unique("sync")
    gw_s3.create_bucket(Bucket=bucket)
    src = tmp_path / "src"
    files = {
        "a.txt": b"alpha\n",
        "dir/b.bin": payload(700_000, 3),
        "dir/sub dir/c d.bin": payload(2 * MiB + 1, 4),
        "plus+percent%/ü.txt": "ünïcødé\n".encode(),
    }
    for rel, data in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        # sync uploads a file newer than its object; S3 (and moto) keep whole seconds, so a
        # file written in the same second as its upload would look newer to the next sync.
        os.utime(p, (time.time() - 5, time.time() - 5))
    aws("s3", "sync", src, f"s3://{bucket}/tree")
    listed = {o["Key"]: o["Size"] for o in gw_s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {f"tree/{rel}": len(data) for rel, data in files.items()}
    # A second sync has nothing to do.
    out = aws("s3", "sync", src, f"s3://{bucket}/tree").stdout.decode()
    assert "upload:" not in out, out
    down = tmp_path / "down"
    aws("s3", "sync", f"s3://{bucket}/tree", down)
    assert tree(down) == tree(src)
    assert tree(down) == {rel: sha256(data) for rel, data in files.items()}


def test_sync_folder_with_empty_files(up, tmp_path):
    """One connection (max_concurrent_requests = 1), empty and non-empty files interleaved."""
    # A short read timeout: the failure mode is a response that never completes.
    aws = make_aws(up, tmp_path / "awscli-home", "    max_concurrent_requests = 1\n", read_timeout=2)
    s3 = s3_client(up)
    bucket = unique("sync0")
    s3.create_bucket(Bucket=bucket)
    src = tmp_path / "src"
    src.mkdir()
    files = {}
    for i in range(3):
        files[f"e{i}"] = b""
        files[f"f{i}"] = f"non-empty {i}\n".encode()
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    aws("s3", "sync", src, f"s3://{bucket}/")
    listed = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {rel: len(data) for rel, data in files.items()}
    down = tmp_path / "down"
    aws("s3", "sync", f"s3://{bucket}/", down)
    assert tree(down) == {rel: sha256(data) for rel, data in files.items()}
