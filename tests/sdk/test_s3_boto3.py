"""boto3 against the stub's S3 API (authenticated stub, SigV4)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import os
import re
import urllib.parse

import numpy as np
import pytest
import requests
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

import generated
from conftest import GENERATED, MiB, SEEDED, client_error, generated_sha, s3_client, sha256, unique

# Keys that need careful encoding in paths and in url-encoded listings.
ODD_KEYS = [
    "a.txt",
    "dir/b.txt",
    "dir/sub/c.txt",
    "dir with space/d e.txt",
    "plus+sign.txt",
    "percent%20literal.txt",
    "amp&lt<gt>.txt",
    "q?mark#hash.txt",
    "ünïcødé/ключ.txt",
    "z/😀 emoji.bin",
]


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def get_body(s3, bucket, key, **kw):
    resp = s3.get_object(Bucket=bucket, Key=key, **kw)
    return resp, resp["Body"].read()


@pytest.fixture(scope="module")
def listing_bucket(s3):
    """A bucket holding ODD_KEYS, shared by the (read-only) listing tests."""
    name = unique("list")
    s3.create_bucket(Bucket=name)
    etags = {}
    for i, key in enumerate(ODD_KEYS):
        body = f"content of {key} #{i}".encode()
        etags[key] = s3.put_object(Bucket=name, Key=key, Body=body)["ETag"]
    return name, etags


# ------------------------------------------------------------------ buckets


def test_list_buckets_sees_created_generated_and_seeded(s3, bucket):
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert bucket in names
    assert "gen" in names, "a --generate bucket must exist without a folder"
    assert "seeded" in names, "a top-level data-dir folder must be a bucket"
    assert names == sorted(names)
    for n in names:  # nothing internal (e.g. a hidden state folder) shows up as a bucket
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", n), n


def test_head_bucket_and_location(s3, bucket):
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    loc = s3.get_bucket_location(Bucket=bucket)
    # Real S3 answers an empty LocationConstraint for us-east-1.
    assert loc.get("LocationConstraint") in (None, "", "us-east-1")


def test_create_and_delete_bucket(s3, stub):
    name = unique("tmp")
    s3.create_bucket(Bucket=name)
    assert (stub.data_dir / name).is_dir(), "a bucket created through S3 must be a data-dir folder"
    s3.put_object(Bucket=name, Key="x", Body=b"x")
    with pytest.raises(ClientError) as ei:
        s3.delete_bucket(Bucket=name)
    assert client_error(ei) == (409, "BucketNotEmpty")
    s3.delete_object(Bucket=name, Key="x")
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as ei:
        s3.head_bucket(Bucket=name)
    assert client_error(ei)[0] == 404
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_seeded_data_dir_objects(s3):
    resp = s3.list_objects_v2(Bucket="seeded")
    assert sorted(o["Key"] for o in resp["Contents"]) == sorted(SEEDED)
    for key, content in SEEDED.items():
        obj = next(o for o in resp["Contents"] if o["Key"] == key)
        assert obj["Size"] == len(content)
        head = s3.head_object(Bucket="seeded", Key=key)
        assert head["ETag"] == obj["ETag"]
        _, body = get_body(s3, "seeded", key)
        assert sha256(body) == sha256(content)


# ------------------------------------------------------------------ listing


def test_list_v2_no_delimiter(s3, listing_bucket):
    name, etags = listing_bucket
    resp = s3.list_objects_v2(Bucket=name)
    keys = [o["Key"] for o in resp["Contents"]]
    # S3 orders by UTF-8 bytes, which equals code point order.
    assert keys == sorted(ODD_KEYS, key=lambda k: k.encode())
    assert resp["KeyCount"] == len(ODD_KEYS)
    assert resp["IsTruncated"] is False
    for o in resp["Contents"]:
        assert o["ETag"] == etags[o["Key"]]
        assert o["Size"] == len(f"content of {o['Key']} #{ODD_KEYS.index(o['Key'])}".encode())


def test_list_v2_delimiter_and_prefix(s3, listing_bucket):
    name, _ = listing_bucket
    resp = s3.list_objects_v2(Bucket=name, Delimiter="/")
    assert sorted(o["Key"] for o in resp.get("Contents", [])) == sorted(
        ["a.txt", "plus+sign.txt", "percent%20literal.txt", "amp&lt<gt>.txt", "q?mark#hash.txt"]
    )
    assert sorted(p["Prefix"] for p in resp["CommonPrefixes"]) == sorted(
        ["dir/", "dir with space/", "ünïcødé/", "z/"]
    )
    resp = s3.list_objects_v2(Bucket=name, Prefix="dir/", Delimiter="/")
    assert [o["Key"] for o in resp["Contents"]] == ["dir/b.txt"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["dir/sub/"]
    resp = s3.list_objects_v2(Bucket=name, Prefix="dir")
    assert [o["Key"] for o in resp["Contents"]] == sorted(
        ["dir/b.txt", "dir/sub/c.txt", "dir with space/d e.txt"], key=lambda k: k.encode()
    )
    resp = s3.list_objects_v2(Bucket=name, Prefix="ünïcødé/")
    assert [o["Key"] for o in resp["Contents"]] == ["ünïcødé/ключ.txt"]
    resp = s3.list_objects_v2(Bucket=name, Prefix="nothing-here/")
    assert resp["KeyCount"] == 0 and "Contents" not in resp


def test_list_v2_start_after(s3, listing_bucket):
    name, _ = listing_bucket
    expected = sorted(ODD_KEYS, key=lambda k: k.encode())
    resp = s3.list_objects_v2(Bucket=name, StartAfter="dir/b.txt")
    assert [o["Key"] for o in resp["Contents"]] == [k for k in expected if k.encode() > b"dir/b.txt"]


def test_list_v2_paginator_small_pages(s3, listing_bucket):
    name, _ = listing_bucket
    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=name, PaginationConfig={"PageSize": 3}))
    assert len(pages) == -(-len(ODD_KEYS) // 3)
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert keys == sorted(ODD_KEYS, key=lambda k: k.encode())
    for p in pages[:-1]:
        assert p["IsTruncated"] is True and p["NextContinuationToken"]
        assert p["KeyCount"] == 3 and p["MaxKeys"] == 3
    assert pages[-1]["IsTruncated"] is False


def test_list_v2_paginator_with_delimiter(s3, listing_bucket):
    name, _ = listing_bucket
    pages = list(
        s3.get_paginator("list_objects_v2").paginate(Bucket=name, Delimiter="/", PaginationConfig={"PageSize": 2})
    )
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
    assert sorted(keys) == sorted(["a.txt", "plus+sign.txt", "percent%20literal.txt", "amp&lt<gt>.txt", "q?mark#hash.txt"])
    assert sorted(prefixes) == sorted(["dir/", "dir with space/", "ünïcødé/", "z/"])
    # Keys and common prefixes both count towards MaxKeys.
    for p in pages:
        assert len(p.get("Contents", [])) + len(p.get("CommonPrefixes", [])) <= 2
    assert len(pages) == -(-9 // 2)


def test_list_v1_marker_paging(s3, listing_bucket):
    name, _ = listing_bucket
    expected = sorted(ODD_KEYS, key=lambda k: k.encode())
    pages = list(s3.get_paginator("list_objects").paginate(Bucket=name, PaginationConfig={"PageSize": 4}))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == expected
    assert len(pages) == 3
    resp = s3.list_objects(Bucket=name, Marker="dir/sub/c.txt")
    assert [o["Key"] for o in resp["Contents"]] == [k for k in expected if k.encode() > "dir/sub/c.txt".encode()]
    resp = s3.list_objects(Bucket=name, Delimiter="/", MaxKeys=2)
    assert resp["IsTruncated"] is True
    assert resp["NextMarker"]


def test_list_generated_bucket(s3):
    resp = s3.list_objects_v2(Bucket="gen")
    got = {o["Key"]: o for o in resp["Contents"]}
    for b, k, size, seed in GENERATED.values():
        assert got[k]["Size"] == size
        assert got[k]["ETag"] == generated.generated_etag(b, k, size, seed)


# ------------------------------------------------------------ head and get


def test_content_headers_are_kept(s3, bucket):
    """The stub keeps Content-Encoding (without aws-chunked), Content-Language,
    Content-Disposition and Cache-Control, as S3 does."""
    s3.put_object(
        Bucket=bucket, Key="obj/headers.bin", Body=b"x" * 1000, ContentEncoding="gzip",
        ContentLanguage="de", ContentDisposition="inline", CacheControl="no-cache",
    )
    head = s3.head_object(Bucket=bucket, Key="obj/headers.bin")
    assert (head.get("ContentEncoding"), head.get("ContentLanguage"),
            head.get("ContentDisposition"), head.get("CacheControl")) == ("gzip", "de", "inline", "no-cache")
    plain = s3.put_object(Bucket=bucket, Key="obj/plain.bin", Body=b"y")
    assert "ContentEncoding" not in s3.head_object(Bucket=bucket, Key="obj/plain.bin"), plain


def test_put_head_get_with_metadata(s3, bucket, stub):
    body = payload(100_000, 1)
    put = s3.put_object(
        Bucket=bucket, Key="obj/with-meta.bin", Body=body, ContentType="application/x-talon",
        Metadata={"colour": "blue", "owner": "sdk-suite"},
    )
    head = s3.head_object(Bucket=bucket, Key="obj/with-meta.bin")
    assert head["ContentLength"] == len(body)
    assert head["ETag"] == put["ETag"]
    assert head["ETag"].startswith('"') and head["ETag"].endswith('"')
    assert head["ContentType"] == "application/x-talon"
    assert head["Metadata"] == {"colour": "blue", "owner": "sdk-suite"}
    assert isinstance(head["LastModified"], dt.datetime)
    assert head["ResponseMetadata"]["HTTPHeaders"].get("accept-ranges") == "bytes"
    resp, got = get_body(s3, bucket, "obj/with-meta.bin")
    assert sha256(got) == sha256(body)
    assert resp["ETag"] == head["ETag"]
    assert resp["ContentLength"] == len(body)
    assert resp["Metadata"] == head["Metadata"]
    assert resp["LastModified"] == head["LastModified"]
    # A single-part PUT's ETag is the MD5 of the body, as in S3.
    assert put["ETag"] == '"' + hashlib.md5(body).hexdigest() + '"'
    # Writes land in the data dir.
    assert sha256((stub.data_dir / bucket / "obj" / "with-meta.bin").read_bytes()) == sha256(body)


def test_odd_keys_roundtrip(s3, listing_bucket):
    name, etags = listing_bucket
    for i, key in enumerate(ODD_KEYS):
        head = s3.head_object(Bucket=name, Key=key)
        assert head["ETag"] == etags[key], key
        _, got = get_body(s3, name, key)
        assert got == f"content of {key} #{i}".encode(), key


def test_get_generated_small_and_odd(s3):
    for which in ("small", "odd"):
        b, k, size, seed = GENERATED[which]
        resp, got = get_body(s3, b, k)
        assert len(got) == size
        assert sha256(got) == generated_sha(which)
        assert resp["ETag"] == generated.generated_etag(b, k, size, seed)
        assert resp["ContentType"] == "application/octet-stream"
        head = s3.head_object(Bucket=b, Key=k)
        assert head["ETag"] == resp["ETag"] and head["ContentLength"] == size


def test_ranged_gets(s3):
    b, k, size, seed = GENERATED["odd"]
    full = generated.generated_bytes(b, k, seed, 0, size)
    cases = [
        ("bytes=0-0", 0, 0),
        ("bytes=10-19", 10, 19),
        ("bytes=4095-8200", 4095, 8200),
        (f"bytes=100000-", 100000, size - 1),
        ("bytes=-50", size - 50, size - 1),
        (f"bytes=-{size + 500}", 0, size - 1),  # suffix longer than the object: whole object
        (f"bytes={size - 3}-{size + 1000}", size - 3, size - 1),  # end clamped
        (f"bytes={size - 1}-", size - 1, size - 1),
    ]
    etag = generated.generated_etag(b, k, size, seed)
    for rng, first, last in cases:
        resp, got = get_body(s3, b, k, Range=rng)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert resp["ContentRange"] == f"bytes {first}-{last}/{size}", rng
        assert resp["ContentLength"] == last - first + 1, rng
        assert sha256(got) == sha256(full[first : last + 1]), rng
        assert resp["ETag"] == etag, rng


def test_ranges_far_into_a_huge_generated_object(s3):
    b, k, size, seed = GENERATED["huge"]
    head = s3.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == size
    assert head["ETag"] == generated.generated_etag(b, k, size, seed)
    for first, last in ((0, 99), ((1 << 32) + 3, (1 << 32) + 4099), (size - 1000, size - 1), (size - 7, size - 7)):
        resp, got = get_body(s3, b, k, Range=f"bytes={first}-{last}")
        assert resp["ContentRange"] == f"bytes {first}-{last}/{size}"
        assert got == generated.generated_bytes(b, k, seed, first, last + 1), (first, last)
    resp, got = get_body(s3, b, k, Range="bytes=-12")
    assert got == generated.generated_bytes(b, k, seed, size - 12, size)


def test_invalid_range_416(s3, bucket):
    b, k, size, _ = GENERATED["small"]
    for rng in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}"):
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=b, Key=k, Range=rng)
        assert client_error(ei) == (416, "InvalidRange"), rng
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    for rng in ("bytes=0-0", "bytes=0-", "bytes=-1"):
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=bucket, Key="empty", Range=rng)
        assert client_error(ei) == (416, "InvalidRange"), rng
    # The generated empty object behaves the same.
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket="gen", Key="empty.bin", Range="bytes=0-0")
    assert client_error(ei) == (416, "InvalidRange")
    # Without a range an empty object is a plain 200.
    resp, got = get_body(s3, bucket, "empty")
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200 and got == b""
    resp, got = get_body(s3, "gen", "empty.bin")
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200 and got == b""


def test_malformed_range_ignored(s3):
    b, k, size, seed = GENERATED["small"]
    for rng in ("bytes=1-0", "bytes=abc", "items=0-10"):
        resp, got = get_body(s3, b, k, Range=rng)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200, rng
        assert "ContentRange" not in resp, rng
        assert sha256(got) == generated_sha("small"), rng


def test_conditional_get_etag(s3, bucket):
    body = b"conditional body"
    etag = s3.put_object(Bucket=bucket, Key="c", Body=body)["ETag"]
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert client_error(ei)[0] == 304
    assert ei.value.response["ResponseMetadata"]["HTTPHeaders"].get("etag") == etag
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert client_error(ei)[0] == 304
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert client_error(ei) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="c", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert client_error(ei)[0] == 412
    _, got = get_body(s3, bucket, "c", IfMatch=etag)
    assert got == body
    _, got = get_body(s3, bucket, "c", IfNoneMatch='"0123456789abcdef0123456789abcdef"')
    assert got == body


def test_conditional_get_dates(s3, bucket):
    body = b"dated body"
    s3.put_object(Bucket=bucket, Key="d", Body=body)
    lm = s3.head_object(Bucket=bucket, Key="d")["LastModified"]
    past, future = lm - dt.timedelta(days=1), lm + dt.timedelta(days=1)
    _, got = get_body(s3, bucket, "d", IfModifiedSince=past)
    assert got == body
    for when in (lm, future):
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=bucket, Key="d", IfModifiedSince=when)
        assert client_error(ei)[0] == 304
    _, got = get_body(s3, bucket, "d", IfUnmodifiedSince=future)
    assert got == body
    _, got = get_body(s3, bucket, "d", IfUnmodifiedSince=lm)
    assert got == body
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="d", IfUnmodifiedSince=past)
    assert client_error(ei) == (412, "PreconditionFailed")


def test_conditional_precedence(s3, bucket):
    """S3: If-Match true wins over If-Unmodified-Since false; If-None-Match false wins over If-Modified-Since true."""
    s3.put_object(Bucket=bucket, Key="p", Body=b"precedence")
    head = s3.head_object(Bucket=bucket, Key="p")
    etag, lm = head["ETag"], head["LastModified"]
    past = lm - dt.timedelta(days=1)
    _, got = get_body(s3, bucket, "p", IfMatch=etag, IfUnmodifiedSince=past)
    assert got == b"precedence"
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="p", IfNoneMatch=etag, IfModifiedSince=past)
    assert client_error(ei)[0] == 304


# ------------------------------------------------------------ presigned


def test_presigned_get(s3, bucket):
    body = payload(5000, 2)
    s3.put_object(Bucket=bucket, Key="pre/signed obj.bin", Body=body)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre/signed obj.bin"}, ExpiresIn=300)
    assert "X-Amz-Signature=" in url
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200, resp.text
    assert sha256(resp.content) == sha256(body)
    resp = requests.get(url, headers={"Range": "bytes=100-199"}, timeout=30)
    assert resp.status_code == 206 and resp.content == body[100:200]
    for key in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
        resp = requests.get(url, timeout=30)
        assert resp.status_code == 200 and resp.content == key.encode(), (key, resp.status_code, resp.text[:300])


def test_presigned_get_response_overrides(s3, bucket):
    s3.put_object(Bucket=bucket, Key="ov", Body=b"override me", ContentType="application/octet-stream")
    url = s3.generate_presigned_url(
        "get_object",
        Params={"Bucket": bucket, "Key": "ov", "ResponseContentType": "text/plain; charset=utf-8",
                "ResponseContentDisposition": 'attachment; filename="x.txt"'},
        ExpiresIn=300,
    )
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200 and resp.content == b"override me"
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert resp.headers["Content-Disposition"] == 'attachment; filename="x.txt"'


def test_presigned_put(s3, bucket):
    body = b"uploaded through a presigned PUT"
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pp"}, ExpiresIn=300)
    resp = requests.put(url, data=body, timeout=30)
    assert resp.status_code == 200, resp.text
    _, got = get_body(s3, bucket, "pp")
    assert got == body


def test_response_content_type_override(s3, bucket):
    s3.put_object(Bucket=bucket, Key="rct", Body=b"{}", ContentType="application/octet-stream")
    resp = s3.get_object(
        Bucket=bucket, Key="rct", ResponseContentType="application/json", ResponseCacheControl="no-cache",
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
    assert s3.head_object(Bucket=bucket, Key="rct")["ContentType"] == "application/octet-stream"


# ------------------------------------------------------------ writes


def test_put_default_checksums(s3, bucket):
    """botocore's defaults (flexible CRC32 checksums) for bytes, file objects and an empty body."""
    bodies = {"bytes": payload(300_000, 3), "empty": b"", "small": b"x"}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        _, got = get_body(s3, bucket, key)
        assert sha256(got) == sha256(body), key
    body = payload(1_000_000, 4)
    s3.put_object(Bucket=bucket, Key="fileobj", Body=io.BytesIO(body))
    _, got = get_body(s3, bucket, "fileobj")
    assert sha256(got) == sha256(body)
    s3.upload_fileobj(io.BytesIO(body), bucket, "upload_fileobj")
    _, got = get_body(s3, bucket, "upload_fileobj")
    assert sha256(got) == sha256(body)


