"""The data dir as the source of truth: outside changes, restarts, key-to-path safety, big folders."""

from __future__ import annotations

import concurrent.futures
import io
import os
import re
import time
import urllib.parse

import numpy as np
import pytest
import requests
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from conftest import (
    _LIVE_STUBS,
    assert_s3_error,
    SEEDED,
    MiB,
    blob_service,
    client_error,
    parse_s3_error,
    s3_client,
    sha256,
    start_stub,
    stop_stub,
    unique,
)


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(400 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def dd_stub(tmp_path_factory, _isolated_client_env):
    s = start_stub("datadir", tmp_path_factory.mktemp("stub-datadir"), auth=False)
    _LIVE_STUBS.append(s)
    try:
        yield s
    finally:
        _LIVE_STUBS.remove(s)
        stop_stub(s)


@pytest.fixture(scope="module")
def dd_s3(dd_stub):
    return s3_client(dd_stub)


def test_outside_writes_are_visible(dd_stub, dd_s3):
    name = unique("outside")
    (dd_stub.data_dir / name / "sub").mkdir(parents=True)
    (dd_stub.data_dir / name / "sub" / "f.bin").write_bytes(b"written by someone else")
    assert name in [b["Name"] for b in dd_s3.list_buckets()["Buckets"]]
    assert dd_s3.get_object(Bucket=name, Key="sub/f.bin")["Body"].read() == b"written by someone else"
    etag1 = dd_s3.head_object(Bucket=name, Key="sub/f.bin")["ETag"]
    (dd_stub.data_dir / name / "sub" / "f.bin").write_bytes(b"changed, and longer than before")
    head = dd_s3.head_object(Bucket=name, Key="sub/f.bin")
    assert head["ContentLength"] == len(b"changed, and longer than before")
    assert head["ETag"] != etag1, "a changed file must get a new ETag"
    assert dd_s3.get_object(Bucket=name, Key="sub/f.bin")["Body"].read() == b"changed, and longer than before"
    (dd_stub.data_dir / name / "sub" / "f.bin").unlink()
    with pytest.raises(ClientError) as ei:
        dd_s3.head_object(Bucket=name, Key="sub/f.bin")
    assert client_error(ei)[0] == 404


def test_folders_are_not_objects(dd_stub, dd_s3):
    name = unique("folders")
    dd_s3.create_bucket(Bucket=name)
    dd_s3.put_object(Bucket=name, Key="dir/leaf", Body=b"leaf")
    for key in ("dir", "dir/"):
        with pytest.raises(ClientError) as ei:
            dd_s3.get_object(Bucket=name, Key=key)
        assert client_error(ei) == (404, "NoSuchKey"), key
    assert [o["Key"] for o in dd_s3.list_objects_v2(Bucket=name)["Contents"]] == ["dir/leaf"]
    # Deleting the last object under a folder leaves no phantom entries behind.
    dd_s3.delete_object(Bucket=name, Key="dir/leaf")
    resp = dd_s3.list_objects_v2(Bucket=name, Delimiter="/")
    assert resp["KeyCount"] == 0 and not resp.get("CommonPrefixes"), resp


def test_key_that_is_also_a_folder(dd_stub, dd_s3):
    """S3 is flat: 'a' and 'a/b' both exist, as do folder markers ('asdf/') beside their contents."""
    name = unique("flat")
    dd_s3.create_bucket(Bucket=name)
    bodies = {
        "a": b"file a", "a/b": b"under a file", "d/x": b"file d/x", "d": b"beside a folder",
        "asdf/": b"", "0/": b"", "0/1000": b"zero", "foo/bar": b"bar", "foo/bar/xyzzy": b"xyzzy",
        "x//y": b"double slash", "/lead": b"leading slash",
    }
    for key, body in bodies.items():
        dd_s3.put_object(Bucket=name, Key=key, Body=body)
    for key, body in bodies.items():
        got = dd_s3.get_object(Bucket=name, Key=key)
        assert got["Body"].read() == body and got["ContentLength"] == len(body), key
    listed = [o["Key"] for o in dd_s3.list_objects_v2(Bucket=name)["Contents"]]
    assert listed == sorted(bodies, key=lambda k: k.encode()), listed
    resp = dd_s3.list_objects_v2(Bucket=name, Delimiter="/", Prefix="foo/")
    assert [o["Key"] for o in resp["Contents"]] == ["foo/bar"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["foo/bar/"]
    # Keys a file can hold stay files in the folder, for anything else reading it.
    assert (dd_stub.data_dir / name / "a").read_bytes() == b"file a"
    assert (dd_stub.data_dir / name / "d" / "x").read_bytes() == b"file d/x"
    blobs = [b.name for b in blob_service(dd_stub).get_container_client(name).list_blobs()]
    assert blobs == listed
    for key in bodies:
        dd_s3.delete_object(Bucket=name, Key=key)
    assert dd_s3.list_objects_v2(Bucket=name)["KeyCount"] == 0
    dd_s3.delete_bucket(Bucket=name)


def test_a_crash_mid_upload_leaves_the_old_version_whole(tmp_path, _isolated_client_env):
    """kill -9 while a PUT streams in: after a restart the object is the old version, whole, under
    its old ETag, listed once, and no staging file is left behind."""
    import socket

    workdir = tmp_path / "crash"
    first = start_stub("crash-1", workdir, auth=False)
    _LIVE_STUBS.append(first)
    old = payload(2 * MiB, 20)
    try:
        s3 = s3_client(first)
        s3.create_bucket(Bucket="crash")
        for key in ("plain.bin", "marker/"):
            s3.put_object(Bucket="crash", Key=key, Body=old)
        etags = {k: s3.head_object(Bucket="crash", Key=k)["ETag"] for k in ("plain.bin", "marker/")}
        host, port = urllib.parse.urlsplit(first.s3).netloc.rsplit(":", 1)
        socks = []
        for key in ("plain.bin", "marker/", "new-key"):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(
                f"PUT /crash/{urllib.parse.quote(key)} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Length: {64 * MiB}\r\n\r\n".encode()
            )
            sock.sendall(payload(8 * MiB, 21))
            socks.append(sock)
        tmp = first.data_dir / ".talon-stub" / "tmp"
        deadline = time.monotonic() + 30
        while sum(p.stat().st_size for p in tmp.iterdir()) < 3 * 4 * MiB:
            assert time.monotonic() < deadline, "the uploads never reached the staging folder"
            time.sleep(0.05)
        first.proc.kill()
        first.proc.wait()
        for sock in socks:
            sock.close()
    finally:
        _LIVE_STUBS.remove(first)
    second = start_stub("crash-2", workdir, auth=False)
    _LIVE_STUBS.append(second)
    try:
        s3 = s3_client(second)
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="crash")["Contents"]]
        assert listed == ["marker/", "plain.bin"], listed
        for key, etag in etags.items():
            got = s3.get_object(Bucket="crash", Key=key)
            assert got["ETag"] == etag and sha256(got["Body"].read()) == sha256(old), key
        assert list((second.data_dir / ".talon-stub" / "tmp").iterdir()) == []
    finally:
        _LIVE_STUBS.remove(second)
        stop_stub(second)


