"""boto3 through the gateway's S3 front (talon up and the multi-process cluster).

Every body is checked by SHA-256 against what was uploaded or against generated.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import io
import os
import re
import urllib.parse
import xml.etree.ElementTree as ET
import zlib

import boto3
import numpy as np
import pytest
import requests
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

import generated
from conftest import MiB, client_error, s3_client, sha256, signed_request, unique

ODD_KEYS = [
    "a.txt",
    "dir/b.txt",
    "dir/sub/c.txt",
    "dir with space/d e.txt",
    "plus+sign.txt",
    "percent%20literal.txt",
    "100% done.txt",
    "amp&lt<gt>.txt",
    "q?mark#hash.txt",
    "ünïcødé/ключ.txt",
    "z/😀 emoji.bin",
]
TOP_LEVEL = sorted(k for k in ODD_KEYS if "/" not in k)
PREFIXES = sorted({k.split("/")[0] + "/" for k in ODD_KEYS if "/" in k})
BLOCK = 1 * MiB  # the deployments' block size
PAGE = 64 * 1024  # the workers' page size


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(4000 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def get_body(s3, bucket, key, **kw):
    resp = s3.get_object(Bucket=bucket, Key=key, **kw)
    return resp, resp["Body"].read()


def file_sha(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(8 * MiB), b""):
            h.update(chunk)
    return h.hexdigest()


def utf8(k: str) -> bytes:
    return k.encode()


# ------------------------------------------------------------------ listing


def test_list_odd_keys_delimiter_and_pagination(gw_s3, gw_bucket):
    s3, bucket = gw_s3, gw_bucket
    etags = {}
    for i, key in enumerate(ODD_KEYS):
        etags[key] = s3.put_object(Bucket=bucket, Key=key, Body=f"body of {key} #{i}".encode())["ETag"]
    expected = sorted(ODD_KEYS, key=utf8)

    resp = s3.list_objects_v2(Bucket=bucket)  # botocore asks for encoding-type=url and decodes
    assert [o["Key"] for o in resp["Contents"]] == expected
    assert resp["KeyCount"] == len(ODD_KEYS) and resp["IsTruncated"] is False
    for o in resp["Contents"]:
        assert o["ETag"] == etags[o["Key"]]
        assert o["Size"] == len(f"body of {o['Key']} #{ODD_KEYS.index(o['Key'])}".encode())

    resp = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert sorted(o["Key"] for o in resp["Contents"]) == TOP_LEVEL
    assert sorted(p["Prefix"] for p in resp["CommonPrefixes"]) == PREFIXES
    resp = s3.list_objects_v2(Bucket=bucket, Prefix="dir/", Delimiter="/")
    assert [o["Key"] for o in resp["Contents"]] == ["dir/b.txt"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["dir/sub/"]
    resp = s3.list_objects_v2(Bucket=bucket, Prefix="ünïcødé/")
    assert [o["Key"] for o in resp["Contents"]] == ["ünïcødé/ключ.txt"]

    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 3}))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == expected
    assert len(pages) == -(-len(ODD_KEYS) // 3)
    for p in pages[:-1]:
        assert p["IsTruncated"] is True and p["NextContinuationToken"] and p["KeyCount"] == 3

    pages = list(s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 2}))
    assert sorted(o["Key"] for p in pages for o in p.get("Contents", [])) == TOP_LEVEL
    assert sorted(c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])) == PREFIXES
    assert all(len(p.get("Contents", [])) + len(p.get("CommonPrefixes", [])) <= 2 for p in pages)

    pages = list(s3.get_paginator("list_objects").paginate(Bucket=bucket, PaginationConfig={"PageSize": 4}))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == expected

    # Every odd key reads back through the cache with its own bytes and ETag.
    for i, key in enumerate(ODD_KEYS):
        resp, body = get_body(s3, bucket, key)
        assert body == f"body of {key} #{i}".encode(), key
        assert resp["ETag"] == etags[key] == s3.head_object(Bucket=bucket, Key=key)["ETag"], key


def test_list_url_encoding_echoed_raw(gw, gw_s3, gw_bucket):
    """encoding-type=url is honoured and echoed (the raw XML, not botocore's decoding of it)."""
    key = "sp ace+plus%/ü.txt"
    gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=b"x")
    resp = signed_request(gw, "GET", f"/{gw_bucket}", params={"list-type": "2", "encoding-type": "url"})
    assert resp.status_code == 200, resp.text
    root = ET.fromstring(resp.content)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    assert root.findtext(f"{ns}EncodingType") == "url", resp.text
    listed = root.findtext(f"{ns}Contents/{ns}Key")
    assert listed is not None and " " not in listed and "ü" not in listed and "+plus" not in listed, listed
    assert urllib.parse.unquote_plus(listed) == key


def test_list_buckets_and_head_bucket(gw_s3, gw_bucket):
    names = [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    assert gw_bucket in names
    assert not [n for n in names if n.startswith(".")], f"internal folders listed as buckets: {names}"
    assert gw_s3.head_bucket(Bucket=gw_bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert gw_s3.get_bucket_location(Bucket=gw_bucket).get("LocationConstraint") in (None, "", "us-east-1")
    with pytest.raises(ClientError) as ei:
        gw_s3.head_bucket(Bucket=gw_bucket + "-missing")
    assert client_error(ei)[0] == 404


# ------------------------------------------------------------------ head and get


def test_head_and_get_generated(gw, gw_s3):
    b, k, size, seed = gw.generated["big"]
    etag = gw.generated_etag("big")
    head = gw_s3.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == size
    assert head["ETag"] == etag
    assert head["ResponseMetadata"]["HTTPHeaders"].get("accept-ranges") == "bytes"
    resp, body = get_body(gw_s3, b, k)
    assert resp["ETag"] == head["ETag"]
    assert resp["ContentLength"] == size and len(body) == size
    assert sha256(body) == generated.sha256_of_generated(b, k, size, seed)
    assert resp["LastModified"] == head["LastModified"]


def test_ranged_gets(gw, gw_s3):
    b, k, size, seed = gw.generated["big"]
    etag = gw.generated_etag("big")
    cases = [
        ("bytes=0-0", 0, 0),
        ("bytes=10-19", 10, 19),
        (f"bytes={PAGE - 5}-{PAGE + 5}", PAGE - 5, PAGE + 5),  # crosses a page
        (f"bytes={BLOCK - 100}-{BLOCK + 99}", BLOCK - 100, BLOCK + 99),  # crosses a block
        (f"bytes={BLOCK - 1}-{3 * BLOCK}", BLOCK - 1, 3 * BLOCK),  # spans whole blocks
        (f"bytes={size - 5000}-", size - 5000, size - 1),  # open-ended
        ("bytes=-777", size - 777, size - 1),  # suffix
        (f"bytes=-{size + 10}", 0, size - 1),  # suffix longer than the object
        (f"bytes={size - 3}-{size + 1000}", size - 3, size - 1),  # end clamped
        (f"bytes={size - 1}-", size - 1, size - 1),
    ]
    for rng, first, last in cases:
        resp, got = get_body(gw_s3, b, k, Range=rng)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert resp["ContentRange"] == f"bytes {first}-{last}/{size}", rng
        assert resp["ContentLength"] == last - first + 1 == len(got), rng
        assert sha256(got) == sha256(generated.generated_bytes(b, k, seed, first, last + 1)), rng
        assert resp["ETag"] == etag, rng


def test_checksum_mode_full_object_only(gw, gw_s3, gw_bucket):
    """A ranged GET carries no full-object checksum; HEAD and a whole GET carry the one
    the object was uploaded with (botocore then verifies the body against it)."""
    body = payload(3 * MiB + 17, 1)
    crc = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    # botocore sends the checksum as an aws-chunked trailer; the gateway passes it on in a
    # trailer of its own, so the origin keeps it.
    gw_s3.put_object(Bucket=gw_bucket, Key="ck.bin", Body=body, ChecksumAlgorithm="CRC32")
    for rng, first, last in (("bytes=100-200099", 100, 200099), ("bytes=-5", len(body) - 5, len(body) - 1)):
        resp, got = get_body(gw_s3, gw_bucket, "ck.bin", Range=rng, ChecksumMode="ENABLED")
        assert got == body[first:last + 1], rng
        headers = resp["ResponseMetadata"]["HTTPHeaders"]
        assert not [h for h in headers if h.startswith("x-amz-checksum-") and h != "x-amz-checksum-type"], headers
    head = gw_s3.head_object(Bucket=gw_bucket, Key="ck.bin", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC32") == crc, head["ResponseMetadata"]["HTTPHeaders"]
    resp, got = get_body(gw_s3, gw_bucket, "ck.bin", ChecksumMode="ENABLED")
    assert resp.get("ChecksumCRC32") == crc
    assert sha256(got) == sha256(body)
    plain = gw_s3.head_object(Bucket=gw_bucket, Key="ck.bin")
    assert "ChecksumCRC32" not in plain
    # Given up front, it travels as a header, which the origin keeps too.
    sha = base64.b64encode(hashlib.sha256(body).digest()).decode()
    gw_s3.put_object(Bucket=gw_bucket, Key="ck2.bin", Body=body, ChecksumSHA256=sha)
    head = gw_s3.head_object(Bucket=gw_bucket, Key="ck2.bin", ChecksumMode="ENABLED")
    assert head.get("ChecksumSHA256") == sha


def test_range_past_the_end_is_416(gw, gw_s3, gw_bucket):
    b, k, size, _ = gw.generated["big"]
    for rng in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}"):
        with pytest.raises(ClientError) as ei:
            gw_s3.get_object(Bucket=b, Key=k, Range=rng)
        assert client_error(ei) == (416, "InvalidRange"), rng
    gw_s3.put_object(Bucket=gw_bucket, Key="empty", Body=b"")
    for rng in ("bytes=0-0", "bytes=0-", "bytes=-1"):
        with pytest.raises(ClientError) as ei:
            gw_s3.get_object(Bucket=gw_bucket, Key="empty", Range=rng)
        assert client_error(ei) == (416, "InvalidRange"), rng
    resp, got = get_body(gw_s3, gw_bucket, "empty")
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200 and got == b""
    assert gw_s3.head_object(Bucket=gw_bucket, Key="empty")["ContentLength"] == 0
    # A generated empty object behaves the same, where the origin has one.
    if "empty" in gw.generated:
        b, k = gw.generated["empty"][:2]
        with pytest.raises(ClientError) as ei:
            gw_s3.get_object(Bucket=b, Key=k, Range="bytes=0-0")
        assert client_error(ei) == (416, "InvalidRange")
        resp, got = get_body(gw_s3, b, k)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200 and got == b""


def test_conditional_get(gw_s3, gw_bucket):
    s3, bucket = gw_s3, gw_bucket
    body = payload(200_000, 2)
    etag = s3.put_object(Bucket=bucket, Key="c", Body=body)["ETag"]
    other = '"0123456789abcdef0123456789abcdef"'
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert client_error(ei)[0] == 304
    assert ei.value.response["ResponseMetadata"]["HTTPHeaders"].get("etag") == etag
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert client_error(ei)[0] == 304
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfMatch=other)
    assert client_error(ei) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfMatch=other, Range="bytes=0-9")
    assert client_error(ei) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="c", IfMatch=other)
    assert client_error(ei)[0] == 412
    _, got = get_body(s3, bucket, "c", IfMatch=etag)
    assert sha256(got) == sha256(body)
    _, got = get_body(s3, bucket, "c", IfNoneMatch=other, Range="bytes=5-9")
    assert got == body[5:10]
    # S3 precedence: If-Match true wins over If-Unmodified-Since false,
    # If-None-Match false wins over If-Modified-Since true.
    lm = s3.head_object(Bucket=bucket, Key="c")["LastModified"]
    past = lm - dt.timedelta(days=1)
    _, got = get_body(s3, bucket, "c", IfMatch=etag, IfUnmodifiedSince=past)
    assert sha256(got) == sha256(body)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag, IfModifiedSince=past)
    assert client_error(ei)[0] == 304
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=lm + dt.timedelta(days=1))
    assert client_error(ei)[0] == 304
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert client_error(ei) == (412, "PreconditionFailed")