@pytest.mark.parametrize("algorithm", ["CRC32", "SHA1", "SHA256"])
def test_put_explicit_checksum_algorithms(s3, bucket, algorithm):
    """botocore computes these natively; CRC32C/CRC64NVME need awscrt and are covered in test_s3_payload_modes."""
    body = payload(70_000, 5)
    s3.put_object(Bucket=bucket, Key=f"ck-{algorithm}", Body=body, ChecksumAlgorithm=algorithm)
    _, got = get_body(s3, bucket, f"ck-{algorithm}")
    assert sha256(got) == sha256(body)


def test_put_wrong_checksum_is_bad_digest(s3, bucket):
    body = b"the real body"
    wrong_sha256 = base64.b64encode(hashlib.sha256(b"another body").digest()).decode()
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bucket, Key="bad-sha", Body=body, ChecksumSHA256=wrong_sha256)
    assert client_error(ei) == (400, "BadDigest")
    wrong_md5 = base64.b64encode(hashlib.md5(b"another body").digest()).decode()
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bucket, Key="bad-md5", Body=body, ContentMD5=wrong_md5)
    assert client_error(ei) == (400, "BadDigest")
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert listed == [], "a rejected PUT must not create the object"


def test_upload_file_multipart(s3, bucket, tmp_path):
    body = payload(12 * MiB, 6)
    src = tmp_path / "twelve.bin"
    src.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    s3.upload_file(str(src), bucket, "multi/twelve.bin", Config=cfg)
    head = s3.head_object(Bucket=bucket, Key="multi/twelve.bin")
    assert head["ContentLength"] == len(body)
    assert head["ETag"].startswith('"') and head["ETag"].endswith('-3"'), head["ETag"]
    _, got = get_body(s3, bucket, "multi/twelve.bin")
    assert sha256(got) == sha256(body)
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [("multi/twelve.bin", len(body), head["ETag"])]
    # partNumber reads back one part.
    resp, part2 = get_body(s3, bucket, "multi/twelve.bin", PartNumber=2)
    assert sha256(part2) == sha256(body[5 * MiB : 10 * MiB])
    assert resp["ContentRange"] == f"bytes {5 * MiB}-{10 * MiB - 1}/{len(body)}"
    assert resp.get("PartsCount") == 3