def _inside(stub, bucket: str, path: str) -> bool:
    """Inside the bucket's folder, or in the stub's own hidden state folder in the data dir."""
    allowed = (str(stub.data_dir / bucket) + os.sep, str(stub.data_dir / ".talon-stub") + os.sep)
    return path.startswith(allowed) or path == str(stub.data_dir / ".talon-stub")


@pytest.mark.parametrize("raw_key", [
    "%2E%2E/escape-1.txt",
    "%2E%2E%2Fescape-2.txt",
    "sub/%2E%2E/%2E%2E/escape-3.txt",
    "sub%2F..%2F..%2Fescape-4.txt",
    "%2Fabsolute-5.txt",
    "a%5C..%5C..%5Cescape-6.txt",
])
def test_keys_cannot_escape_the_bucket(dd_stub, dd_s3, raw_key):
    name = unique("trav")
    dd_s3.create_bucket(Bucket=name)
    before = {p for p in dd_stub.data_dir.parent.rglob("*")}
    resp = requests.put(f"{dd_stub.s3}/{name}/{raw_key}", data=b"escaped?", timeout=30)
    after = {p for p in dd_stub.data_dir.parent.rglob("*")}
    created = sorted(str(p) for p in after - before)
    assert all(_inside(dd_stub, name, p) for p in created), f"PUT {raw_key} created files outside the bucket: {created}"
    if resp.status_code == 200:
        key = urllib.parse.unquote(raw_key)
        got = requests.get(f"{dd_stub.s3}/{name}/{raw_key}", timeout=30)
        assert got.status_code == 200 and got.content == b"escaped?", key
        listed = [o["Key"] for o in dd_s3.list_objects_v2(Bucket=name)["Contents"]]
        assert listed == [key], listed
    else:
        assert 400 <= resp.status_code < 500, resp.status_code
        assert parse_s3_error(resp.content)["Code"]
        assert dd_s3.list_objects_v2(Bucket=name)["KeyCount"] == 0


