"""Any front over any origin: an S3 client reading an Azure origin and an Azure client an S3 origin.

The cluster's ``cross`` gateway serves its S3 front from the origin's Azure API and its
Azure front from the origin's S3 API (one origin stub speaks both over the same objects,
so the expected bytes and ETags are known).
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

import generated
from conftest import MiB, blob_service, client_error, s3_client, sha256, unique

BLOCK = 1 * MiB


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(8000 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_s3_client_reads_azure_origin(cluster, tmp_path):
    s3 = s3_client(cluster.cross)
    b, k, size, seed = cluster.cross.generated["big"]
    etag = generated.generated_etag(b, k, size, seed)
    head = s3.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == size and head["ETag"] == etag
    resp = s3.get_object(Bucket=b, Key=k)
    assert resp["ETag"] == etag
    assert sha256(resp["Body"].read()) == generated.sha256_of_generated(b, k, size, seed)
    for rng, first, last in (("bytes=0-99", 0, 99), (f"bytes={BLOCK - 9}-{BLOCK + 9}", BLOCK - 9, BLOCK + 9),
                             ("bytes=-1000", size - 1000, size - 1), (f"bytes={size - 10}-", size - 10, size - 1)):
        resp = s3.get_object(Bucket=b, Key=k, Range=rng)
        assert resp["ContentRange"] == f"bytes {first}-{last}/{size}", rng
        assert resp["Body"].read() == generated.generated_bytes(b, k, seed, first, last + 1), rng
    dest = tmp_path / "big.bin"
    s3.download_file(b, k, str(dest), Config=TransferConfig(multipart_threshold=2 * MiB,
                                                            multipart_chunksize=2 * MiB, max_concurrency=4))
    h = hashlib.sha256(dest.read_bytes()).hexdigest()
    assert h == generated.sha256_of_generated(b, k, size, seed)
    # Listings translated from Azure's.
    assert b in [x["Name"] for x in s3.list_buckets()["Buckets"]]
    listed = {o["Key"]: (o["Size"], o["ETag"]) for o in s3.list_objects_v2(Bucket=b)["Contents"]}
    for gb, gk, gsize, gseed in cluster.cross.generated.values():
        assert listed[gk] == (gsize, generated.generated_etag(gb, gk, gsize, gseed)), gk
    resp = s3.list_objects_v2(Bucket=b, Delimiter="/", Prefix="")
    assert {p["Prefix"] for p in resp["CommonPrefixes"]} >= {"big/", "dir/"}
    # Errors in S3's words.
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=b, Key="no/such/blob")
    assert client_error(ei) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as ei:
        s3.list_objects_v2(Bucket=unique("nocontainer"))
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=b, Key=k, Range=f"bytes={size}-")
    assert client_error(ei) == (416, "InvalidRange")


def test_azure_client_reads_s3_origin(cluster):
    b, k, size, seed = cluster.cross.generated["big"]
    etag = generated.generated_etag(b, k, size, seed)
    svc = blob_service(cluster.cross, max_single_get_size=1 * MiB, max_chunk_get_size=512 * 1024)
    bc = svc.get_blob_client(b, k)
    props = bc.get_blob_properties()
    assert props.size == size and props.etag == etag
    data = bc.download_blob(max_concurrency=4).readall()
    assert sha256(data) == generated.sha256_of_generated(b, k, size, seed)
    for offset, length in ((0, 1), (BLOCK - 3, 7), (5 * BLOCK + 11, 2 * MiB), (size - 100, 100)):
        assert bc.download_blob(offset=offset, length=length).readall() == data[offset:offset + length]
    assert b in [c.name for c in svc.list_containers()]
    listed = {x.name: (x.size, x.etag) for x in svc.get_container_client(b).list_blobs()}
    for gb, gk, gsize, gseed in cluster.cross.generated.values():
        assert listed[gk] == (gsize, generated.generated_etag(gb, gk, gsize, gseed)), gk
    walked = {x.name for x in svc.get_container_client(b).walk_blobs(delimiter="/")}
    assert {"big/", "dir/"} <= walked
    with pytest.raises(ResourceNotFoundError) as ei:
        svc.get_blob_client(b, "no/such/key").download_blob()
    assert ei.value.error_code == "BlobNotFound"
    with pytest.raises(ResourceNotFoundError) as ei:
        list(svc.get_container_client(unique("nobucket")).list_blobs())
    assert ei.value.error_code == "ContainerNotFound"


def test_writes_cross_protocols(cluster):
    """Write through one protocol, read through the other protocol's front over the other origin."""
    main_s3, main_az = s3_client(cluster.main), blob_service(cluster.main)
    cross_s3, cross_az = s3_client(cluster.cross), blob_service(cluster.cross)
    bucket = unique("xw")
    main_s3.create_bucket(Bucket=bucket)

    # Azure client → Azure origin; S3 client reads it from the Azure origin.
    body = payload(2 * MiB + 3, 1)
    r = main_az.get_blob_client(bucket, "from azure/blob+1.bin").upload_blob(body)
    got = cross_s3.get_object(Bucket=bucket, Key="from azure/blob+1.bin")
    assert sha256(got["Body"].read()) == sha256(body)
    assert got["ETag"] == r["etag"] == cross_s3.head_object(Bucket=bucket, Key="from azure/blob+1.bin")["ETag"]

    # S3 client → S3 origin; Azure client reads it from the S3 origin.
    body = payload(1_500_000, 2)
    put = main_s3.put_object(Bucket=bucket, Key="from s3/obj%1.bin", Body=body)
    bc = cross_az.get_blob_client(bucket, "from s3/obj%1.bin")
    d = bc.download_blob()
    assert sha256(d.readall()) == sha256(body)
    assert d.properties.etag == put["ETag"] == bc.get_blob_properties().etag

    # Writes through the cross fronts land at the other origin.
    body = payload(300_000, 3)
    cross_s3.put_object(Bucket=bucket, Key="s3 front to azure.bin", Body=body)
    assert sha256(main_az.get_blob_client(bucket, "s3 front to azure.bin").download_blob().readall()) == sha256(body)
    body = payload(400_000, 4)
    cross_az.get_blob_client(bucket, "azure front to s3.bin").upload_blob(body)
    assert sha256(main_s3.get_object(Bucket=bucket, Key="azure front to s3.bin")["Body"].read()) == sha256(body)
    names = sorted(o["Key"] for o in cross_s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert names == sorted(["from azure/blob+1.bin", "from s3/obj%1.bin", "s3 front to azure.bin",
                            "azure front to s3.bin"])
    assert sorted(x.name for x in cross_az.get_container_client(bucket).list_blobs()) == names


def test_list_object_versions_over_an_azure_origin(cluster):
    """An S3 client lists versions of a container through the S3 front over the Azure
    origin: each blob once as its latest `null` version, paged with the Azure origin's
    own markers."""
    main, cross = s3_client(cluster.main), s3_client(cluster.cross)
    bucket = unique("xver")
    main.create_bucket(Bucket=bucket)
    keys = [f"blob-{i}" for i in range(5)]
    for k in keys:
        main.put_object(Bucket=bucket, Key=k, Body=k.encode())
    pages = cross.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    versions = [v for page in pages for v in page.get("Versions", [])]
    assert [v["Key"] for v in versions] == keys
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in versions)