def test_multipart_etag_is_md5_of_part_md5s(s3, bucket, tmp_path):
    """As in S3: "<md5 of the concatenated binary part MD5s>-<parts>"."""
    body = payload(11 * MiB, 7)
    src = tmp_path / "eleven.bin"
    src.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=2)
    s3.upload_file(str(src), bucket, "eleven", Config=cfg)
    parts = [body[i : i + 5 * MiB] for i in range(0, len(body), 5 * MiB)]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert s3.head_object(Bucket=bucket, Key="eleven")["ETag"] == f'"{expected}-{len(parts)}"'


def test_multipart_low_level_and_abort(s3, bucket):
    small = [b"a" * 1024, b"b" * 1024]
    up = s3.create_multipart_upload(Bucket=bucket, Key="too-small")
    parts = []
    for n, p in enumerate(small, start=1):
        r = s3.upload_part(Bucket=bucket, Key="too-small", UploadId=up["UploadId"], PartNumber=n, Body=p)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="too-small", UploadId=up["UploadId"], MultipartUpload={"Parts": parts}
        )
    assert client_error(ei) == (400, "EntityTooSmall")
    s3.abort_multipart_upload(Bucket=bucket, Key="too-small", UploadId=up["UploadId"])
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="too-small")
    assert client_error(ei)[0] == 404
    # A single (last) part may be small.
    up = s3.create_multipart_upload(Bucket=bucket, Key="one-part", ContentType="text/x-one")
    r = s3.upload_part(Bucket=bucket, Key="one-part", UploadId=up["UploadId"], PartNumber=1, Body=b"only part")
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="one-part", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]},
    )
    assert done["ETag"].endswith('-1"')
    resp, got = get_body(s3, bucket, "one-part")
    assert got == b"only part" and resp["ETag"] == done["ETag"] and resp["ContentType"] == "text/x-one"
    # Completing an aborted upload is NoSuchUpload.
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="too-small", UploadId=up["UploadId"] + "x", MultipartUpload={"Parts": parts}
        )
    assert client_error(ei) == (404, "NoSuchUpload")