def test_response_overrides(gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="ov", Body=b"{}", ContentType="application/octet-stream")
    resp = gw_s3.get_object(Bucket=gw_bucket, Key="ov", ResponseContentType="application/json",
                            ResponseContentDisposition="inline", ResponseCacheControl="no-cache")
    assert resp["Body"].read() == b"{}"
    assert resp["ContentType"] == "application/json"
    assert resp["ContentDisposition"] == "inline" and resp["CacheControl"] == "no-cache"
    assert gw_s3.head_object(Bucket=gw_bucket, Key="ov")["ContentType"] == "application/octet-stream"


# ------------------------------------------------------------------ presigned


def test_presigned_get_default_and_sigv4(gw, gw_s3, gw_bucket):
    body = payload(300_000, 3)
    key = "pre signed/obj+1%.bin"
    gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=body)
    # boto3's default client: presigns with its default (SigV2 query auth for s3).
    default = boto3.session.Session(
        aws_access_key_id=gw.access_key, aws_secret_access_key=gw.secret_key, region_name=gw.region,
    ).client("s3", endpoint_url=gw.s3)
    urls = {
        "default": default.generate_presigned_url("get_object", Params={"Bucket": gw_bucket, "Key": key},
                                                  ExpiresIn=300),
        "s3v4": gw_s3.generate_presigned_url("get_object", Params={"Bucket": gw_bucket, "Key": key}, ExpiresIn=300),
    }
    assert "X-Amz-Signature=" in urls["s3v4"]
    assert "AWSAccessKeyId=" in urls["default"] and "&Signature=" in urls["default"]  # SigV2 query auth
    for name, url in urls.items():
        resp = requests.get(url, timeout=30)
        assert resp.status_code == 200, (name, resp.status_code, resp.text[:500])
        assert sha256(resp.content) == sha256(body), name
        resp = requests.get(url, headers={"Range": "bytes=1000-1999"}, timeout=30)
        assert resp.status_code == 206 and resp.content == body[1000:2000], name
        # A presigned URL for one key does not open another.
        resp = requests.get(url.replace("obj%2B1", "obj%2B2").replace("obj+1", "obj+2"), timeout=30)
        assert resp.status_code == 403, (name, resp.status_code)
    # Presigned GET of the generated object through the cache.
    b, k, size, seed = gw.generated["big"]
    url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": k}, ExpiresIn=300)
    resp = requests.get(url, headers={"Range": f"bytes={BLOCK - 10}-{BLOCK + 10}"}, timeout=30)
    assert resp.status_code == 206
    assert resp.content == generated.generated_bytes(b, k, seed, BLOCK - 10, BLOCK + 11)


# ------------------------------------------------------------------ transfers


def test_download_file_parallel_small_chunks(gw, gw_s3, tmp_path):
    b, k, size, seed = gw.generated["big"]
    dest = tmp_path / "big.bin"
    cfg = TransferConfig(multipart_threshold=1 * MiB, multipart_chunksize=1 * MiB, max_concurrency=4)
    gw_s3.download_file(b, k, str(dest), Config=cfg)
    assert dest.stat().st_size == size
    assert file_sha(dest) == generated.sha256_of_generated(b, k, size, seed)