def test_boto3_dot_segment_keys(dd_stub, dd_s3):
    name = unique("dots")
    dd_s3.create_bucket(Bucket=name)
    before = {p for p in dd_stub.data_dir.parent.rglob("*")}
    for key in ("../boto-escape.txt", "x/../../boto-escape2.txt", "./dot.txt"):
        try:
            dd_s3.put_object(Bucket=name, Key=key, Body=b"dots")
        except ClientError as exc:
            assert 400 <= exc.response["ResponseMetadata"]["HTTPStatusCode"] < 500
    created = {p for p in dd_stub.data_dir.parent.rglob("*")} - before
    assert all(_inside(dd_stub, name, str(p)) for p in created), sorted(map(str, created))


def test_big_folder_listing_pages(dd_stub, dd_s3):
    name = unique("many")
    dd_s3.create_bucket(Bucket=name)
    folder = dd_stub.data_dir / name
    keys = [f"k/{i:05d}" for i in range(2503)]
    (folder / "k").mkdir()
    for k in keys:
        (folder / k).write_bytes(k.encode())
    pages = list(dd_s3.get_paginator("list_objects_v2").paginate(Bucket=name))
    assert [len(p["Contents"]) for p in pages] == [1000, 1000, 503]
    assert [o["Key"] for p in pages for o in p["Contents"]] == keys
    az = blob_service(dd_stub)
    blob_pages = [[b.name for b in page] for page in az.get_container_client(name).list_blobs().by_page()]
    assert [n for p in blob_pages for n in p] == keys
    assert len(blob_pages[0]) == 2503  # Azure's default page is 5000


def test_restart_keeps_objects_etags_and_metadata(tmp_path, _isolated_client_env):
    workdir = tmp_path / "restart"
    first = start_stub("restart-1", workdir, auth=False)
    _LIVE_STUBS.append(first)
    try:
        s3 = s3_client(first)
        s3.create_bucket(Bucket="keep")
        s3.put_object(Bucket="keep", Key="single", Body=b"single body", ContentType="text/x-keep",
                      Metadata={"who": "first"})
        cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
        s3.upload_fileobj(io.BytesIO(payload(11 * MiB, 1)), "keep", "multi", Config=cfg)
        blob_service(first, max_single_put_size=MiB, max_block_size=MiB).get_blob_client("keep", "blocked").upload_blob(
            payload(3 * MiB, 2)
        )
        heads = {k: s3.head_object(Bucket="keep", Key=k) for k in ("single", "multi", "blocked")}
    finally:
        _LIVE_STUBS.remove(first)
        stop_stub(first)
    second = start_stub("restart-2", workdir, auth=False)
    _LIVE_STUBS.append(second)
    try:
        s3 = s3_client(second)
        for k, before in heads.items():
            after = s3.head_object(Bucket="keep", Key=k)
            for field in ("ETag", "ContentLength", "ContentType", "Metadata", "LastModified"):
                assert after.get(field) == before.get(field), (k, field, before.get(field), after.get(field))
        assert sha256(s3.get_object(Bucket="keep", Key="multi")["Body"].read()) == sha256(payload(11 * MiB, 1))
    finally:
        _LIVE_STUBS.remove(second)
        stop_stub(second)