def test_download_file_generated_64mib_parallel(s3, tmp_path):
    b, k, size, seed = GENERATED["m64"]
    head = s3.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == size
    assert head["ETag"] == generated.generated_etag(b, k, size, seed)
    dest = tmp_path / "64m.bin"
    cfg = TransferConfig(multipart_threshold=4 * MiB, multipart_chunksize=4 * MiB, max_concurrency=4)
    s3.download_file(b, k, str(dest), Config=cfg)
    assert dest.stat().st_size == size
    h = hashlib.sha256()
    with open(dest, "rb") as f:
        for chunk in iter(lambda: f.read(8 * MiB), b""):
            h.update(chunk)
    assert h.hexdigest() == generated_sha("m64")


def test_delete_object_and_delete_objects(s3, bucket):
    for key in ("d1", "d2", "d3", "keep", "sub/d4"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    r = s3.delete_object(Bucket=bucket, Key="d1")
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="d1")
    assert client_error(ei)[0] == 404
    # Deleting a missing key is a success, as in S3.
    assert s3.delete_object(Bucket=bucket, Key="d1")["ResponseMetadata"]["HTTPStatusCode"] == 204
    r = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "d2"}, {"Key": "d3"}, {"Key": "sub/d4"}, {"Key": "never-existed"}]}
    )
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d2", "d3", "never-existed", "sub/d4"]
    assert not r.get("Errors")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["keep"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "keep"}], "Quiet": True})
    assert not r.get("Deleted") and not r.get("Errors")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_copy_object(s3, bucket):
    body = payload(50_000, 8)
    src = s3.put_object(Bucket=bucket, Key="src", Body=body, ContentType="text/x-src", Metadata={"m": "1"})
    r = s3.copy_object(Bucket=bucket, Key="dst/copy", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == src["ETag"]
    resp, got = get_body(s3, bucket, "dst/copy")
    assert sha256(got) == sha256(body)
    assert resp["ETag"] == src["ETag"]
    assert resp["ContentType"] == "text/x-src" and resp["Metadata"] == {"m": "1"}
    # Replacing metadata.
    s3.copy_object(Bucket=bucket, Key="dst/replaced", CopySource={"Bucket": bucket, "Key": "src"},
                   MetadataDirective="REPLACE", ContentType="text/x-new", Metadata={"n": "2"})
    head = s3.head_object(Bucket=bucket, Key="dst/replaced")
    assert head["ContentType"] == "text/x-new" and head["Metadata"] == {"n": "2"}
    # Copy from the generated bucket, with an odd key, to this bucket.
    gb, gk, gsize, _ = GENERATED["odd"]
    s3.copy_object(Bucket=bucket, Key="from gen+%", CopySource={"Bucket": gb, "Key": gk})
    _, got = get_body(s3, bucket, "from gen+%")
    assert len(got) == gsize and sha256(got) == generated_sha("odd")
    # Source missing.
    with pytest.raises(ClientError) as ei:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "no-such-source"})
    assert client_error(ei) == (404, "NoSuchKey")