def test_upload_file_multipart_and_download(gw, gw_s3, gw_bucket, tmp_path):
    body = payload(12 * MiB + 333, 4)
    src = tmp_path / "twelve.bin"
    src.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    gw_s3.upload_file(str(src), gw_bucket, "multi/twelve.bin", Config=cfg)
    head = gw_s3.head_object(Bucket=gw_bucket, Key="multi/twelve.bin")
    assert head["ContentLength"] == len(body)
    parts = [body[i:i + 5 * MiB] for i in range(0, len(body), 5 * MiB)]
    md5s = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    if gw.s3_multipart_etags:
        assert head["ETag"] == f'"{md5s}-3"'
    resp, got = get_body(gw_s3, gw_bucket, "multi/twelve.bin")
    assert resp["ETag"] == head["ETag"]
    assert sha256(got) == sha256(body)
    dest = tmp_path / "back.bin"
    gw_s3.download_file(gw_bucket, "multi/twelve.bin", str(dest),
                        Config=TransferConfig(multipart_threshold=1 * MiB, multipart_chunksize=1 * MiB,
                                              max_concurrency=4))
    assert file_sha(dest) == sha256(body)
    listed = gw_s3.list_objects_v2(Bucket=gw_bucket)["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [("multi/twelve.bin", len(body), head["ETag"])]


def test_put_with_default_sdk_checksums(gw, gw_bucket):
    """A client with nothing but endpoint and keys: botocore's default flexible checksums."""
    s3 = boto3.session.Session(
        aws_access_key_id=gw.access_key, aws_secret_access_key=gw.secret_key, region_name=gw.region,
    ).client("s3", endpoint_url=gw.s3)
    bodies = {"bytes.bin": payload(300_000, 5), "empty.bin": b"", "one.bin": b"x"}
    for key, body in bodies.items():
        put = s3.put_object(Bucket=gw_bucket, Key=key, Body=body)
        assert put["ETag"] == '"' + hashlib.md5(body).hexdigest() + '"', key
        resp, got = get_body(s3, gw_bucket, key)
        assert sha256(got) == sha256(body), key
        assert resp["ETag"] == put["ETag"] == s3.head_object(Bucket=gw_bucket, Key=key)["ETag"], key
    body = payload(1_500_000, 6)
    s3.put_object(Bucket=gw_bucket, Key="fileobj.bin", Body=io.BytesIO(body))
    assert sha256(get_body(s3, gw_bucket, "fileobj.bin")[1]) == sha256(body)
    s3.upload_fileobj(io.BytesIO(body), gw_bucket, "upload_fileobj.bin")
    assert sha256(get_body(s3, gw_bucket, "upload_fileobj.bin")[1]) == sha256(body)


def test_delete_and_delete_objects(gw_s3, gw_bucket):
    s3, bucket = gw_s3, gw_bucket
    for key in ("d1", "d2", "d3", "keep", "sub/d4"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    assert s3.delete_object(Bucket=bucket, Key="d1")["ResponseMetadata"]["HTTPStatusCode"] == 204
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d2"}, {"Key": "d3"}, {"Key": "sub/d4"},
                                                             {"Key": "never-existed"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d2", "d3", "never-existed", "sub/d4"]
    assert not r.get("Errors")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["keep"]
    assert get_body(s3, bucket, "keep")[1] == b"keep"


# ------------------------------------------------------------ read after write


def test_get_after_delete_is_404(gw_s3, gw_bucket):
    """Once DeleteObject succeeded, the key is gone for readers (S3 is strongly consistent)."""
    s3, bucket = gw_s3, gw_bucket
    body = payload(150_000, 7)
    s3.put_object(Bucket=bucket, Key="gone", Body=body)
    assert sha256(get_body(s3, bucket, "gone")[1]) == sha256(body)  # cached now
    s3.delete_object(Bucket=bucket, Key="gone")
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="gone")
    assert client_error(ei)[0] == 404
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="gone")
    assert client_error(ei) == (404, "NoSuchKey")


def test_get_after_overwrite_serves_the_new_version(gw_s3, gw_bucket):
    s3, bucket = gw_s3, gw_bucket
    v1, v2 = payload(100_000, 8), payload(130_000, 9)
    e1 = s3.put_object(Bucket=bucket, Key="over", Body=v1)["ETag"]
    assert sha256(get_body(s3, bucket, "over")[1]) == sha256(v1)  # v1 is cached now
    e2 = s3.put_object(Bucket=bucket, Key="over", Body=v2)["ETag"]
    assert e1 != e2
    head = s3.head_object(Bucket=bucket, Key="over")
    assert (head["ETag"], head["ContentLength"]) == (e2, len(v2))
    resp, got = get_body(s3, bucket, "over")
    assert resp["ETag"] == e2 and sha256(got) == sha256(v2)


def test_head_after_put_of_a_key_seen_missing(gw_s3, gw_bucket):
    s3, bucket = gw_s3, gw_bucket
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="late")
    assert client_error(ei)[0] == 404
    body = payload(20_000, 10)
    etag = s3.put_object(Bucket=bucket, Key="late", Body=body)["ETag"]
    assert s3.head_object(Bucket=bucket, Key="late")["ETag"] == etag
    assert sha256(get_body(s3, bucket, "late")[1]) == sha256(body)


def test_user_metadata_on_head_and_get(gw_s3, gw_bucket):
    s3, bucket = gw_s3, gw_bucket
    meta = {"colour": "blue", "owner": "talon"}
    s3.put_object(Bucket=bucket, Key="with-meta", Body=b"metadata", Metadata=meta)
    assert s3.head_object(Bucket=bucket, Key="with-meta")["Metadata"] == meta
    resp, got = get_body(s3, bucket, "with-meta")
    assert got == b"metadata" and resp["Metadata"] == meta


def test_content_headers_on_head_and_get(gw_s3, gw_bucket):
    """Content-Encoding (sent as "gzip,aws-chunked" when botocore streams a checksum
    trailer), Content-Language, Content-Disposition and Cache-Control come back as put."""
    s3, bucket = gw_s3, gw_bucket
    body = gzip.compress(b"talon " * 1000)
    s3.put_object(
        Bucket=bucket, Key="page.html.gz", Body=body, ContentType="text/html",
        ContentEncoding="gzip", ContentLanguage="en", CacheControl="max-age=60",
        ContentDisposition='attachment; filename="page.html"',
    )
    want = {
        "ContentEncoding": "gzip", "ContentLanguage": "en", "CacheControl": "max-age=60",
        "ContentDisposition": 'attachment; filename="page.html"', "ContentType": "text/html",
    }
    head = s3.head_object(Bucket=bucket, Key="page.html.gz")
    assert {k: head.get(k) for k in want} == want
    resp, got = get_body(s3, bucket, "page.html.gz")
    assert {k: resp.get(k) for k in want} == want
    assert sha256(got) == sha256(body), "the stored bytes, not decoded"
    # response-* overrides still win over what is stored.
    resp, _ = get_body(s3, bucket, "page.html.gz", ResponseCacheControl="no-store")
    assert resp["CacheControl"] == "no-store"


def test_part_number_reads(gw_s3, gw_bucket):
    body = payload(11 * MiB, 11)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    gw_s3.upload_fileobj(io.BytesIO(body), gw_bucket, "parts.bin", Config=cfg)
    resp, got = get_body(gw_s3, gw_bucket, "parts.bin", PartNumber=1)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert sha256(got) == sha256(body[: 5 * MiB])
    assert resp["ContentRange"] == f"bytes 0-{5 * MiB - 1}/{len(body)}"
    resp, got = get_body(gw_s3, gw_bucket, "parts.bin", PartNumber=2)
    assert sha256(got) == sha256(body[5 * MiB: 10 * MiB])
    assert resp["ContentRange"] == f"bytes {5 * MiB}-{10 * MiB - 1}/{len(body)}"
    assert resp.get("PartsCount") == 3


def test_copy_object(gw, gw_s3, gw_bucket):
    body = payload(600_000, 12)
    src = gw_s3.put_object(Bucket=gw_bucket, Key="src", Body=body, ContentType="text/x-src")
    r = gw_s3.copy_object(Bucket=gw_bucket, Key="dst/copy", CopySource={"Bucket": gw_bucket, "Key": "src"})
    resp, got = get_body(gw_s3, gw_bucket, "dst/copy")
    assert sha256(got) == sha256(body) and resp["ContentType"] == "text/x-src"
    assert resp["ETag"] == r["CopyObjectResult"]["ETag"]
    if gw.origin_kind != "azurite":
        # An S3 origin's ETag is the MD5 of the bytes; an Azure origin gives a copy an ETag of its own.
        assert r["CopyObjectResult"]["ETag"] == src["ETag"]
    # New metadata only (Copy Blob over an Azure origin), then another content type
    # (streamed through the gateway over an Azure origin): the copy has what was asked.
    gw_s3.copy_object(Bucket=gw_bucket, Key="dst/meta", CopySource={"Bucket": gw_bucket, "Key": "src"},
                      MetadataDirective="REPLACE", ContentType="text/x-src", Metadata={"n": "2"})
    head = gw_s3.head_object(Bucket=gw_bucket, Key="dst/meta")
    assert (head["ContentType"], head["Metadata"]) == ("text/x-src", {"n": "2"})
    gw_s3.copy_object(Bucket=gw_bucket, Key="dst/type", CopySource={"Bucket": gw_bucket, "Key": "src"},
                      MetadataDirective="REPLACE", ContentType="image/png", Metadata={"n": "3"})
    resp, got = get_body(gw_s3, gw_bucket, "dst/type")
    assert sha256(got) == sha256(body) and (resp["ContentType"], resp["Metadata"]) == ("image/png", {"n": "3"})
    # A failed source condition is 412 and writes nothing.
    conditions = [{"CopySourceIfNoneMatch": src["ETag"]}]
    if gw.origin_kind != "moto":  # moto ignores x-amz-copy-source-if-match (S3 evaluates it)
        conditions.append({"CopySourceIfMatch": '"0123"'})
    for condition in conditions:
        with pytest.raises(ClientError) as ei:
            gw_s3.copy_object(Bucket=gw_bucket, Key="dst/never", CopySource={"Bucket": gw_bucket, "Key": "src"},
                              **condition)
        assert client_error(ei) == (412, "PreconditionFailed"), condition
    with pytest.raises(ClientError) as ei:
        gw_s3.head_object(Bucket=gw_bucket, Key="dst/never")
    assert client_error(ei)[0] == 404
    # So is a failed condition on the destination, which keeps what it held.
    if gw.origin_kind != "moto":  # moto ignores a copy's If-None-Match (S3 evaluates it)
        with pytest.raises(ClientError) as ei:
            gw_s3.copy_object(Bucket=gw_bucket, Key="dst/type", CopySource={"Bucket": gw_bucket, "Key": "src"},
                              IfNoneMatch="*")
        assert client_error(ei) == (412, "PreconditionFailed")
        assert gw_s3.head_object(Bucket=gw_bucket, Key="dst/type")["ContentType"] == "image/png"
    # From the generated object (read by the origin itself, not through the cache).
    b, k, size, seed = gw.generated["big"]
    gw_s3.copy_object(Bucket=gw_bucket, Key="gen copy+%", CopySource={"Bucket": b, "Key": k})
    resp, got = get_body(gw_s3, gw_bucket, "gen copy+%", Range=f"bytes={size - 100}-")
    assert got == generated.generated_bytes(b, k, seed, size - 100, size)
    with pytest.raises(ClientError) as ei:
        gw_s3.copy_object(Bucket=gw_bucket, Key="x", CopySource={"Bucket": gw_bucket, "Key": "no-such-source"})
    assert client_error(ei) == (404, "NoSuchKey")