def test_concurrent_overwrites_are_atomic(dd_stub, dd_s3):
    """Racing PUTs of one key all succeed (last writer wins); racing GETs/HEADs see one whole
    version whose ETag (the body's MD5 for a single-part PUT) and length belong together."""
    import hashlib

    from botocore.exceptions import ClientError as _ClientError

    name = unique("race")
    dd_s3.create_bucket(Bucket=name)
    versions = [payload(300_000, 10), payload(700_000, 11), payload(50_000, 12)]
    etag_of = {len(v): '"' + hashlib.md5(v).hexdigest() + '"' for v in versions}
    digests = {sha256(v) for v in versions}
    dd_s3.put_object(Bucket=name, Key="hot", Body=versions[0])

    def writer(i):
        try:
            dd_s3.put_object(Bucket=name, Key="hot", Body=versions[i % len(versions)])
        except _ClientError as exc:
            return f"PUT failed: {exc}"
        return None

    def reader(_):
        resp = dd_s3.get_object(Bucket=name, Key="hot")
        body = resp["Body"].read()
        if sha256(body) not in digests or len(body) != resp["ContentLength"]:
            return f"GET torn: {len(body)} bytes, Content-Length {resp['ContentLength']}"
        if resp["ETag"] != etag_of[len(body)]:
            return f"GET ETag {resp['ETag']} does not belong to the {len(body)}-byte body it came with"
        head = dd_s3.head_object(Bucket=name, Key="hot")
        if etag_of.get(head["ContentLength"]) != head["ETag"]:
            return f"HEAD ETag {head['ETag']} does not belong to its Content-Length {head['ContentLength']}"
        return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(writer, i) for i in range(100)] + [pool.submit(reader, i) for i in range(200)]
        problems = [r for r in (f.result() for f in futures) if r]
    assert not problems, f"{len(problems)} of 300 racing requests went wrong, e.g.: " + "; ".join(
        sorted(set(p[:200] for p in problems))[:5]
    )
    body = dd_s3.get_object(Bucket=name, Key="hot")["Body"].read()
    assert sha256(body) in digests


def test_seeded_blobs(azure):
    cc = azure.get_container_client("seeded")
    assert sorted(b.name for b in cc.list_blobs()) == sorted(SEEDED)
    for name, content in SEEDED.items():
        assert sha256(cc.download_blob(name).readall()) == sha256(content)


# ---- from the former test_s3_boto3.py: the stub's own buckets


def test_list_buckets_sees_created_generated_and_seeded(s3, bucket):
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert bucket in names
    assert "gen" in names, "a --generate bucket must exist without a folder"
    assert "seeded" in names, "a top-level data-dir folder must be a bucket"
    assert names == sorted(names)
    for n in names:  # nothing internal (e.g. a hidden state folder) shows up as a bucket
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", n), n


def test_seeded_data_dir_objects(s3):
    resp = s3.list_objects_v2(Bucket="seeded")
    assert sorted(o["Key"] for o in resp["Contents"]) == sorted(SEEDED)
    for key, content in SEEDED.items():
        obj = next(o for o in resp["Contents"] if o["Key"] == key)
        assert obj["Size"] == len(content)
        head = s3.head_object(Bucket="seeded", Key=key)
        assert head["ETag"] == obj["ETag"]
        body = s3.get_object(Bucket="seeded", Key=key)["Body"].read()
        assert sha256(body) == sha256(content)


def test_list_buckets_refuses_a_max_buckets_out_of_range(anon_stub):
    from conftest import assert_s3_error

    for bad in ("0", "10001", "many"):
        assert_s3_error(requests.get(f"{anon_stub.s3}/", params={"max-buckets": bad}, timeout=30), 400,
                        "InvalidArgument")