def test_copy_object_onto_itself(s3, bucket):
    s3.put_object(Bucket=bucket, Key="self", Body=b"same bytes", ContentType="text/x-old", Metadata={"v": "1"})
    # Without a change, S3 refuses: InvalidRequest.
    with pytest.raises(ClientError) as ei:
        s3.copy_object(Bucket=bucket, Key="self", CopySource={"Bucket": bucket, "Key": "self"})
    assert client_error(ei) == (400, "InvalidRequest")
    # Replacing the metadata in place is the usual way to change a content type.
    s3.copy_object(Bucket=bucket, Key="self", CopySource={"Bucket": bucket, "Key": "self"},
                   MetadataDirective="REPLACE", ContentType="text/x-new", Metadata={"v": "2"})
    resp, got = get_body(s3, bucket, "self")
    assert got == b"same bytes"
    assert resp["ContentType"] == "text/x-new" and resp["Metadata"] == {"v": "2"}


def test_invalid_bucket_names(s3):
    for name in ("UpperCase", "ab", "under_score", "-leading", "a" * 64):
        with pytest.raises(ClientError) as ei:
            s3.create_bucket(Bucket=name)
        assert client_error(ei) == (400, "InvalidBucketName"), name


def test_second_credential_pair_works(stub, bucket):
    ak, sk = stub.s3_credentials[1]
    other = s3_client(stub, access_key=ak, secret_key=sk)
    other.put_object(Bucket=bucket, Key="by-second-key", Body=b"second")
    assert other.get_object(Bucket=bucket, Key="by-second-key")["Body"].read() == b"second"