def test_upload_part_copy(gw, gw_s3, gw_bucket):
    """UploadPartCopy: parts copied from other objects' bytes (a range, or all of one)
    make an object SHA-256-equal to those bytes; a range past the source's end is
    InvalidRange and a failed source condition 412, each leaving the upload as it was."""
    body = payload(7 * MiB + 3, 31)
    gw_s3.put_object(Bucket=gw_bucket, Key="parts/src", Body=body)
    tail = payload(1000, 32)
    gw_s3.put_object(Bucket=gw_bucket, Key="parts/tail", Body=tail)
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="parts/dst")["UploadId"]
    source = {"Bucket": gw_bucket, "Key": "parts/src"}
    r1 = gw_s3.upload_part_copy(Bucket=gw_bucket, Key="parts/dst", UploadId=up, PartNumber=1, CopySource=source,
                                CopySourceRange=f"bytes=0-{5 * MiB - 1}")
    r2 = gw_s3.upload_part_copy(Bucket=gw_bucket, Key="parts/dst", UploadId=up, PartNumber=2,
                                CopySource={"Bucket": gw_bucket, "Key": "parts/tail"})
    refusals = [] if gw.origin_kind == "moto" else [  # moto checks neither (S3 does)
        ({"CopySourceRange": f"bytes=0-{len(body)}"}, "InvalidRange"),
        ({"CopySourceIfMatch": '"0123"'}, "PreconditionFailed")]
    for bad, want in refusals:
        with pytest.raises(ClientError) as ei:
            gw_s3.upload_part_copy(Bucket=gw_bucket, Key="parts/dst", UploadId=up, PartNumber=3, CopySource=source,
                                   **bad)
        assert client_error(ei)[1] == want, bad
    listed = gw_s3.list_parts(Bucket=gw_bucket, Key="parts/dst", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, 5 * MiB), (2, len(tail))]
    gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="parts/dst", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": r1["CopyPartResult"]["ETag"]},
        {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]}]})
    resp, got = get_body(gw_s3, gw_bucket, "parts/dst")
    assert sha256(got) == sha256(body[: 5 * MiB] + tail)


def test_conditional_multipart_completion(gw, gw_s3, gw_bucket):
    """CompleteMultipartUpload with If-None-Match: * over an existing key is 412 and the
    key keeps its object; with If-Match its own ETag it completes."""
    if gw.origin_kind == "moto":
        pytest.skip("moto ignores a completion's conditions (S3 checks them)")
    first = gw_s3.put_object(Bucket=gw_bucket, Key="cond/mpu", Body=b"first")

    def complete(**condition):
        up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="cond/mpu")["UploadId"]
        part = gw_s3.upload_part(Bucket=gw_bucket, Key="cond/mpu", UploadId=up, PartNumber=1, Body=b"second")
        return gw_s3.complete_multipart_upload(
            Bucket=gw_bucket, Key="cond/mpu", UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}, **condition)

    with pytest.raises(ClientError) as ei:
        complete(IfNoneMatch="*")
    assert client_error(ei) == (412, "PreconditionFailed")
    assert get_body(gw_s3, gw_bucket, "cond/mpu")[1] == b"first"
    complete(IfMatch=first["ETag"])
    assert get_body(gw_s3, gw_bucket, "cond/mpu")[1] == b"second"


def test_get_object_attributes(gw, gw_s3, gw_bucket):
    """GetObjectAttributes: the ETag (unquoted), size and storage class of an object,
    and a multipart object's parts, paged (over an Azure origin a blob has no parts)."""
    put = gw_s3.put_object(Bucket=gw_bucket, Key="attrs/one", Body=b"x" * 1000)
    asked = ["ETag", "ObjectSize", "StorageClass", "ObjectParts"]
    r = gw_s3.get_object_attributes(Bucket=gw_bucket, Key="attrs/one", ObjectAttributes=asked)
    assert (r["ETag"], r["ObjectSize"], r["StorageClass"]) == (put["ETag"].strip('"'), 1000, "STANDARD")
    body = payload(11 * MiB, 41)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    gw_s3.upload_fileobj(io.BytesIO(body), gw_bucket, "attrs/parts", Config=cfg)
    r = gw_s3.get_object_attributes(Bucket=gw_bucket, Key="attrs/parts", ObjectAttributes=asked,
                                    MaxParts=1, PartNumberMarker=1)
    assert r["ObjectSize"] == len(body)
    if gw.origin_kind == "stub":  # moto answers without ObjectParts (relayed as it is)
        parts = r["ObjectParts"]
        assert parts.get("TotalPartsCount", parts.get("PartsCount")) == 3
        assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(2, 5 * MiB)]
        assert parts["IsTruncated"] and parts["NextPartNumberMarker"] == 2
    elif gw.origin_kind == "azurite":
        assert "ObjectParts" not in r
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object_attributes(Bucket=gw_bucket, Key="attrs/none", ObjectAttributes=asked)
    assert client_error(ei)[0] == 404


def test_conditional_deletes(gw, gw_s3, gw_bucket):
    """DeleteObject and DeleteObjects with If-Match, a size or a modification time: a
    failed condition is 412 (an entry of DeleteObjects' Errors) and the object stays;
    one that holds deletes it; nothing stored is 204."""
    put = gw_s3.put_object(Bucket=gw_bucket, Key="cond/del", Body=b"0123456789")
    head = gw_s3.head_object(Bucket=gw_bucket, Key="cond/del")
    refusals = [{"IfMatch": '"0123"'}]
    if gw.origin_kind != "moto":  # moto ignores a delete's conditions (S3 checks If-Match)
        refusals += [{"IfMatchSize": 11}, {"IfMatchLastModifiedTime": head["LastModified"] - dt.timedelta(days=1)}]
    for condition in refusals:
        with pytest.raises(ClientError) as ei:
            gw_s3.delete_object(Bucket=gw_bucket, Key="cond/del", **condition)
        assert client_error(ei) == (412, "PreconditionFailed"), condition
        assert gw_s3.head_object(Bucket=gw_bucket, Key="cond/del")["ETag"] == put["ETag"], condition
    if gw.origin_kind != "moto":
        r = gw_s3.delete_objects(Bucket=gw_bucket, Delete={"Objects": [{"Key": "cond/del", "ETag": '"0123"'}]})
        assert [(e["Key"], e["Code"]) for e in r["Errors"]] == [("cond/del", "PreconditionFailed")]
        assert gw_s3.head_object(Bucket=gw_bucket, Key="cond/del")["ETag"] == put["ETag"]
    gw_s3.delete_object(Bucket=gw_bucket, Key="cond/del", IfMatch=put["ETag"], IfMatchSize=10)
    with pytest.raises(ClientError) as ei:
        gw_s3.head_object(Bucket=gw_bucket, Key="cond/del")
    assert client_error(ei)[0] == 404
    r = gw_s3.delete_object(Bucket=gw_bucket, Key="cond/del", IfMatch=put["ETag"])
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_list_object_versions_through_the_gateway(gw_s3, gw_bucket):
    """ListObjectVersions through the gateway (answered from its own listing): every object
    once as its latest `null` version, paged."""
    keys = ["k0", "k1", "k2", "sub/k3"]
    for k in keys:
        gw_s3.put_object(Bucket=gw_bucket, Key=k, Body=k.encode())
    pages = gw_s3.get_paginator("list_object_versions").paginate(Bucket=gw_bucket, PaginationConfig={"PageSize": 3})
    versions = [v for page in pages for v in page.get("Versions", [])]
    assert [v["Key"] for v in versions] == keys
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in versions)