def test_part_numbers_over_an_azure_origin(cluster):
    """A blob is one part: part 1 is the whole blob, part 2 is 400 InvalidPart."""
    main, cross = s3_client(cluster.main), s3_client(cluster.cross)
    bucket = unique("xpart")
    main.create_bucket(Bucket=bucket)
    main.put_object(Bucket=bucket, Key="blob", Body=b"the whole blob")
    resp = cross.get_object(Bucket=bucket, Key="blob", PartNumber=1)
    assert resp["Body"].read() == b"the whole blob"
    assert resp.get("PartsCount") is None
    with pytest.raises(ClientError) as ei:
        cross.get_object(Bucket=bucket, Key="blob", PartNumber=2)
    assert client_error(ei) == (400, "InvalidPart")


def _multipart(s3, bucket, key, body, part_size, **create):
    """A multipart upload by the low-level calls (so that 0 and 1 bytes are multipart too)."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    parts = []
    for i, start in enumerate(range(0, max(len(body), 1), part_size), start=1):
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i,
                              Body=body[start:start + part_size])["ETag"]
        assert etag == '"' + hashlib.md5(body[start:start + part_size]).hexdigest() + '"'
        parts.append({"PartNumber": i, "ETag": etag})
    done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
    return up, parts, done


@pytest.mark.parametrize("size", [0, 1, 5 * MiB, 64 * MiB + 1, 300 * MiB])
def test_s3_multipart_upload_over_an_azure_origin(cluster, size):
    """An S3 client's multipart upload through the S3 front over the Azure origin lands as one
    block blob: the same bytes (SHA-256), content type and metadata through either protocol."""
    main_az, cross_s3 = blob_service(cluster.main), s3_client(cluster.cross)
    bucket = unique("xmpu")
    s3_client(cluster.main).create_bucket(Bucket=bucket)
    body = payload(size, 10 + size % 97)
    _, parts, done = _multipart(cross_s3, bucket, "big/file.bin", body, 8 * MiB,
                                ContentType="application/x-talon", Metadata={"who": "s3-client"})
    assert len(parts) == max(1, -(-size // (8 * MiB)))
    head = cross_s3.head_object(Bucket=bucket, Key="big/file.bin")
    assert (head["ContentLength"], head["ETag"]) == (size, done["ETag"])
    assert head["ContentType"] == "application/x-talon" and head["Metadata"] == {"who": "s3-client"}
    got = cross_s3.get_object(Bucket=bucket, Key="big/file.bin")["Body"].read()
    assert sha256(got) == sha256(body)
    blob = main_az.get_blob_client(bucket, "big/file.bin")
    assert sha256(blob.download_blob().readall()) == sha256(body)
    props = blob.get_blob_properties()
    assert props.metadata == {"who": "s3-client"}
    assert props.content_settings.content_type == "application/x-talon"
    # Removed through the front it came in by (the cluster's origin keeps what every test
    # wrote until the session ends: up to 300 MiB here).
    # (The other gateway may answer from its metadata within its bound; this one may not.)
    cross_s3.delete_object(Bucket=bucket, Key="big/file.bin")
    with pytest.raises(ClientError) as gone:
        cross_s3.head_object(Bucket=bucket, Key="big/file.bin")
    assert client_error(gone)[0] == 404


def test_s3_upload_file_over_an_azure_origin(cluster, tmp_path):
    """boto3's upload_file with its defaults (8 MiB parts, threads) over the Azure origin."""
    cross_s3 = s3_client(cluster.cross)
    bucket = unique("xupf")
    s3_client(cluster.main).create_bucket(Bucket=bucket)
    src = tmp_path / "src.bin"
    body = payload(40 * MiB + 7, 20)
    src.write_bytes(body)
    cross_s3.upload_file(str(src), bucket, "uploaded.bin")
    got = cross_s3.get_object(Bucket=bucket, Key="uploaded.bin")["Body"].read()
    assert sha256(got) == sha256(body)


