"""Hits, proven by the origin stub's own counters: a second pass over the same ranges makes no origin GET.

talon_origin_requests_total{protocol="s3",operation="GetObject"} and
{protocol="azure",operation="GetBlob"} count every GET the origin served (metadata is
fetched with HEAD and may be revalidated; only the GETs matter here).
"""

from __future__ import annotations

import hashlib
import types

import numpy as np
from boto3.s3.transfer import TransferConfig

import generated
from conftest import MiB, blob_service, metric, read_metrics, s3_client, sha256, unique

BLOCK, PAGE = 1 * MiB, 64 * 1024
# (first, last) inclusive; within pages, across pages, across blocks, whole blocks.
RANGES = [(0, 99), (3 * PAGE + 7, 200_000), (BLOCK - 10, BLOCK + 10), (2 * BLOCK + 5, 3 * MiB + 100),
          (BLOCK + 3 * PAGE, BLOCK + 5 * PAGE - 1)]
# Above the gateway's write-through threshold (--write-through-max, 8 MiB), so an object
# uploaded through the gateway is not pushed into the cache and the first pass fills.
SIZE = 9 * MiB + 4321
# At most the threshold: the upload's bytes are pushed into the cache (write-through).
SMALL = 3 * MiB + 4321


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(9000 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def origin_gets(front) -> tuple:
    m = read_metrics(types.SimpleNamespace(admin=front.origin_admin))
    return (metric(m, "talon_origin_requests_total", protocol="s3", operation="GetObject"),
            metric(m, "talon_origin_requests_total", protocol="azure", operation="GetBlob"))


def s3_pass(s3, bucket, key, body):
    for first, last in RANGES:
        resp = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")
        assert resp["Body"].read() == body[first:last + 1], (first, last)


def azure_pass(az, container, blob, body):
    bc = az.get_blob_client(container, blob)
    for first, last in RANGES:
        assert bc.download_blob(offset=first, length=last - first + 1).readall() == body[first:last + 1]


def test_s3_second_pass_is_served_from_cache(gw, gw_s3, gw_bucket):
    body = payload(SIZE, 1)
    gw_s3.put_object(Bucket=gw_bucket, Key="hot.bin", Body=body)
    before = origin_gets(gw)
    s3_pass(gw_s3, gw_bucket, "hot.bin", body)
    filled = origin_gets(gw)
    assert filled[0] > before[0], "the first pass must have read from the origin (GetObject)"
    s3_pass(gw_s3, gw_bucket, "hot.bin", body)
    assert origin_gets(gw) == filled, "the second pass went to the origin"


def test_azure_second_pass_is_served_from_cache(gw, gw_azure, gw_container):
    body = payload(SIZE, 2)
    gw_azure.get_blob_client(gw_container, "hot.bin").upload_blob(body)
    before = origin_gets(gw)
    azure_pass(gw_azure, gw_container, "hot.bin", body)
    filled = origin_gets(gw)
    assert filled[1] > before[1], "the first pass must have read from the origin (GetBlob)"
    azure_pass(gw_azure, gw_container, "hot.bin", body)
    assert origin_gets(gw) == filled, "the second pass went to the origin"


def test_an_upload_through_the_gateway_is_read_back_from_the_cache(gw, gw_s3, gw_azure, gw_bucket, gw_container):
    """Write-through: after a small PutObject / Put Blob through the gateway, the writer's
    first read of it makes no origin GET and returns exactly what was written."""
    body_s, body_a = payload(SMALL, 5), payload(SMALL, 6)
    gw_s3.put_object(Bucket=gw_bucket, Key="written.bin", Body=body_s)
    gw_azure.get_blob_client(gw_container, "written.bin").upload_blob(body_a)
    before = origin_gets(gw)
    s3_pass(gw_s3, gw_bucket, "written.bin", body_s)
    azure_pass(gw_azure, gw_container, "written.bin", body_a)
    assert sha256(gw_s3.get_object(Bucket=gw_bucket, Key="written.bin")["Body"].read()) == sha256(body_s)
    assert origin_gets(gw) == before, "a read after a write through the gateway went to the origin"


def test_parallel_download_twice(gw, gw_s3, tmp_path):
    """s3transfer's ranged GETs of the whole generated object: the second download is all hits."""
    b, k, size, seed = gw.generated["big"]
    cfg = TransferConfig(multipart_threshold=2 * MiB, multipart_chunksize=2 * MiB, max_concurrency=4)
    expected = generated.sha256_of_generated(b, k, size, seed)
    gw_s3.download_file(b, k, str(tmp_path / "first"), Config=cfg)
    first = origin_gets(gw)
    gw_s3.download_file(b, k, str(tmp_path / "second"), Config=cfg)
    assert origin_gets(gw) == first, "the second download went to the origin"
    for name in ("first", "second"):
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == expected, name


def test_cross_protocol_second_pass(cluster):
    """S3 client over the Azure origin (GetBlob) and Azure client over the S3 origin (GetObject)."""
    main_s3, main_az = s3_client(cluster.main), blob_service(cluster.main)
    cross_s3, cross_az = s3_client(cluster.cross), blob_service(cluster.cross)
    bucket = unique("xhit")
    main_s3.create_bucket(Bucket=bucket)
    body_a, body_s = payload(SIZE, 3), payload(SIZE, 4)
    main_az.get_blob_client(bucket, "a.bin").upload_blob(body_a)
    main_s3.put_object(Bucket=bucket, Key="s.bin", Body=body_s)

    before = origin_gets(cluster.cross)
    s3_pass(cross_s3, bucket, "a.bin", body_a)
    azure_pass(cross_az, bucket, "s.bin", body_s)
    filled = origin_gets(cluster.cross)
    assert filled[1] > before[1], "S3 front over the Azure origin: the first pass must use GetBlob"
    assert filled[0] > before[0], "Azure front over the S3 origin: the first pass must use GetObject"
    s3_pass(cross_s3, bucket, "a.bin", body_a)
    azure_pass(cross_az, bucket, "s.bin", body_s)
    assert origin_gets(cluster.cross) == filled, "the second pass went to the origin"
    assert sha256(cross_s3.get_object(Bucket=bucket, Key="a.bin")["Body"].read()) == sha256(body_a)