def test_gateway_errors_are_s3s_short_text_and_part_numbers_are_checked(gw_s3, gw_bucket):
    """What the cache or the origin said stays in the gateway's log: a client reads S3's
    own message. A part the object does not have is 400 InvalidPart."""
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=gw_bucket, Key="nothing-here")
    assert client_error(ei) == (404, "NoSuchKey")
    assert ei.value.response["Error"]["Message"] == "The specified key does not exist."
    gw_s3.put_object(Bucket=gw_bucket, Key="single", Body=b"one part")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="single", PartNumber=1)["Body"].read() == b"one part"
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=gw_bucket, Key="single", PartNumber=2)
    assert client_error(ei) == (400, "InvalidPart")


def test_acls_read_through_the_gateway(gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="acl-me", Body=b"x")
    acl = gw_s3.get_object_acl(Bucket=gw_bucket, Key="acl-me")
    assert [g["Permission"] for g in acl["Grants"]] == ["FULL_CONTROL"]
    assert gw_s3.get_bucket_acl(Bucket=gw_bucket)["Grants"][0]["Grantee"]["Type"] == "CanonicalUser"


def test_an_origin_refusal_reaches_the_client_in_the_origins_words(gw, gw_s3, gw_bucket):
    """A conditional PutObject the origin refuses: the client reads the origin's own
    message (and code and status), not the gateway's account of the exchange."""
    gw_s3.put_object(Bucket=gw_bucket, Key="cond", Body=b"first")
    with pytest.raises(ClientError) as ei:
        gw_s3.put_object(Bucket=gw_bucket, Key="cond", Body=b"second", IfMatch='"0123456789abcdef"')
    assert client_error(ei) == (412, "PreconditionFailed")
    # An S3 origin's words, or an Azure origin's (with its request id and time) under the
    # S3 code the client reads.
    words = {"azurite": "The condition specified using HTTP conditional header(s) is not met."}
    expected = words.get(gw.origin_kind, "At least one of the pre-conditions you specified did not hold")
    assert ei.value.response["Error"]["Message"].startswith(expected)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="cond")["Body"].read() == b"first"


def test_folder_markers_and_keys_beside_their_folders_through_the_cache(gw, gw_s3, gw_bucket):
    """Folder markers (what the AWS console, rclone and S3A write), 'a' beside 'a/b' and
    doubled slashes are stored by the default origin and read through the cache, twice."""
    s3, bucket = gw_s3, gw_bucket
    bodies = {
        "fm/": b"", "fm/a": payload(70_000, 30), "fm/a/b": payload(3 * BLOCK + 5, 31),
        "fm/a/b/": b"", "fm//x": payload(10, 32), "fm/c/": b"not empty",
    }
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    for _ in range(2):
        for key, body in bodies.items():
            resp, got = get_body(s3, bucket, key)
            assert sha256(got) == sha256(body) and resp["ContentLength"] == len(body), key
    resp, got = get_body(s3, bucket, "fm/a/b", Range="bytes=1048570-2097160")
    assert got == bodies["fm/a/b"][1048570:2097161]
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="fm/")["Contents"]]
    assert listed == sorted(bodies), listed
    resp = s3.list_objects_v2(Bucket=bucket, Prefix="fm/a/", Delimiter="/")
    assert [o["Key"] for o in resp["Contents"]] == ["fm/a/b"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["fm/a/b/"]


def test_dot_segment_keys_are_refused_at_the_gateway_and_reach_no_origin(gw, gw_s3, gw_bucket):
    """The HTTP client a gateway reaches its origin with resolves '.' and '..' segments
    (and their percent-encodings) as a URL does, into another object's name; the gateway
    refuses such keys rather than writing or reading another object."""
    s3, bucket = gw_s3, gw_bucket
    s3.put_object(Bucket=bucket, Key="dots/b", Body=b"kept")
    for key in ("dots/../dots/b", "dots/./b", "..", "dots/.."):
        with pytest.raises(ClientError) as ei:
            s3.put_object(Bucket=bucket, Key=key, Body=b"overwrite?")
        assert client_error(ei) == (400, "InvalidArgument"), key
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=bucket, Key=key)
        assert client_error(ei)[0] == 400, key
    assert get_body(s3, bucket, "dots/b")[1] == b"kept"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dots")["Contents"]] == ["dots/b"]


# ------------------------------------------------------------------ from the origin stub's own suite
# (folded in 2026-12-05: every case now runs on every target)

# The stub suite's keys that need careful encoding (without "100% done.txt").
SUITE_ODD_KEYS = [k for k in ODD_KEYS if k != "100% done.txt"]


def suite_payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def gen_sha(gw, which: str = "big") -> str:
    b, k, size, seed = gw.generated[which]
    return generated.sha256_of_generated(b, k, size, seed)


@pytest.fixture
def gw_listing_bucket(gw_s3, gw_bucket):
    """A bucket holding SUITE_ODD_KEYS; gives (bucket, {key: ETag})."""
    etags = {}
    for i, key in enumerate(SUITE_ODD_KEYS):
        body = f"content of {key} #{i}".encode()
        etags[key] = gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=body)["ETag"]
    return gw_bucket, etags


def test_head_bucket_and_location(gw_s3, gw_bucket):
    assert gw_s3.head_bucket(Bucket=gw_bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    loc = gw_s3.get_bucket_location(Bucket=gw_bucket)
    # Real S3 answers an empty LocationConstraint for us-east-1.
    assert loc.get("LocationConstraint") in (None, "", "us-east-1")


def test_create_and_delete_bucket(gw_s3, gw):
    name = unique("tmp")
    gw_s3.create_bucket(Bucket=name)
    if gw.origin_kind == "stub":
        assert (gw.data_dir / name).is_dir(), "a bucket created through S3 must be a data-dir folder"
    gw_s3.put_object(Bucket=name, Key="x", Body=b"x")
    with pytest.raises(ClientError) as ei:
        gw_s3.delete_bucket(Bucket=name)
    assert client_error(ei) == (409, "BucketNotEmpty")
    gw_s3.delete_object(Bucket=name, Key="x")
    gw_s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as ei:
        gw_s3.head_bucket(Bucket=name)
    assert client_error(ei)[0] == 404
    assert name not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]


def test_list_v2_no_delimiter(gw_s3, gw_listing_bucket):
    name, etags = gw_listing_bucket
    resp = gw_s3.list_objects_v2(Bucket=name)
    keys = [o["Key"] for o in resp["Contents"]]
    # S3 orders by UTF-8 bytes, which equals code point order.
    assert keys == sorted(SUITE_ODD_KEYS, key=lambda k: k.encode())
    assert resp["KeyCount"] == len(SUITE_ODD_KEYS)
    assert resp["IsTruncated"] is False
    for o in resp["Contents"]:
        assert o["ETag"] == etags[o["Key"]]
        assert o["Size"] == len(f"content of {o['Key']} #{SUITE_ODD_KEYS.index(o['Key'])}".encode())


