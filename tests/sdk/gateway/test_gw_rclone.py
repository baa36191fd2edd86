"""rclone (the Debian package) through the gateway: an S3 remote and an Azure Blob remote.

Remotes are configured purely through RCLONE_CONFIG_<NAME>_* environment variables.
The S3 remote is `provider = Other` with path-style addressing. rclone 1.60 (Debian 12)
builds Azure URLs as `https://<account>.<endpoint>`, so its `endpoint` option cannot name
an http://host:port/account URL; the Azure remote is given the gateway's account URL with
an account SAS (signed with the emulator key) as `sas_url` instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

from conftest import MiB, sha256, unique

RCLONE = shutil.which("rclone") or "/usr/bin/rclone"


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(7000 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def tree(root) -> dict:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


FILES = {
    "a.txt": b"alpha\n",
    "dir/b.bin": payload(700_000, 1),
    "dir/sub dir/c d.bin": payload(3 * MiB + 5, 2),
    "plus+percent%.txt": b"odd name\n",
    "ünïcødé.txt": "ünïcødé\n".encode(),
}


def write_tree(root, files=FILES):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.fixture
def rclone(gw, tmp_path):
    if not os.path.exists(RCLONE):
        pytest.fail("rclone is not installed (apt-get install rclone; scripts/test.sh does it)", pytrace=False)
    now = dt.datetime.now(dt.timezone.utc)
    sas = generate_account_sas(
        gw.azure_account, gw.azure_key, resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
        start=now - dt.timedelta(minutes=5), expiry=now + dt.timedelta(hours=1),
    )
    config = tmp_path / "rclone.conf"
    config.write_text("")
    # Nothing from the caller's AWS/Azure/rclone settings (AWS_CA_BUNDLE, for one, breaks rclone's S3 client).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "RCLONE_"))}
    env.update(
        HOME=str(tmp_path),
        RCLONE_CONFIG=str(config),
        RCLONE_CONFIG_GWS3_TYPE="s3",
        RCLONE_CONFIG_GWS3_PROVIDER="Other",
        RCLONE_CONFIG_GWS3_ENDPOINT=gw.s3,
        RCLONE_CONFIG_GWS3_REGION=gw.region,
        RCLONE_CONFIG_GWS3_FORCE_PATH_STYLE="true",
        RCLONE_CONFIG_GWS3_ACCESS_KEY_ID=gw.access_key,
        RCLONE_CONFIG_GWS3_SECRET_ACCESS_KEY=gw.secret_key,
        RCLONE_CONFIG_GWAZ_TYPE="azureblob",
        RCLONE_CONFIG_GWAZ_SAS_URL=f"{gw.blob_endpoint}?{sas}",
    )

    def run(*args, check=True):
        cmd = [RCLONE, "--retries", "1", "--low-level-retries", "1", "--contimeout", "10s", "--timeout", "30s",
               *map(str, args)]
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
        if check and proc.returncode != 0:
            pytest.fail(f"rclone {' '.join(map(str, args))} failed with {proc.returncode}\n"
                        f"stdout: {proc.stdout.decode(errors='replace')}\n"
                        f"stderr: {proc.stderr.decode(errors='replace')}")
        return proc

    return run


def ls(rclone, remote) -> dict:
    out = rclone("ls", remote).stdout.decode()
    rows = {}
    for line in out.splitlines():
        m = re.fullmatch(r"\s*(\d+) (.+)", line)
        assert m, line
        rows[m.group(2)] = int(m.group(1))
    return rows


def assert_check_matches(proc, n: int, hashed: bool = True):
    """`rclone check` found every file equal; with ``hashed``, by comparing MD5s (not just sizes)."""
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err
    assert "0 differences found" in err and f"{n} matching files" in err, err
    if hashed:
        assert "could not be checked" not in err, err


# ------------------------------------------------------------------ S3 remote


def test_rclone_s3_ls_copy_check(rclone, gw, gw_s3, tmp_path):
    bucket = unique("rcs3")
    gw_s3.create_bucket(Bucket=bucket)
    src = tmp_path / "src"
    write_tree(src)
    rclone("copy", src, f"gws3:{bucket}/up")
    assert ls(rclone, f"gws3:{bucket}") == {f"up/{rel}": len(data) for rel, data in FILES.items()}
    for rel, data in FILES.items():
        assert sha256(gw_s3.get_object(Bucket=bucket, Key=f"up/{rel}")["Body"].read()) == sha256(data), rel
    assert_check_matches(rclone("check", src, f"gws3:{bucket}/up", check=False), len(FILES))
    down = tmp_path / "down"
    rclone("copy", f"gws3:{bucket}/up", down)
    assert tree(down) == tree(src)
    # The generated object, through the cache.
    b, k, size, _ = gw.generated["big"]
    assert ls(rclone, f"gws3:{b}/{os.path.dirname(k)}".rstrip("/")).get(os.path.basename(k)) == size
    # A check that must find a difference.
    (src / "a.txt").write_bytes(b"changed\n")
    proc = rclone("check", src, f"gws3:{bucket}/up", check=False)
    assert proc.returncode != 0 and "1 differences found" in proc.stderr.decode(), proc.stderr


# ------------------------------------------------------------------ Azure remote


def test_rclone_azure_ls_copy_down_check(rclone, gw, gw_azure, gw_container, tmp_path):
    cc = gw_azure.get_container_client(gw_container)
    for rel, data in FILES.items():
        cc.upload_blob(f"pre/{rel}", data)
    assert gw_container in rclone("lsd", "gwaz:").stdout.decode()
    assert ls(rclone, f"gwaz:{gw_container}") == {f"pre/{rel}": len(data) for rel, data in FILES.items()}
    down = tmp_path / "down"
    rclone("copy", f"gwaz:{gw_container}/pre", down)
    assert tree(down) == {rel: sha256(data) for rel, data in FILES.items()}
    # Sizes only: the listing carries no Content-MD5 (see test_gw_azure.py::test_content_md5_of_put_blob).
    assert_check_matches(rclone("check", down, f"gwaz:{gw_container}/pre", check=False), len(FILES), hashed=False)
    # rclone check --download compares the bytes themselves, read through the cache.
    assert_check_matches(rclone("check", "--download", down, f"gwaz:{gw_container}/pre", check=False), len(FILES),
                         hashed=False)


def test_rclone_azure_copy_up_and_check(rclone, gw_azure, gw_container, tmp_path):
    src = tmp_path / "src"
    write_tree(src)
    rclone("copy", src, f"gwaz:{gw_container}/up")
    cc = gw_azure.get_container_client(gw_container)
    for rel, data in FILES.items():
        assert sha256(cc.download_blob(f"up/{rel}").readall()) == sha256(data), rel
    assert_check_matches(rclone("check", src, f"gwaz:{gw_container}/up", check=False), len(FILES), hashed=False)


@pytest.mark.parametrize("remote", ["gws3", "gwaz"])
def test_rclone_copy_single_file(rclone, gw_s3, gw_azure, tmp_path, remote):
    name = unique("rcone")
    if remote == "gws3":
        gw_s3.create_bucket(Bucket=name)
    else:
        gw_azure.create_container(name)
    src = tmp_path / "one.bin"
    src.write_bytes(payload(500_000, 3))
    rclone("copy", src, f"{remote}:{name}/dst/")
    down = tmp_path / "down"
    rclone("copy", f"{remote}:{name}/dst/one.bin", down)
    assert sha256((down / "one.bin").read_bytes()) == sha256(src.read_bytes())
