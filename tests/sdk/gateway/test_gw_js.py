"""The JavaScript SDKs drive the gateway: the AWS SDK for JavaScript v3 (client-s3 with
lib-storage) and @azure/storage-blob, from npm (tests/sdk/js/package.json), with their
defaults: uploads (S3: PutObject with its default CRC32 checksum and lib-storage's 5 MiB
parts, 4 in flight; Azure: a Put Blob and uploadStream's 8 MiB blocks), parallel ranged
downloads, and paginated listings. Each scenario is a script in tests/sdk/js/ that
prints a JSON report; what it uploaded and downloaded is checked here by SHA-256, and
through the other SDK family (boto3, azure-storage-blob).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from conftest import MiB, blob_service, sha256, unique

JS = pathlib.Path(__file__).resolve().parent.parent / "js"


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(9100 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def run_scenario(script: str, job: dict, tmp_path: pathlib.Path) -> dict:
    node = shutil.which("node")
    assert node, "node is required (Node 20)"
    assert (JS / "node_modules").is_dir(), "run scripts/test.sh once: it installs tests/sdk/js's packages"
    job_file = tmp_path / f"{script}.json"
    job_file.write_text(json.dumps(job))
    done = subprocess.run([node, str(JS / script), str(job_file)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stderr[-5000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def files(tmp_path: pathlib.Path, small: bytes, big: bytes) -> dict:
    (tmp_path / "small").write_bytes(small)
    (tmp_path / "big").write_bytes(big)
    return {"small": str(tmp_path / "small"), "big": str(tmp_path / "big"),
            "download": str(tmp_path / "big.down"), "smallDownload": str(tmp_path / "small.down")}


def test_aws_sdk_for_javascript_v3(gw, gw_s3, gw_bucket, tmp_path):
    small, big = payload(100_000, 1), payload(23 * MiB + 5, 2)
    job = files(tmp_path, small, big) | {
        "endpoint": gw.s3, "region": gw.region, "accessKey": gw.access_key, "secretKey": gw.secret_key,
        "bucket": gw_bucket,
    }
    report = run_scenario("s3_scenario.mjs", job, tmp_path)
    assert sha256((tmp_path / "big.down").read_bytes()) == sha256(big)
    assert sha256((tmp_path / "small.down").read_bytes()) == sha256(small)
    assert report["size"] == len(big) and report["headEtag"] == report["etags"]["big"]
    if gw.s3_multipart_etags:
        assert report["etags"]["big"].endswith('-5"'), "lib-storage's 5 MiB parts: 5 of them"
    assert report["small"] == {"contentType": "application/x-js", "metadata": {"who": "aws-sdk-js"},
                               "etag": report["etags"]["small"]}
    assert report["listed"] == [["js/dir/big.bin", len(big)], ["js/small.bin", len(small)]]
    assert report["top"] == ["js/dir/", "js/small.bin"]
    # What another SDK family reads back.
    got = gw_s3.get_object(Bucket=gw_bucket, Key="js/dir/big.bin")
    assert sha256(got["Body"].read()) == sha256(big) and got["ETag"] == report["etags"]["big"]


def test_azure_storage_blob_for_javascript(gw, tmp_path):
    container = unique("js")
    blob_service(gw).create_container(container)
    small, big = payload(200_000, 3), payload(21 * MiB + 9, 4)
    job = files(tmp_path, small, big) | {"connectionString": gw.connection_string(), "container": container}
    report = run_scenario("azure_scenario.mjs", job, tmp_path)
    assert sha256((tmp_path / "big.down").read_bytes()) == sha256(big)
    assert sha256((tmp_path / "small.down").read_bytes()) == sha256(small)
    assert report["size"] == len(big)
    assert report["blocks"] == 3, "uploadStream's 8 MiB blocks"
    assert report["small"] == {"contentType": "application/x-js", "metadata": {"who": "azure-sdk-js"},
                               "etag": report["etags"]["small"]}
    assert report["listed"] == [["js/dir/big.bin", len(big)], ["js/small.bin", len(small)]]
    assert report["top"] == ["js/dir/", "js/small.bin"]
    got = blob_service(gw).get_blob_client(container, "js/dir/big.bin").download_blob()
    assert sha256(got.readall()) == sha256(big)