def test_list_v2_delimiter_and_prefix(gw_s3, gw_listing_bucket):
    name, _ = gw_listing_bucket
    resp = gw_s3.list_objects_v2(Bucket=name, Delimiter="/")
    assert sorted(o["Key"] for o in resp.get("Contents", [])) == sorted(
        ["a.txt", "plus+sign.txt", "percent%20literal.txt", "amp&lt<gt>.txt", "q?mark#hash.txt"]
    )
    assert sorted(p["Prefix"] for p in resp["CommonPrefixes"]) == sorted(
        ["dir/", "dir with space/", "ünïcødé/", "z/"]
    )
    resp = gw_s3.list_objects_v2(Bucket=name, Prefix="dir/", Delimiter="/")
    assert [o["Key"] for o in resp["Contents"]] == ["dir/b.txt"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["dir/sub/"]
    resp = gw_s3.list_objects_v2(Bucket=name, Prefix="dir")
    assert [o["Key"] for o in resp["Contents"]] == sorted(
        ["dir/b.txt", "dir/sub/c.txt", "dir with space/d e.txt"], key=lambda k: k.encode()
    )
    resp = gw_s3.list_objects_v2(Bucket=name, Prefix="ünïcødé/")
    assert [o["Key"] for o in resp["Contents"]] == ["ünïcødé/ключ.txt"]
    resp = gw_s3.list_objects_v2(Bucket=name, Prefix="nothing-here/")
    assert resp["KeyCount"] == 0 and "Contents" not in resp


def test_list_v2_start_after(gw_s3, gw_listing_bucket):
    name, _ = gw_listing_bucket
    expected = sorted(SUITE_ODD_KEYS, key=lambda k: k.encode())
    resp = gw_s3.list_objects_v2(Bucket=name, StartAfter="dir/b.txt")
    assert [o["Key"] for o in resp["Contents"]] == [k for k in expected if k.encode() > b"dir/b.txt"]


def test_list_v2_paginator_small_pages(gw_s3, gw_listing_bucket):
    name, _ = gw_listing_bucket
    pages = list(gw_s3.get_paginator("list_objects_v2").paginate(Bucket=name, PaginationConfig={"PageSize": 3}))
    assert len(pages) == -(-len(SUITE_ODD_KEYS) // 3)
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert keys == sorted(SUITE_ODD_KEYS, key=lambda k: k.encode())
    for p in pages[:-1]:
        assert p["IsTruncated"] is True and p["NextContinuationToken"]
        assert p["KeyCount"] == 3 and p["MaxKeys"] == 3
    assert pages[-1]["IsTruncated"] is False


def test_list_v2_paginator_with_delimiter(gw_s3, gw_listing_bucket):
    name, _ = gw_listing_bucket
    pages = list(
        gw_s3.get_paginator("list_objects_v2").paginate(Bucket=name, Delimiter="/", PaginationConfig={"PageSize": 2})
    )
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
    assert sorted(keys) == sorted(["a.txt", "plus+sign.txt", "percent%20literal.txt", "amp&lt<gt>.txt", "q?mark#hash.txt"])
    assert sorted(prefixes) == sorted(["dir/", "dir with space/", "ünïcødé/", "z/"])
    # Keys and common prefixes both count towards MaxKeys.
    for p in pages:
        assert len(p.get("Contents", [])) + len(p.get("CommonPrefixes", [])) <= 2
    assert len(pages) == -(-9 // 2)


def test_list_v1_marker_paging(gw_s3, gw_listing_bucket):
    name, _ = gw_listing_bucket
    expected = sorted(SUITE_ODD_KEYS, key=lambda k: k.encode())
    pages = list(gw_s3.get_paginator("list_objects").paginate(Bucket=name, PaginationConfig={"PageSize": 4}))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == expected
    assert len(pages) == 3
    resp = gw_s3.list_objects(Bucket=name, Marker="dir/sub/c.txt")
    assert [o["Key"] for o in resp["Contents"]] == [k for k in expected if k.encode() > "dir/sub/c.txt".encode()]
    resp = gw_s3.list_objects(Bucket=name, Delimiter="/", MaxKeys=2)
    assert resp["IsTruncated"] is True
    assert resp["NextMarker"]


def test_list_generated_bucket(gw, gw_s3):
    for name, (b, k, size, _) in gw.generated.items():
        got = {o["Key"]: o for o in gw_s3.list_objects_v2(Bucket=b, Prefix=k)["Contents"]}
        assert got[k]["Size"] == size, name
        assert got[k]["ETag"] == gw.generated_etag(name), name


def test_content_headers_are_kept(gw, gw_s3, gw_bucket):
    """The gw keeps Content-Encoding (without aws-chunked), Content-Language,
    Content-Disposition and Cache-Control, as S3 does."""
    gw_s3.put_object(
        Bucket=gw_bucket, Key="obj/headers.bin", Body=b"x" * 1000, ContentEncoding="gzip",
        ContentLanguage="de", ContentDisposition="inline", CacheControl="no-cache",
    )
    head = gw_s3.head_object(Bucket=gw_bucket, Key="obj/headers.bin")
    assert (head.get("ContentEncoding"), head.get("ContentLanguage"),
            head.get("ContentDisposition"), head.get("CacheControl")) == ("gzip", "de", "inline", "no-cache")
    plain = gw_s3.put_object(Bucket=gw_bucket, Key="obj/plain.bin", Body=b"y")
    assert "ContentEncoding" not in gw_s3.head_object(Bucket=gw_bucket, Key="obj/plain.bin"), plain


def test_put_head_get_with_metadata(gw_s3, gw_bucket, gw):
    body = suite_payload(100_000, 1)
    put = gw_s3.put_object(
        Bucket=gw_bucket, Key="obj/with-meta.bin", Body=body, ContentType="application/x-talon",
        Metadata={"colour": "blue", "owner": "sdk-suite"},
    )
    head = gw_s3.head_object(Bucket=gw_bucket, Key="obj/with-meta.bin")
    assert head["ContentLength"] == len(body)
    assert head["ETag"] == put["ETag"]
    assert head["ETag"].startswith('"') and head["ETag"].endswith('"')
    assert head["ContentType"] == "application/x-talon"
    assert head["Metadata"] == {"colour": "blue", "owner": "sdk-suite"}
    assert isinstance(head["LastModified"], dt.datetime)
    assert head["ResponseMetadata"]["HTTPHeaders"].get("accept-ranges") == "bytes"
    resp, got = get_body(gw_s3, gw_bucket, "obj/with-meta.bin")
    assert sha256(got) == sha256(body)
    assert resp["ETag"] == head["ETag"]
    assert resp["ContentLength"] == len(body)
    assert resp["Metadata"] == head["Metadata"]
    assert resp["LastModified"] == head["LastModified"]
    # A single-part PUT's ETag is the MD5 of the body, as in S3 (not over an Azure origin).
    assert put["ETag"] == '"' + hashlib.md5(body).hexdigest() + '"' or not gw.s3_multipart_etags
    # Writes land in the origin's data folder.
    if gw.origin_kind == "stub":
        assert sha256((gw.data_dir / gw_bucket / "obj" / "with-meta.bin").read_bytes()) == sha256(body)


def test_odd_keys_roundtrip(gw_s3, gw_listing_bucket):
    name, etags = gw_listing_bucket
    for i, key in enumerate(SUITE_ODD_KEYS):
        head = gw_s3.head_object(Bucket=name, Key=key)
        assert head["ETag"] == etags[key], key
        _, got = get_body(gw_s3, name, key)
        assert got == f"content of {key} #{i}".encode(), key


def test_get_generated_small_and_odd(gw, gw_s3):
    for which in ("small", "odd"):
        b, k, size, seed = gw.generated[which]
        resp, got = get_body(gw_s3, b, k)
        assert len(got) == size
        assert sha256(got) == gen_sha(gw, which)
        assert resp["ETag"] == gw.generated_etag(which)
        assert resp["ContentType"] == gw.default_content_type
        head = gw_s3.head_object(Bucket=b, Key=k)
        assert head["ETag"] == resp["ETag"] and head["ContentLength"] == size


def test_ranges_far_into_a_huge_generated_object(gw, gw_s3):
    b, k, size, seed = gw.generated["huge"]
    head = gw_s3.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == size
    assert head["ETag"] == generated.generated_etag(b, k, size, seed)
    for first, last in ((0, 99), ((1 << 32) + 3, (1 << 32) + 4099), (size - 1000, size - 1), (size - 7, size - 7)):
        resp, got = get_body(gw_s3, b, k, Range=f"bytes={first}-{last}")
        assert resp["ContentRange"] == f"bytes {first}-{last}/{size}"
        assert got == generated.generated_bytes(b, k, seed, first, last + 1), (first, last)
    resp, got = get_body(gw_s3, b, k, Range="bytes=-12")
    assert got == generated.generated_bytes(b, k, seed, size - 12, size)


def test_conditional_get_dates(gw_s3, gw_bucket):
    body = b"dated body"
    gw_s3.put_object(Bucket=gw_bucket, Key="d", Body=body)
    lm = gw_s3.head_object(Bucket=gw_bucket, Key="d")["LastModified"]
    past, future = lm - dt.timedelta(days=1), lm + dt.timedelta(days=1)
    _, got = get_body(gw_s3, gw_bucket, "d", IfModifiedSince=past)
    assert got == body
    for when in (lm, future):
        with pytest.raises(ClientError) as ei:
            gw_s3.get_object(Bucket=gw_bucket, Key="d", IfModifiedSince=when)
        assert client_error(ei)[0] == 304
    _, got = get_body(gw_s3, gw_bucket, "d", IfUnmodifiedSince=future)
    assert got == body
    _, got = get_body(gw_s3, gw_bucket, "d", IfUnmodifiedSince=lm)
    assert got == body
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=gw_bucket, Key="d", IfUnmodifiedSince=past)
    assert client_error(ei) == (412, "PreconditionFailed")


def test_presigned_get(gw_s3, gw_bucket):
    body = suite_payload(5000, 2)
    gw_s3.put_object(Bucket=gw_bucket, Key="pre/signed obj.bin", Body=body)
    url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": gw_bucket, "Key": "pre/signed obj.bin"}, ExpiresIn=300)
    assert "X-Amz-Signature=" in url
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200, resp.text
    assert sha256(resp.content) == sha256(body)
    resp = requests.get(url, headers={"Range": "bytes=100-199"}, timeout=30)
    assert resp.status_code == 206 and resp.content == body[100:200]
    for key in SUITE_ODD_KEYS:
        gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=key.encode())
        url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": gw_bucket, "Key": key}, ExpiresIn=300)
        resp = requests.get(url, timeout=30)
        assert resp.status_code == 200 and resp.content == key.encode(), (key, resp.status_code, resp.text[:300])


def test_presigned_get_response_overrides(gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="ov", Body=b"override me", ContentType="application/octet-stream")
    url = gw_s3.generate_presigned_url(
        "get_object",
        Params={"Bucket": gw_bucket, "Key": "ov", "ResponseContentType": "text/plain; charset=utf-8",
                "ResponseContentDisposition": 'attachment; filename="x.txt"'},
        ExpiresIn=300,
    )
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200 and resp.content == b"override me"
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert resp.headers["Content-Disposition"] == 'attachment; filename="x.txt"'


def test_presigned_put(gw_s3, gw_bucket):
    body = b"uploaded through a presigned PUT"
    url = gw_s3.generate_presigned_url("put_object", Params={"Bucket": gw_bucket, "Key": "pp"}, ExpiresIn=300)
    resp = requests.put(url, data=body, timeout=30)
    assert resp.status_code == 200, resp.text
    _, got = get_body(gw_s3, gw_bucket, "pp")
    assert got == body


def test_response_content_type_override(gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="rct", Body=b"{}", ContentType="application/octet-stream")
    resp = gw_s3.get_object(
        Bucket=gw_bucket, Key="rct", ResponseContentType="application/json", ResponseCacheControl="no-cache",
        ResponseContentDisposition="inline", ResponseContentLanguage="en", ResponseContentEncoding="identity",
        ResponseExpires=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc),
    )
    assert resp["Body"].read() == b"{}"
    assert resp["ContentType"] == "application/json"
    assert resp["CacheControl"] == "no-cache"
    assert resp["ContentDisposition"] == "inline"
    assert resp["ContentLanguage"] == "en"
    assert resp["ContentEncoding"] == "identity"
    # The stored content type is unchanged.
    assert gw_s3.head_object(Bucket=gw_bucket, Key="rct")["ContentType"] == "application/octet-stream"