def test_multipart_over_an_azure_origin_checks_parts_retries_and_aborts(cluster):
    """ListParts, a retried part, S3's refusals at completion, a repeated completion and an
    abort, all kept at the Azure origin: nothing refused changes the object."""
    cross_s3 = s3_client(cluster.cross)
    bucket = unique("xmpr")
    s3_client(cluster.main).create_bucket(Bucket=bucket)
    key = "k"
    cross_s3.put_object(Bucket=bucket, Key=key, Body=b"before")
    p1, p2 = payload(5 * MiB, 30), payload(1000, 31)
    up = cross_s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    assert cross_s3.list_parts(Bucket=bucket, Key=key, UploadId=up).get("Parts", []) == []
    e1 = cross_s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=p1)["ETag"]
    assert cross_s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=p1)["ETag"] == e1
    e2 = cross_s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=p2)["ETag"]
    listed = cross_s3.list_parts(Bucket=bucket, Key=key, UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed] == [(1, e1, len(p1)), (2, e2, len(p2))]

    def refused(parts, code):
        with pytest.raises(ClientError) as ei:
            cross_s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        assert client_error(ei)[1] == code, parts
        assert cross_s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"before"

    refused([{"PartNumber": 1, "ETag": e2}], "InvalidPart")
    refused([{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}], "InvalidPartOrder")
    refused([{"PartNumber": 2, "ETag": e2}, {"PartNumber": 3, "ETag": e2}], "EntityTooSmall")
    refused([{"PartNumber": 1, "ETag": e1}, {"PartNumber": 4, "ETag": e2}], "InvalidPart")
    parts = [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]
    done = cross_s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
    again = cross_s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
    assert again["ETag"] == done["ETag"] == cross_s3.head_object(Bucket=bucket, Key=key)["ETag"]
    assert sha256(cross_s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == sha256(p1 + p2)

    # An abort: every later step of that upload is NoSuchUpload, and the object stays.
    up2 = cross_s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    e = cross_s3.upload_part(Bucket=bucket, Key=key, UploadId=up2, PartNumber=1, Body=b"never")["ETag"]
    cross_s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=up2)
    for call in (
        lambda: cross_s3.list_parts(Bucket=bucket, Key=key, UploadId=up2),
        lambda: cross_s3.upload_part(Bucket=bucket, Key=key, UploadId=up2, PartNumber=2, Body=b"x"),
        lambda: cross_s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up2,
                                                   MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]}),
        lambda: cross_s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=up2),
        lambda: cross_s3.list_parts(Bucket=bucket, Key=key, UploadId="not-an-upload-id"),
    ):
        with pytest.raises(ClientError) as ei:
            call()
        assert client_error(ei) == (404, "NoSuchUpload")
    assert sha256(cross_s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == sha256(p1 + p2)


def _block_id(i: int) -> str:
    import base64

    return base64.b64encode(f"block-{i:06d}".encode()).decode()


@pytest.mark.parametrize("size", [0, 1, 5 * MiB, 64 * MiB + 1, 300 * MiB])
def test_azure_block_upload_over_an_s3_origin(cluster, size):
    """An Azure client's block upload (the SDK's own above its single-put size: 4 MiB
    blocks) through the Azure front over the S3 origin lands as one object: the same bytes
    (SHA-256), content type and metadata through either protocol, the committed block list
    as uploaded, and no staged block left or listed."""
    from azure.storage.blob import BlobBlock, ContentSettings

    main_s3 = s3_client(cluster.main)
    cross_az = blob_service(cluster.cross, max_single_put_size=4 * MiB, max_block_size=4 * MiB)
    bucket = unique("xblk")
    main_s3.create_bucket(Bucket=bucket)
    body = payload(size, 40 + size % 89)
    blob = cross_az.get_blob_client(bucket, "dir/blocks.bin")
    settings = ContentSettings(content_type="application/x-blocks")
    if size <= 1:  # below any single-put size: the block calls by hand
        ids = [_block_id(0)] if size else []
        for i in ids:
            blob.stage_block(i, body)
        blob.commit_block_list([BlobBlock(block_id=i) for i in ids], content_settings=settings,
                               metadata={"who": "azure-client"})
    else:
        blob.upload_blob(body, content_settings=settings, metadata={"who": "azure-client"}, max_concurrency=4)
    assert sha256(blob.download_blob().readall()) == sha256(body)
    head = main_s3.head_object(Bucket=bucket, Key="dir/blocks.bin")
    assert head["ContentLength"] == size and head["Metadata"] == {"who": "azure-client"}
    assert head["ContentType"] == "application/x-blocks"
    assert sha256(main_s3.get_object(Bucket=bucket, Key="dir/blocks.bin")["Body"].read()) == sha256(body)
    committed, uncommitted = blob.get_block_list("all")
    assert sum(b.size for b in committed) == size and uncommitted == []
    assert len(committed) == (-(-size // (4 * MiB)) if size > 1 else size)
    listed = [o["Key"] for o in main_s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert listed == ["dir/blocks.bin"]
    # Removed through the front it came in by, as in the S3 test above.
    blob.delete_blob()
    assert not blob.exists()


def test_azure_block_lists_over_an_s3_origin_resolve_as_azure_does(cluster):
    """Latest, Committed and Uncommitted entries, a refused list that changes nothing, and
    staged blocks hidden from listings through both fronts."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import BlobBlock, BlockState

    main_s3, cross_s3 = s3_client(cluster.main), s3_client(cluster.cross)
    cross_az = blob_service(cluster.cross)
    bucket = unique("xbls")
    main_s3.create_bucket(Bucket=bucket)
    blob = cross_az.get_blob_client(bucket, "b")
    a, b, c = _block_id(1), _block_id(2), _block_id(3)
    blob.stage_block(a, b"aaa")
    blob.stage_block(b, b"bb")
    committed, uncommitted = blob.get_block_list("all")
    assert committed == [] and sorted((x.id, x.size) for x in uncommitted) == [(a, 3), (b, 2)]
    # Staged blocks are the gateway's own: no listing through either front shows them.
    assert main_s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    resp = main_s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert resp.get("CommonPrefixes") is None and resp.get("KeyCount", 0) == 0
    assert list(cross_az.get_container_client(bucket).list_blobs()) == []
    blob.commit_block_list([BlobBlock(block_id=b), BlobBlock(block_id=a)])
    assert blob.download_blob().readall() == b"bbaaa"
    blob.stage_block(c, b"c")
    blob.commit_block_list([BlobBlock(block_id=a, state=BlockState.Committed),
                            BlobBlock(block_id=c, state=BlockState.Uncommitted)])
    assert blob.download_blob().readall() == b"aaac"
    assert [(x.id, x.size) for x in blob.get_block_list("committed")[0]] == [(a, 3), (c, 1)]
    for bad in ([BlobBlock(block_id=b, state=BlockState.Uncommitted)],
                [BlobBlock(block_id=_block_id(9))],
                [BlobBlock(block_id=b, state=BlockState.Committed)]):
        with pytest.raises(HttpResponseError) as ei:
            blob.commit_block_list(bad)
        assert ei.value.status_code == 400 and ei.value.error_code == "InvalidBlockList"
        assert blob.download_blob().readall() == b"aaac"
    # Written by S3 since: the recorded list describes another version, so none is committed.
    main_s3.put_object(Bucket=bucket, Key="b", Body=b"plain put")
    assert blob.get_block_list("committed")[0] == []
    assert [o["Key"] for o in cross_s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["b"]


def test_buckets_are_made_and_removed_across_protocols(cluster):
    """CreateBucket through the S3 front over the Azure origin makes a container, Create
    Container through the Azure front over the S3 origin a bucket; deletes keep S3's rule
    (only an empty bucket), so no client loses objects it did not ask to delete."""
    from azure.core.exceptions import HttpResponseError, ResourceExistsError

    main_s3, main_az = s3_client(cluster.main), blob_service(cluster.main)
    cross_s3, cross_az = s3_client(cluster.cross), blob_service(cluster.cross)
    by_s3, by_az = unique("xcb"), unique("xca")
    cross_s3.create_bucket(Bucket=by_s3)
    assert main_az.get_container_client(by_s3).exists()
    main_az.get_blob_client(by_s3, "kept").upload_blob(b"kept")
    # Again, in us-east-1: 200 to its owner, as S3 answers there, and the bucket keeps its objects.
    cross_s3.create_bucket(Bucket=by_s3)
    assert main_az.get_blob_client(by_s3, "kept").download_blob().readall() == b"kept"
    main_az.get_blob_client(by_s3, "kept").delete_blob()
    cross_az.create_container(by_az)
    main_s3.head_bucket(Bucket=by_az)
    with pytest.raises(ResourceExistsError):
        cross_az.create_container(by_az)
    # Not empty: refused through both, and the object stays.
    main_s3.put_object(Bucket=by_s3, Key="keep", Body=b"kept")
    main_s3.put_object(Bucket=by_az, Key="keep", Body=b"kept")
    with pytest.raises(ClientError) as ei:
        cross_s3.delete_bucket(Bucket=by_s3)
    assert client_error(ei) == (409, "BucketNotEmpty")
    with pytest.raises(HttpResponseError) as hi:
        cross_az.delete_container(by_az)
    assert hi.value.status_code == 409
    # In Azure's words, not S3's ("The bucket ... is not empty").
    assert hi.value.error_code == "OperationNotAllowedInCurrentState", hi.value
    assert "The specified container is not empty" in str(hi.value), hi.value
    for bucket in (by_s3, by_az):
        assert main_s3.get_object(Bucket=bucket, Key="keep")["Body"].read() == b"kept"
        main_s3.delete_object(Bucket=bucket, Key="keep")
    cross_s3.delete_bucket(Bucket=by_s3)
    cross_az.delete_container(by_az)
    assert not main_az.get_container_client(by_s3).exists()
    with pytest.raises(ClientError) as ei:
        main_s3.head_bucket(Bucket=by_az)
    assert client_error(ei)[0] == 404


def test_copies_across_protocols(cluster):
    """CopyObject through the S3 front over the Azure origin (Copy Blob there, or
    streamed through the gateway when it asks for other content properties) and Copy
    Blob through the Azure front over the S3 origin (CopyObject there): each copy is
    SHA-256-equal and has the properties its protocol gives it, read back through the
    origin's own protocol."""
    main_s3 = s3_client(cluster.main)
    cross_s3, cross_az = s3_client(cluster.cross), blob_service(cluster.cross)
    bucket = unique("xcp")
    main_s3.create_bucket(Bucket=bucket)
    body = payload(3 * MiB + 5, 9)
    main_s3.put_object(Bucket=bucket, Key="src/a b+1", Body=body, ContentType="text/x-src", Metadata={"m": "1"})
    source = {"Bucket": bucket, "Key": "src/a b+1"}

    def read(key):
        got = main_s3.get_object(Bucket=bucket, Key=key)
        return sha256(got["Body"].read()), got["ContentType"], got["Metadata"]

    r = cross_s3.copy_object(Bucket=bucket, Key="by s3/copy", CopySource=source)
    assert read("by s3/copy") == (sha256(body), "text/x-src", {"m": "1"})
    assert r["CopyObjectResult"]["ETag"] == cross_s3.head_object(Bucket=bucket, Key="by s3/copy")["ETag"]
    cross_s3.copy_object(Bucket=bucket, Key="by s3/meta", CopySource=source, MetadataDirective="REPLACE",
                         ContentType="text/x-src", Metadata={"n": "2"})
    assert read("by s3/meta") == (sha256(body), "text/x-src", {"n": "2"})
    cross_s3.copy_object(Bucket=bucket, Key="by s3/type", CopySource=source, MetadataDirective="REPLACE",
                         ContentType="image/png")
    assert read("by s3/type") == (sha256(body), "image/png", {})
    with pytest.raises(ClientError) as ei:
        cross_s3.copy_object(Bucket=bucket, Key="by s3/never", CopySource=source, CopySourceIfMatch='"0123"')
    assert client_error(ei) == (412, "PreconditionFailed")
    # UploadPartCopy over the Azure origin: the bytes stream through the gateway into the part's block.
    up = cross_s3.create_multipart_upload(Bucket=bucket, Key="by s3/parts")["UploadId"]
    part = cross_s3.upload_part_copy(Bucket=bucket, Key="by s3/parts", UploadId=up, PartNumber=1, CopySource=source,
                                     CopySourceRange="bytes=5-1004")
    cross_s3.complete_multipart_upload(Bucket=bucket, Key="by s3/parts", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert read("by s3/parts")[0] == sha256(body[5:1005])

    src_url = cross_az.get_blob_client(bucket, "src/a b+1").url
    dst = cross_az.get_blob_client(bucket, "by azure/copy")
    assert dst.start_copy_from_url(src_url)["copy_status"] == "success"
    assert read("by azure/copy") == (sha256(body), "text/x-src", {"m": "1"})
    cross_az.get_blob_client(bucket, "by azure/meta").start_copy_from_url(src_url, metadata={"z": "9"})
    assert read("by azure/meta") == (sha256(body), "text/x-src", {"z": "9"})
    # A destination condition is the origin's to check: an existing blob is not overwritten.
    with pytest.raises(HttpResponseError) as hi:
        dst.upload_blob_from_url(src_url)  # overwrite=False: If-None-Match: *
    assert hi.value.status_code in (409, 412)
    names = sorted(o["Key"] for o in main_s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert names == ["by azure/copy", "by azure/meta", "by s3/copy", "by s3/meta", "by s3/parts", "by s3/type",
                     "src/a b+1"]


# ---- one store, both protocols (from the origin stub's own suite, 2026-12-05): on every
# target the S3 and Azure fronts show the same objects, bytes and ETags.


def same_store_payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(200 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_same_objects_azure_upload_s3_read(gw_azure, gw_s3, gw_container):
    body = same_store_payload(300_000, 1)
    r = gw_azure.get_blob_client(gw_container, "from-azure/obj name.bin").upload_blob(body)
    got = gw_s3.get_object(Bucket=gw_container, Key="from-azure/obj name.bin")
    assert sha256(got["Body"].read()) == sha256(body)
    assert got["ETag"] == r["etag"]
    head = gw_s3.head_object(Bucket=gw_container, Key="from-azure/obj name.bin")
    assert head["ETag"] == r["etag"] and head["ContentLength"] == len(body)
    listed = gw_s3.list_objects_v2(Bucket=gw_container)["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [("from-azure/obj name.bin", len(body), r["etag"])]
    assert gw_container in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]


def test_same_objects_azure_blocked_upload_s3_read(gw, gw_s3, gw_container):
    svc = blob_service(gw, max_single_put_size=1 * MiB, max_block_size=1 * MiB)
    body = same_store_payload(4 * MiB + 77, 2)
    bc = svc.get_blob_client(gw_container, "blocked.bin")
    bc.upload_blob(body)
    etag = bc.get_blob_properties().etag
    got = gw_s3.get_object(Bucket=gw_container, Key="blocked.bin")
    assert sha256(got["Body"].read()) == sha256(body)
    assert got["ETag"] == etag
    part = gw_s3.get_object(Bucket=gw_container, Key="blocked.bin", Range="bytes=1048570-1048585")["Body"].read()
    assert part == body[1048570:1048586]


def test_same_objects_s3_upload_azure_read(gw_azure, gw_s3, gw_bucket):
    body = same_store_payload(250_000, 3)
    put = gw_s3.put_object(Bucket=gw_bucket, Key="from-s3/ключ+1.bin", Body=body, ContentType="text/x-from-s3")
    bc = gw_azure.get_blob_client(gw_bucket, "from-s3/ключ+1.bin")
    assert sha256(bc.download_blob().readall()) == sha256(body)
    props = bc.get_blob_properties()
    assert props.etag == put["ETag"] and props.size == len(body)
    assert props.content_settings.content_type == "text/x-from-s3"
    assert [(b.name, b.size, b.etag) for b in gw_azure.get_container_client(gw_bucket).list_blobs()] == [
        ("from-s3/ключ+1.bin", len(body), put["ETag"])
    ]
    assert gw_bucket in [c.name for c in gw_azure.list_containers()]


def test_same_objects_s3_multipart_azure_read(gw, gw_azure, gw_s3, gw_bucket):
    body = same_store_payload(11 * MiB, 4)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    gw_s3.upload_fileobj(io.BytesIO(body), gw_bucket, "mp.bin", Config=cfg)
    etag = gw_s3.head_object(Bucket=gw_bucket, Key="mp.bin")["ETag"]
    # Over an Azure origin the ETag is the blob's (harness.Front.s3_multipart_etags).
    assert etag.endswith('-3"') or not gw.s3_multipart_etags
    bc = gw_azure.get_blob_client(gw_bucket, "mp.bin")
    assert bc.get_blob_properties().etag == etag
    assert sha256(bc.download_blob(max_concurrency=2).readall()) == sha256(body)


def test_same_objects_delete_via_one_visible_in_other(gw_azure, gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="a", Body=b"a")
    gw_azure.get_blob_client(gw_bucket, "b").upload_blob(b"b")
    gw_azure.get_blob_client(gw_bucket, "a").delete_blob()
    gw_s3.delete_object(Bucket=gw_bucket, Key="b")
    assert gw_s3.list_objects_v2(Bucket=gw_bucket)["KeyCount"] == 0
    assert list(gw_azure.get_container_client(gw_bucket).list_blobs()) == []


def test_same_objects_overwrite_via_other_changes_etag(gw_azure, gw_s3, gw_bucket):
    first = gw_s3.put_object(Bucket=gw_bucket, Key="o", Body=b"first")["ETag"]
    r = gw_azure.get_blob_client(gw_bucket, "o").upload_blob(b"second, longer", overwrite=True)
    assert r["etag"] != first
    got = gw_s3.get_object(Bucket=gw_bucket, Key="o")
    assert got["Body"].read() == b"second, longer" and got["ETag"] == r["etag"]


def test_same_objects_container_created_by_azure_is_bucket(gw_azure, gw_s3):
    name = unique("xazc")
    gw_azure.create_container(name)
    assert gw_s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    gw_s3.put_object(Bucket=name, Key="k", Body=b"v")
    assert gw_azure.get_blob_client(name, "k").download_blob().readall() == b"v"