def test_list_object_versions_without_versioning(s3, bucket):
    """ListObjectVersions on an origin without versioning (ceph/s3-tests' fixtures clean
    up with it): every object once, as its latest `null` version, paged by key marker;
    `versionId=null` reads the object."""
    keys = ["a", "b/1", "b/2", "c", "d"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    resp = s3.list_object_versions(Bucket=bucket)
    assert [v["Key"] for v in resp["Versions"]] == keys
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in resp["Versions"])
    assert resp["IsTruncated"] is False
    heads = {k: s3.head_object(Bucket=bucket, Key=k)["ETag"] for k in keys}
    assert {v["Key"]: v["ETag"] for v in resp["Versions"]} == heads
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    assert [v["Key"] for page in pages for v in page.get("Versions", [])] == keys
    rolled = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [v["Key"] for v in rolled["Versions"]] == ["a", "c", "d"]
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["b/"]
    assert s3.get_object(Bucket=bucket, Key="a", VersionId="null")["Body"].read() == b"a"
    with pytest.raises(ClientError) as ei:
        s3.list_object_versions(Bucket=unique("missing"))
    assert ei.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_part_the_object_does_not_have_is_invalid_part(s3, bucket):
    """GET or HEAD ?partNumber=N beyond an object's parts is 400 InvalidPart, as S3 answers
    (ceph/s3-tests' test_non_multipart_get_part); part 1 of a single-part object is the
    whole object."""
    s3.put_object(Bucket=bucket, Key="single", Body=b"one part")
    resp = s3.get_object(Bucket=bucket, Key="single", PartNumber=1)
    assert resp["Body"].read() == b"one part"
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="single", PartNumber=2)
    assert client_error(ei) == (400, "InvalidPart")
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="single", PartNumber=2)
    assert client_error(ei)[0] == 400