def test_put_default_checksums(gw_s3, gw_bucket):
    """botocore's defaults (flexible CRC32 checksums) for bytes, file objects and an empty body."""
    bodies = {"bytes": suite_payload(300_000, 3), "empty": b"", "small": b"x"}
    for key, body in bodies.items():
        gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=body)
        _, got = get_body(gw_s3, gw_bucket, key)
        assert sha256(got) == sha256(body), key
    body = suite_payload(1_000_000, 4)
    gw_s3.put_object(Bucket=gw_bucket, Key="fileobj", Body=io.BytesIO(body))
    _, got = get_body(gw_s3, gw_bucket, "fileobj")
    assert sha256(got) == sha256(body)
    gw_s3.upload_fileobj(io.BytesIO(body), gw_bucket, "upload_fileobj")
    _, got = get_body(gw_s3, gw_bucket, "upload_fileobj")
    assert sha256(got) == sha256(body)


@pytest.mark.parametrize("algorithm", ["CRC32", "SHA1", "SHA256"])
def test_put_explicit_checksum_algorithms(gw_s3, gw_bucket, algorithm):
    """botocore computes these natively; CRC32C/CRC64NVME need awscrt and are covered in test_s3_payload_modes."""
    body = suite_payload(70_000, 5)
    gw_s3.put_object(Bucket=gw_bucket, Key=f"ck-{algorithm}", Body=body, ChecksumAlgorithm=algorithm)
    _, got = get_body(gw_s3, gw_bucket, f"ck-{algorithm}")
    assert sha256(got) == sha256(body)


def test_put_wrong_checksum_is_bad_digest(gw_s3, gw_bucket):
    body = b"the real body"
    wrong_sha256 = base64.b64encode(hashlib.sha256(b"another body").digest()).decode()
    with pytest.raises(ClientError) as ei:
        gw_s3.put_object(Bucket=gw_bucket, Key="bad-sha", Body=body, ChecksumSHA256=wrong_sha256)
    assert client_error(ei) == (400, "BadDigest")
    wrong_md5 = base64.b64encode(hashlib.md5(b"another body").digest()).decode()
    with pytest.raises(ClientError) as ei:
        gw_s3.put_object(Bucket=gw_bucket, Key="bad-md5", Body=body, ContentMD5=wrong_md5)
    assert client_error(ei) == (400, "BadDigest")
    listed = gw_s3.list_objects_v2(Bucket=gw_bucket).get("Contents", [])
    assert listed == [], "a rejected PUT must not create the object"


def test_multipart_etag_is_md5_of_part_md5s(gw_s3, gw_bucket, tmp_path):
    """As in S3: "<md5 of the concatenated binary part MD5s>-<parts>"."""
    body = suite_payload(11 * MiB, 7)
    src = tmp_path / "eleven.bin"
    src.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    gw_s3.upload_file(str(src), gw_bucket, "eleven", Config=cfg)
    parts = [body[i : i + 5 * MiB] for i in range(0, len(body), 5 * MiB)]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert gw_s3.head_object(Bucket=gw_bucket, Key="eleven")["ETag"] == f'"{expected}-{len(parts)}"'


def test_multipart_low_level_and_abort(gw, gw_s3, gw_bucket):
    small = [b"a" * 1024, b"b" * 1024]
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="too-small")
    parts = []
    for n, p in enumerate(small, start=1):
        r = gw_s3.upload_part(Bucket=gw_bucket, Key="too-small", UploadId=up["UploadId"], PartNumber=n, Body=p)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    with pytest.raises(ClientError) as ei:
        gw_s3.complete_multipart_upload(
            Bucket=gw_bucket, Key="too-small", UploadId=up["UploadId"], MultipartUpload={"Parts": parts}
        )
    assert client_error(ei) == (400, "EntityTooSmall")
    gw_s3.abort_multipart_upload(Bucket=gw_bucket, Key="too-small", UploadId=up["UploadId"])
    with pytest.raises(ClientError) as ei:
        gw_s3.head_object(Bucket=gw_bucket, Key="too-small")
    assert client_error(ei)[0] == 404
    # A single (last) part may be small.
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="one-part", ContentType="text/x-one")
    r = gw_s3.upload_part(Bucket=gw_bucket, Key="one-part", UploadId=up["UploadId"], PartNumber=1, Body=b"only part")
    done = gw_s3.complete_multipart_upload(
        Bucket=gw_bucket, Key="one-part", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]},
    )
    assert done["ETag"].endswith('-1"') or not gw.s3_multipart_etags
    resp, got = get_body(gw_s3, gw_bucket, "one-part")
    assert got == b"only part" and resp["ETag"] == done["ETag"] and resp["ContentType"] == "text/x-one"
    # Completing an aborted upload is NoSuchUpload.
    with pytest.raises(ClientError) as ei:
        gw_s3.complete_multipart_upload(
            Bucket=gw_bucket, Key="too-small", UploadId=up["UploadId"] + "x", MultipartUpload={"Parts": parts}
        )
    assert client_error(ei) == (404, "NoSuchUpload")


def test_download_file_generated_64mib_parallel(gw, gw_s3, tmp_path):
    b, k, size, seed = gw.generated["big"]
    head = gw_s3.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == size
    assert head["ETag"] == gw.generated_etag("big")
    dest = tmp_path / "64m.bin"
    cfg = TransferConfig(multipart_threshold=4 * MiB, multipart_chunksize=4 * MiB, max_concurrency=4)
    gw_s3.download_file(b, k, str(dest), Config=cfg)
    assert dest.stat().st_size == size
    h = hashlib.sha256()
    with open(dest, "rb") as f:
        for chunk in iter(lambda: f.read(8 * MiB), b""):
            h.update(chunk)
    assert h.hexdigest() == gen_sha(gw, "big")


