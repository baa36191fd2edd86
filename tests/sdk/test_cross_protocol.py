"""Both protocols see the same objects: same bytes, same ETag, same listing."""

from __future__ import annotations

import io

import numpy as np
from boto3.s3.transfer import TransferConfig

from conftest import MiB, blob_service, sha256, unique


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(200 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_azure_upload_s3_read(azure, s3, container):
    body = payload(300_000, 1)
    r = azure.get_blob_client(container, "from-azure/obj name.bin").upload_blob(body)
    got = s3.get_object(Bucket=container, Key="from-azure/obj name.bin")
    assert sha256(got["Body"].read()) == sha256(body)
    assert got["ETag"] == r["etag"]
    head = s3.head_object(Bucket=container, Key="from-azure/obj name.bin")
    assert head["ETag"] == r["etag"] and head["ContentLength"] == len(body)
    listed = s3.list_objects_v2(Bucket=container)["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [("from-azure/obj name.bin", len(body), r["etag"])]
    assert container in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_azure_blocked_upload_s3_read(stub, s3, container):
    svc = blob_service(stub, max_single_put_size=1 * MiB, max_block_size=1 * MiB)
    body = payload(4 * MiB + 77, 2)
    bc = svc.get_blob_client(container, "blocked.bin")
    bc.upload_blob(body)
    etag = bc.get_blob_properties().etag
    got = s3.get_object(Bucket=container, Key="blocked.bin")
    assert sha256(got["Body"].read()) == sha256(body)
    assert got["ETag"] == etag
    part = s3.get_object(Bucket=container, Key="blocked.bin", Range="bytes=1048570-1048585")["Body"].read()
    assert part == body[1048570:1048586]


def test_s3_upload_azure_read(azure, s3, bucket):
    body = payload(250_000, 3)
    put = s3.put_object(Bucket=bucket, Key="from-s3/ключ+1.bin", Body=body, ContentType="text/x-from-s3")
    bc = azure.get_blob_client(bucket, "from-s3/ключ+1.bin")
    assert sha256(bc.download_blob().readall()) == sha256(body)
    props = bc.get_blob_properties()
    assert props.etag == put["ETag"] and props.size == len(body)
    assert props.content_settings.content_type == "text/x-from-s3"
    assert [(b.name, b.size, b.etag) for b in azure.get_container_client(bucket).list_blobs()] == [
        ("from-s3/ключ+1.bin", len(body), put["ETag"])
    ]
    assert bucket in [c.name for c in azure.list_containers()]


def test_s3_multipart_azure_read(azure, s3, bucket):
    body = payload(11 * MiB, 4)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    s3.upload_fileobj(io.BytesIO(body), bucket, "mp.bin", Config=cfg)
    etag = s3.head_object(Bucket=bucket, Key="mp.bin")["ETag"]
    assert etag.endswith('-3"')
    bc = azure.get_blob_client(bucket, "mp.bin")
    assert bc.get_blob_properties().etag == etag
    assert sha256(bc.download_blob(max_concurrency=2).readall()) == sha256(body)


def test_delete_via_one_visible_in_other(azure, s3, bucket):
    s3.put_object(Bucket=bucket, Key="a", Body=b"a")
    azure.get_blob_client(bucket, "b").upload_blob(b"b")
    azure.get_blob_client(bucket, "a").delete_blob()
    s3.delete_object(Bucket=bucket, Key="b")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert list(azure.get_container_client(bucket).list_blobs()) == []


def test_overwrite_via_other_changes_etag(azure, s3, bucket):
    first = s3.put_object(Bucket=bucket, Key="o", Body=b"first")["ETag"]
    r = azure.get_blob_client(bucket, "o").upload_blob(b"second, longer", overwrite=True)
    assert r["etag"] != first
    got = s3.get_object(Bucket=bucket, Key="o")
    assert got["Body"].read() == b"second, longer" and got["ETag"] == r["etag"]


def test_container_created_by_azure_is_bucket(azure, s3):
    name = unique("xazc")
    azure.create_container(name)
    assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    s3.put_object(Bucket=name, Key="k", Body=b"v")
    assert azure.get_blob_client(name, "k").download_blob().readall() == b"v"