def test_a_missing_key_is_answered_in_s3s_words(s3, bucket):
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="nothing-here")
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


def test_list_buckets_pages_by_prefix_and_max_buckets(s3):
    prefix = unique("lbp")
    made = sorted(f"{prefix}-{i}" for i in range(3))
    for name in made:
        s3.create_bucket(Bucket=name)
    assert _list_buckets_in_pages(s3, prefix, 2) == made
    resp = s3.list_buckets(Prefix=prefix)
    assert [b["Name"] for b in resp["Buckets"]] == made and "ContinuationToken" not in resp
    assert resp["Prefix"] == prefix
    everything = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert set(made) <= set(everything)



def test_list_buckets_refuses_a_max_buckets_out_of_range(anon_stub):
    from conftest import assert_s3_error

    for bad in ("0", "10001", "many"):
        assert_s3_error(requests.get(f"{anon_stub.s3}/", params={"max-buckets": bad}, timeout=30), 400,
                        "InvalidArgument")


def test_list_v2_with_an_empty_continuation_token_starts_at_the_first_key_and_echoes_it(s3, bucket):
    for k in ("x1", "x2"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    resp = s3.list_objects_v2(Bucket=bucket, ContinuationToken="")
    assert resp["ContinuationToken"] == ""
    assert [o["Key"] for o in resp["Contents"]] == ["x1", "x2"]


def test_only_the_null_version_exists_without_versioning(s3, bucket):
    s3.put_object(Bucket=bucket, Key="v", Body=b"kept")
    for call in (lambda: s3.get_object(Bucket=bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ"),
                 lambda: s3.delete_object(Bucket=bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ")):
        with pytest.raises(ClientError) as ei:
            call()
        assert client_error(ei) == (400, "InvalidArgument")
    assert s3.get_object(Bucket=bucket, Key="v")["Body"].read() == b"kept"
    s3.delete_object(Bucket=bucket, Key="v", VersionId="null")
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="v")
    assert client_error(ei)[0] == 404


def test_acls_read_as_the_canned_private_acl_and_writes_are_not_implemented(s3, bucket):
    s3.put_object(Bucket=bucket, Key="acl-me", Body=b"x")
    for acl in (s3.get_bucket_acl(Bucket=bucket), s3.get_object_acl(Bucket=bucket, Key="acl-me")):
        owner = acl["Owner"]["ID"]
        assert acl["Grants"] == [{"Grantee": {"ID": owner, "DisplayName": owner, "Type": "CanonicalUser"},
                                  "Permission": "FULL_CONTROL"}]
    with pytest.raises(ClientError) as ei:
        s3.get_object_acl(Bucket=bucket, Key="no-such-key")
    assert client_error(ei) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as ei:
        s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    assert client_error(ei) == (501, "NotImplemented")


def test_listings_echo_the_prefix_as_botocore_reads_it(s3, bucket):
    """boto3 asks for encoding-type=url and decodes what S3 encodes: every V1 element but
    the Prefix, and the Prefix in V2 and ListObjectVersions. Each echo reads back as sent."""
    prefix = "sp ace+\n/"
    s3.put_object(Bucket=bucket, Key=prefix + "k", Body=b"x")
    v1 = s3.list_objects(Bucket=bucket, Prefix=prefix)
    v2 = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    versions = s3.list_object_versions(Bucket=bucket, Prefix=prefix)
    assert v1["Prefix"] == v2["Prefix"] == versions["Prefix"] == prefix
    assert [o["Key"] for o in v1["Contents"]] == [o["Key"] for o in v2["Contents"]] == [prefix + "k"]
    assert [v["Key"] for v in versions["Versions"]] == [prefix + "k"]