def test_copy_object_onto_itself(gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="self", Body=b"same bytes", ContentType="text/x-old", Metadata={"v": "1"})
    # Without a change, S3 refuses: InvalidRequest.
    with pytest.raises(ClientError) as ei:
        gw_s3.copy_object(Bucket=gw_bucket, Key="self", CopySource={"Bucket": gw_bucket, "Key": "self"})
    assert client_error(ei) == (400, "InvalidRequest")
    # Replacing the metadata in place is the usual way to change a content type.
    gw_s3.copy_object(Bucket=gw_bucket, Key="self", CopySource={"Bucket": gw_bucket, "Key": "self"},
                   MetadataDirective="REPLACE", ContentType="text/x-new", Metadata={"v": "2"})
    resp, got = get_body(gw_s3, gw_bucket, "self")
    assert got == b"same bytes"
    assert resp["ContentType"] == "text/x-new" and resp["Metadata"] == {"v": "2"}


def test_invalid_bucket_names(gw_s3):
    for name in ("UpperCase", "ab", "under_score", "-leading", "a" * 64):
        with pytest.raises(ClientError) as ei:
            gw_s3.create_bucket(Bucket=name)
        assert client_error(ei) == (400, "InvalidBucketName"), name


def test_second_credential_pair_works(gw, gw_bucket):
    ak, sk = gw.s3_credentials[1]
    other = s3_client(gw, access_key=ak, secret_key=sk)
    other.put_object(Bucket=gw_bucket, Key="by-second-key", Body=b"second")
    assert other.get_object(Bucket=gw_bucket, Key="by-second-key")["Body"].read() == b"second"


def test_list_object_versions_without_versioning(gw_s3, gw_bucket):
    """ListObjectVersions on an origin without versioning (ceph/s3-tests' fixtures clean
    up with it): every object once, as its latest `null` version, paged by key marker;
    `versionId=null` reads the object."""
    keys = ["a", "b/1", "b/2", "c", "d"]
    for k in keys:
        gw_s3.put_object(Bucket=gw_bucket, Key=k, Body=k.encode())
    resp = gw_s3.list_object_versions(Bucket=gw_bucket)
    assert [v["Key"] for v in resp["Versions"]] == keys
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in resp["Versions"])
    assert resp["IsTruncated"] is False
    heads = {k: gw_s3.head_object(Bucket=gw_bucket, Key=k)["ETag"] for k in keys}
    assert {v["Key"]: v["ETag"] for v in resp["Versions"]} == heads
    pages = gw_s3.get_paginator("list_object_versions").paginate(Bucket=gw_bucket, PaginationConfig={"PageSize": 2})
    assert [v["Key"] for page in pages for v in page.get("Versions", [])] == keys
    rolled = gw_s3.list_object_versions(Bucket=gw_bucket, Delimiter="/")
    assert [v["Key"] for v in rolled["Versions"]] == ["a", "c", "d"]
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["b/"]
    assert gw_s3.get_object(Bucket=gw_bucket, Key="a", VersionId="null")["Body"].read() == b"a"
    with pytest.raises(ClientError) as ei:
        gw_s3.list_object_versions(Bucket=unique("missing"))
    assert ei.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_part_the_object_does_not_have_is_invalid_part(gw_s3, gw_bucket):
    """GET or HEAD ?partNumber=N beyond an object's parts is 400 InvalidPart, as S3 answers
    (ceph/s3-tests' test_non_multipart_get_part); part 1 of a single-part object is the
    whole object."""
    gw_s3.put_object(Bucket=gw_bucket, Key="single", Body=b"one part")
    resp = gw_s3.get_object(Bucket=gw_bucket, Key="single", PartNumber=1)
    assert resp["Body"].read() == b"one part"
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=gw_bucket, Key="single", PartNumber=2)
    assert client_error(ei) == (400, "InvalidPart")
    with pytest.raises(ClientError) as ei:
        gw_s3.head_object(Bucket=gw_bucket, Key="single", PartNumber=2)
    assert client_error(ei)[0] == 400


def test_a_missing_key_is_answered_in_s3s_words(gw_s3, gw_bucket):
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=gw_bucket, Key="nothing-here")
    assert client_error(ei) == (404, "NoSuchKey")
    assert ei.value.response["Error"]["Message"] == "The specified key does not exist."


def _list_buckets_in_pages(client, prefix: str, page: int) -> list:
    names, token = [], None
    while True:
        kwargs = {"Prefix": prefix, "MaxBuckets": page}
        if token:
            kwargs["ContinuationToken"] = token
        resp = client.list_buckets(**kwargs)
        got = [b["Name"] for b in resp["Buckets"]]
        assert len(got) <= page
        names += got
        token = resp.get("ContinuationToken")
        if not token:
            return names


def test_list_buckets_pages_by_prefix_and_max_buckets(gw_s3):
    prefix = unique("lbp")
    made = sorted(f"{prefix}-{i}" for i in range(3))
    for name in made:
        gw_s3.create_bucket(Bucket=name)
    assert _list_buckets_in_pages(gw_s3, prefix, 2) == made
    resp = gw_s3.list_buckets(Prefix=prefix)
    assert [b["Name"] for b in resp["Buckets"]] == made and "ContinuationToken" not in resp
    assert resp["Prefix"] == prefix
    everything = [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    assert set(made) <= set(everything)


def test_list_v2_with_an_empty_continuation_token_starts_at_the_first_key_and_echoes_it(gw_s3, gw_bucket):
    for k in ("x1", "x2"):
        gw_s3.put_object(Bucket=gw_bucket, Key=k, Body=b"x")
    resp = gw_s3.list_objects_v2(Bucket=gw_bucket, ContinuationToken="")
    assert resp["ContinuationToken"] == ""
    assert [o["Key"] for o in resp["Contents"]] == ["x1", "x2"]


def test_only_the_null_version_exists_without_versioning(gw_s3, gw_bucket):
    gw_s3.put_object(Bucket=gw_bucket, Key="v", Body=b"kept")
    for call in (lambda: gw_s3.get_object(Bucket=gw_bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ"),
                 lambda: gw_s3.delete_object(Bucket=gw_bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ")):
        with pytest.raises(ClientError) as ei:
            call()
        assert client_error(ei) == (400, "InvalidArgument")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="v")["Body"].read() == b"kept"
    gw_s3.delete_object(Bucket=gw_bucket, Key="v", VersionId="null")
    with pytest.raises(ClientError) as ei:
        gw_s3.head_object(Bucket=gw_bucket, Key="v")
    assert client_error(ei)[0] == 404


def test_acls_read_as_the_canned_private_acl_and_writes_are_kept_or_not_implemented(gw, gw_s3, gw_bucket):
    """Every target reads a new object's and bucket's ACL as the canned private one and a
    missing key's as 404; an ACL write is kept where ACLs are kept, else 501."""
    gw_s3.put_object(Bucket=gw_bucket, Key="acl-me", Body=b"x")
    for acl in (gw_s3.get_bucket_acl(Bucket=gw_bucket), gw_s3.get_object_acl(Bucket=gw_bucket, Key="acl-me")):
        owner = acl["Owner"]["ID"]
        assert acl["Grants"] == [{"Grantee": {"ID": owner, "DisplayName": owner, "Type": "CanonicalUser"},
                                  "Permission": "FULL_CONTROL"}]
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object_acl(Bucket=gw_bucket, Key="no-such-key")
    assert client_error(ei) == (404, "NoSuchKey")
    if gw.keeps_acls:
        gw_s3.put_bucket_acl(Bucket=gw_bucket, ACL="public-read")
        grants = gw_s3.get_bucket_acl(Bucket=gw_bucket)["Grants"]
        assert "READ" in [g["Permission"] for g in grants], grants
    else:
        with pytest.raises(ClientError) as ei:
            gw_s3.put_bucket_acl(Bucket=gw_bucket, ACL="public-read")
        assert client_error(ei) == (501, "NotImplemented")


def test_listings_echo_the_prefix_as_botocore_reads_it(gw_s3, gw_bucket):
    """boto3 asks for encoding-type=url and decodes what S3 encodes: every V1 element but
    the Prefix, and the Prefix in V2 and ListObjectVersions. Each echo reads back as sent."""
    prefix = "sp ace+\n/"
    gw_s3.put_object(Bucket=gw_bucket, Key=prefix + "k", Body=b"x")
    v1 = gw_s3.list_objects(Bucket=gw_bucket, Prefix=prefix)
    v2 = gw_s3.list_objects_v2(Bucket=gw_bucket, Prefix=prefix)
    versions = gw_s3.list_object_versions(Bucket=gw_bucket, Prefix=prefix)
    assert v1["Prefix"] == v2["Prefix"] == versions["Prefix"] == prefix
    assert [o["Key"] for o in v1["Contents"]] == [o["Key"] for o in v2["Contents"]] == [prefix + "k"]
    assert [v["Key"] for v in versions["Versions"]] == [prefix + "k"]
