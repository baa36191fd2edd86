"""Bad requests through the gateway: each gets the protocol's own error and changes nothing.

"Changes nothing" is checked with a listing (keys, sizes, ETags) and a read of the
object before and after.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import time
import types
import urllib.parse
import xml.etree.ElementTree as ET

import botocore.auth
import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import (
    BlobClient,
    BlobSasPermissions,
    BlobServiceClient,
    ContainerClient,
    ContainerSasPermissions,
    generate_blob_sas,
    generate_container_sas,
)
from botocore.exceptions import ClientError

from conftest import assert_s3_error, blob_service, client_error, s3_client, sha256, signed_request, unique, wait_until
from .test_gw_payload_modes import EMPTY_SHA256, _chunks, _hmac_hex, _prepare, b64, crc32, payload, put_streaming

from . import harness

OTHER_AZURE_KEY = "bm90LXRoZS1yaWdodC1rZXktbm90LXRoZS1yaWdodC1rZXktbm90LXRoZS1yaWdodC1rZXktbm90LXJpZ2h0IQ=="


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@pytest.fixture
def populated(gw, gw_s3, gw_bucket):
    """A bucket with two objects (one read through the cache); returns (bucket, snapshot)."""
    gw_s3.put_object(Bucket=gw_bucket, Key="one", Body=b"one")
    gw_s3.put_object(Bucket=gw_bucket, Key="two/2", Body=b"two")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="one")["Body"].read() == b"one"

    def snapshot():
        listed = gw_s3.list_objects_v2(Bucket=gw_bucket).get("Contents", [])
        state = [(o["Key"], o["Size"], o["ETag"]) for o in listed]
        state.append(gw_s3.get_object(Bucket=gw_bucket, Key="one")["Body"].read())
        return state

    return gw_bucket, snapshot


def azure_error(exc: HttpResponseError, status: int, code: str, body: bool = True):
    assert exc.status_code == status, f"expected {status} {code}, got {exc.status_code} {exc.error_code}: {exc}"
    assert exc.error_code == code, f"expected {code}, got {exc.error_code}: {exc}"
    assert exc.response.headers.get("x-ms-error-code") == code
    assert exc.response.headers.get("x-ms-request-id")
    if body:
        root = ET.fromstring(exc.response.text())
        assert root.tag == "Error" and root.findtext("Code") == code, exc.response.text()


def raw_azure_error(status_code, headers, content, status: int, code=None):
    assert status_code == status, f"expected {status} {code}, got {status_code}: {content[:500]!r}"
    got = headers.get("x-ms-error-code")
    assert got and (code is None or got == code), (code, dict(headers))
    assert headers.get("x-ms-request-id")
    root = ET.fromstring(content)
    assert root.tag == "Error" and root.findtext("Code") == got, content


# ================================================================= S3: keys and signatures


def test_s3_unknown_access_key(gw, populated):
    bucket, snapshot = populated
    before = snapshot()
    bad = s3_client(gw, access_key="AKIAUNKNOWNUNKNOWN00", secret_key=gw.secret_key)
    for call in (lambda: bad.get_object(Bucket=bucket, Key="one"),
                 lambda: bad.put_object(Bucket=bucket, Key="new", Body=b"x"),
                 lambda: bad.delete_object(Bucket=bucket, Key="one"),
                 lambda: bad.list_objects_v2(Bucket=bucket)):
        with pytest.raises(ClientError) as ei:
            call()
        assert client_error(ei) == (403, "InvalidAccessKeyId")
    assert_s3_error(signed_request(gw, "GET", f"/{bucket}/one", access_key="AKIAUNKNOWNUNKNOWN00"),
                    403, "InvalidAccessKeyId")
    assert_s3_error(signed_request(gw, "PUT", f"/{bucket}/raw", body=b"x", access_key="AKIAUNKNOWNUNKNOWN00"),
                    403, "InvalidAccessKeyId")
    assert snapshot() == before


def test_origin_identity_is_not_a_client_identity(cluster):
    """The gateway signs to the origin with its own keys; those keys do not open the gateway."""
    gw = cluster.main
    s3 = s3_client(gw)
    bucket = unique("ident")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    origin_keyed = s3_client(gw, access_key=harness.ORIGIN_S3[0], secret_key=harness.ORIGIN_S3[1])
    with pytest.raises(ClientError) as ei:
        origin_keyed.get_object(Bucket=bucket, Key="k")
    assert client_error(ei) == (403, "InvalidAccessKeyId")
    svc = BlobServiceClient.from_connection_string(gw.connection_string(harness.ORIGIN_AZURE_KEY), retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        svc.get_blob_client(bucket, "k").download_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    # ... and the client keys do not open the origin: nothing is forwarded, the gateway re-signs.
    direct = s3_client(types.SimpleNamespace(s3=cluster.origin_s3, region=gw.region, authenticated=True,
                                             access_key=gw.access_key, secret_key=gw.secret_key))
    with pytest.raises(ClientError) as ei:
        direct.get_object(Bucket=bucket, Key="k")
    assert client_error(ei) == (403, "InvalidAccessKeyId")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"


def test_s3_wrong_secret(gw, populated):
    bucket, snapshot = populated
    before = snapshot()
    bad = s3_client(gw, access_key=gw.access_key, secret_key="not-the-secret")
    for call in (lambda: bad.get_object(Bucket=bucket, Key="one"),
                 lambda: bad.get_object(Bucket=bucket, Key="one", Range="bytes=0-0"),
                 lambda: bad.head_object(Bucket=bucket, Key="one"),
                 lambda: bad.put_object(Bucket=bucket, Key="one", Body=b"overwritten"),
                 lambda: bad.delete_object(Bucket=bucket, Key="one"),
                 lambda: bad.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "one"}]}),
                 lambda: bad.list_objects_v2(Bucket=bucket),
                 lambda: bad.create_bucket(Bucket=unique("nope"))):
        with pytest.raises(ClientError) as ei:
            call()
        status, code = client_error(ei)
        assert status == 403 and code in ("SignatureDoesNotMatch", "403"), (status, code)  # HEAD has no body
    assert_s3_error(signed_request(gw, "GET", f"/{bucket}/one", secret_key="not-the-secret"),
                    403, "SignatureDoesNotMatch")
    assert_s3_error(signed_request(gw, "PUT", f"/{bucket}/raw-new", body=b"raw", secret_key="not-the-secret"),
                    403, "SignatureDoesNotMatch")
    # A signed request altered after signing.
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="GET", url=f"{gw.s3}/{bucket}/one", headers={"Range": "bytes=0-1"})
    botocore.auth.S3SigV4Auth(Credentials(gw.access_key, gw.secret_key), "s3", gw.region).add_auth(req)
    p = req.prepare()
    resp = requests.get(p.url.replace("/one", "/two/2"), headers=dict(p.headers), timeout=30)
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    resp = requests.get(p.url, headers={**dict(p.headers), "Range": "bytes=0-2"}, timeout=30)
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    assert snapshot() == before


def test_s3_unsigned_request_refused(gw, populated):
    bucket, snapshot = populated
    before = snapshot()
    assert_s3_error(requests.get(f"{gw.s3}/{bucket}/one", timeout=30), 403, "AccessDenied")
    assert_s3_error(requests.put(f"{gw.s3}/{bucket}/anon", data=b"x", timeout=30), 403, "AccessDenied")
    assert_s3_error(requests.delete(f"{gw.s3}/{bucket}/one", timeout=30), 403, "AccessDenied")
    assert_s3_error(requests.get(f"{gw.s3}/", timeout=30), 403, "AccessDenied")
    anon = s3_client(gw, unsigned=True)
    with pytest.raises(ClientError) as ei:
        anon.list_objects_v2(Bucket=bucket)
    assert client_error(ei) == (403, "AccessDenied")
    assert snapshot() == before


class _ShiftedTime:
    """Stands in for the ``time`` module in botocore.auth: ``time()`` runs ``shift`` seconds off."""

    def __init__(self, shift: float):
        self._shift = shift

    def time(self):
        return time.time() + self._shift

    def __getattr__(self, name):
        return getattr(time, name)


def test_s3_presigned_expired(gw, populated, monkeypatch):
    bucket, snapshot = populated
    before = snapshot()
    s3 = s3_client(gw)
    default = s3_client(gw, signature_version="s3")  # SigV2 query auth, boto3's default for presigning
    # Signed two hours ago, valid for a minute: expired long ago, without waiting.
    real_now = botocore.auth.get_current_datetime
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: real_now() - dt.timedelta(hours=2))
    monkeypatch.setattr(botocore.auth, "time", _ShiftedTime(-7200))
    urls = {
        "v4 get": s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=60),
        "v2 get": default.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"},
                                                 ExpiresIn=60),
    }
    put_urls = {
        "v4 put": s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=60),
        "v2 put": default.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "late"},
                                                 ExpiresIn=60),
    }
    monkeypatch.undo()
    assert "X-Amz-Signature=" in urls["v4 get"] and "Signature=" in urls["v2 get"] and "Expires=" in urls["v2 get"]
    for name, url in urls.items():
        err = assert_s3_error(requests.get(url, timeout=30), 403, "AccessDenied")
        assert "expired" in err.get("Message", "").lower(), (name, err)
        assert_s3_error(requests.get(url, headers={"Range": "bytes=0-0"}, timeout=30), 403, "AccessDenied")
    for name, url in put_urls.items():
        assert_s3_error(requests.put(url, data=b"too late", timeout=30), 403, "AccessDenied")
    # A fresh URL still works, and a tampered one does not.
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=300)
    assert requests.get(url, timeout=30).content == b"one"
    assert_s3_error(requests.get(url.replace("X-Amz-Expires=300", "X-Amz-Expires=900"), timeout=30),
                    403, "SignatureDoesNotMatch")
    assert_s3_error(requests.get(url.replace(f"/{bucket}/one?", f"/{bucket}/two/2?"), timeout=30),
                    403, "SignatureDoesNotMatch")
    assert snapshot() == before


# ================================================================= S3: aws-chunked bodies


def put_signed_chunks_with_flipped_byte(front, path, data, *, chunk_size=64 * 1024, flip_at: int):
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD, correctly signed, then one payload byte flipped on the wire."""
    headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data))}
    req, seed_sig, ts, scope, key = _prepare(front, "PUT", path, headers, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    body = bytearray()
    prev = seed_sig
    for piece in _chunks(data, chunk_size) + [b""]:
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ts, scope, prev, EMPTY_SHA256, hashlib.sha256(piece).hexdigest()])
        prev = _hmac_hex(key, sts)
        body += f"{len(piece):x};chunk-signature={prev}\r\n".encode()
        if piece:
            body += piece + b"\r\n"
    # Flip the ``flip_at``-th payload byte (counting decoded bytes) where it sits in the encoded body.
    offset, seen = 0, 0
    encoded = bytes(body)
    out = bytearray(encoded)
    while True:
        line_end = encoded.index(b"\r\n", offset)
        size = int(encoded[offset:line_end].split(b";")[0], 16)
        if size == 0:
            raise AssertionError("flip_at is past the payload")
        data_start = line_end + 2
        if seen + size > flip_at:
            out[data_start + flip_at - seen] ^= 0x01
            break
        seen += size
        offset = data_start + size + 2
    return requests.put(front.s3 + path, headers=dict(req.headers), data=bytes(out), timeout=60)


def test_tampered_aws_chunked_bodies(gw, gw_s3, gw_bucket):
    data = payload(200_000, 11)
    listing = lambda: [(o["Key"], o["Size"], o["ETag"])  # noqa: E731
                       for o in gw_s3.list_objects_v2(Bucket=gw_bucket).get("Contents", [])]
    # Controls: the same modes, untampered, are accepted and store the exact bytes.
    assert put_streaming(gw, f"/{gw_bucket}/ok-signed", data, mode="signed").status_code == 200
    resp = put_streaming(gw, f"/{gw_bucket}/ok-trailer", data, mode="unsigned-trailer", trailer_algo="crc32")
    assert resp.status_code == 200, resp.text
    for key in ("ok-signed", "ok-trailer"):
        assert sha256(gw_s3.get_object(Bucket=gw_bucket, Key=key)["Body"].read()) == sha256(data)
    before = listing()
    # Unsigned payload with a trailing checksum that does not match: 400 BadDigest.
    resp = put_streaming(gw, f"/{gw_bucket}/bad-trailer", data, mode="unsigned-trailer", trailer_algo="crc32",
                         trailer_value=b64(crc32(data + b"x")))
    assert_s3_error(resp, 400, "BadDigest")
    # Overwriting an existing key with a bad trailer leaves it as it was.
    resp = put_streaming(gw, f"/{gw_bucket}/ok-trailer", payload(200_000, 12), mode="unsigned-trailer",
                         trailer_algo="crc32", trailer_value=b64(crc32(data)))
    assert_s3_error(resp, 400, "BadDigest")
    # Signed chunks, one payload byte flipped after signing (first chunk, a middle one, the last byte).
    for flip_at in (0, 100_000, len(data) - 1):
        resp = put_signed_chunks_with_flipped_byte(gw, f"/{gw_bucket}/flipped", data, flip_at=flip_at)
        assert_s3_error(resp, 403, "SignatureDoesNotMatch")
        resp = put_signed_chunks_with_flipped_byte(gw, f"/{gw_bucket}/ok-signed", data, flip_at=flip_at)
        assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    # A chunk signature itself tampered with (first, middle, final empty chunk).
    for n in (0, 2, 4):
        resp = put_streaming(gw, f"/{gw_bucket}/tampered", data, mode="signed", tamper_chunk=n)
        assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    assert listing() == before
    for key in ("ok-signed", "ok-trailer"):
        assert sha256(gw_s3.get_object(Bucket=gw_bucket, Key=key)["Body"].read()) == sha256(data)


# ================================================================= S3: ranges and paths


def test_malformed_ranges_are_ignored(gw, gw_s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    b, k, size, seed = gw.generated["big"]
    import generated

    expected = generated.sha256_of_generated(b, k, size, seed)
    for rng in ("bytes=1-0", "bytes=abc"):
        resp = gw_s3.get_object(Bucket=b, Key=k, Range=rng)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200, rng
        assert "ContentRange" not in resp and resp["ContentLength"] == size, rng
        assert sha256(resp["Body"].read()) == expected, rng
        resp = signed_request(gw, "GET", f"/{bucket}/one", headers={"Range": rng})
        assert resp.status_code == 200 and resp.content == b"one", (rng, resp.status_code)
    assert snapshot() == before


def _raw(base: str, method: str, path: str, headers=None, body: bytes = b""):
    """A request with ``path`` sent byte for byte (no client-side dot-segment normalisation)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _files(root) -> set:
    """Files of the origin's data folder, without the internal state folders."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not p.relative_to(root).parts[0].startswith(".")}


DOTTED = ["../escape.txt", "x/../../escape.txt", "%2E%2E/escape.txt", "a/%2e%2e/%2E%2E/escape.txt", "./dot.txt",
          "x/./y.txt", "x/../y.txt"]


def test_dot_segment_paths_rejected(up_open):
    gw = up_open
    s3 = s3_client(gw)
    bucket = unique("dots")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="x/y.txt", Body=b"keep")
    azure = blob_service(gw)
    container = unique("adots")
    azure.create_container(container)
    azure.get_blob_client(container, "x/y.txt").upload_blob(b"keep")
    before_files = _files(gw.data_dir)
    before_s3 = [(o["Key"], o["ETag"]) for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    before_az = [(b.name, b.etag) for b in azure.get_container_client(container).list_blobs()]
    for key in DOTTED:
        status, headers, content = _raw(gw.s3, "PUT", f"/{bucket}/{key}", {"Content-Length": "7"}, b"escaped")
        assert status == 400, (key, status, content[:300])
        err = ET.fromstring(content)
        assert err.tag == "Error" and err.findtext("Code"), (key, content)
        assert headers.get("x-amz-request-id") == err.findtext("RequestId"), (key, headers)
        status, _, content = _raw(gw.s3, "GET", f"/{bucket}/{key}")
        assert status == 400 and ET.fromstring(content).findtext("Code"), (key, status, content[:300])
        status, _, content = _raw(gw.s3, "DELETE", f"/{bucket}/{key}")
        assert status == 400 and ET.fromstring(content).findtext("Code"), (key, status, content[:300])

        path = f"/{gw.azure_account}/{container}/{key}"
        status, headers, content = _raw(gw.blob_endpoint, "PUT", path,
                                         {"x-ms-blob-type": "BlockBlob", "x-ms-version": "2021-08-06",
                                          "Content-Length": "7"}, b"escaped")
        raw_azure_error(status, headers, content, 400)
        status, headers, content = _raw(gw.blob_endpoint, "GET", path, {"x-ms-version": "2021-08-06"})
        raw_azure_error(status, headers, content, 400)
        status, headers, content = _raw(gw.blob_endpoint, "DELETE", path, {"x-ms-version": "2021-08-06"})
        raw_azure_error(status, headers, content, 400)
    assert _files(gw.data_dir) == before_files
    assert [(o["Key"], o["ETag"]) for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == before_s3
    assert [(b.name, b.etag) for b in azure.get_container_client(container).list_blobs()] == before_az
    assert s3.get_object(Bucket=bucket, Key="x/y.txt")["Body"].read() == b"keep"


# ================================================================= Azure: keys and SAS


@pytest.fixture
def az_populated(gw_azure, gw_container):
    cc = gw_azure.get_container_client(gw_container)
    cc.upload_blob("one", b"one")
    cc.upload_blob("two/2", b"two")
    assert cc.download_blob("one").readall() == b"one"

    def snapshot():
        return [(b.name, b.size, b.etag) for b in cc.list_blobs()] + [cc.download_blob("one").readall()]

    return gw_container, snapshot


def test_azure_wrong_key(gw, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    bad = BlobServiceClient.from_connection_string(gw.connection_string(OTHER_AZURE_KEY), retry_total=0)
    calls = [
        lambda: list(bad.list_containers()),
        lambda: list(bad.get_container_client(container).list_blobs()),
        lambda: bad.get_blob_client(container, "one").download_blob(),
        lambda: bad.get_blob_client(container, "one").download_blob(offset=0, length=1),
        lambda: bad.get_blob_client(container, "new").upload_blob(b"x"),
        lambda: bad.get_blob_client(container, "one").upload_blob(b"overwritten", overwrite=True),
        lambda: bad.get_blob_client(container, "one").delete_blob(),
    ]
    for call in calls:
        with pytest.raises(HttpResponseError) as ei:
            call()
        azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bad.get_blob_client(container, "one").get_blob_properties()
    azure_error(ei.value, 403, "AuthenticationFailed", body=False)
    assert snapshot() == before


def test_azure_anonymous_refused(gw, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    for method, path, headers in (("GET", f"/{container}/one", {}), ("GET", "?comp=list", {}),
                                  ("PUT", f"/{container}/anon", {"x-ms-blob-type": "BlockBlob"})):
        resp = requests.request(method, gw.blob_endpoint + (path if path.startswith("?") else path),
                                headers=headers, data=b"x" if method == "PUT" else None, timeout=30)
        raw_azure_error(resp.status_code, resp.headers, resp.content, 401, "NoAuthenticationInformation")
    assert snapshot() == before


def test_azure_expired_sas(gw, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    sas = generate_blob_sas(gw.azure_account, container, "one", account_key=gw.azure_key,
                            permission=BlobSasPermissions(read=True, write=True),
                            start=utcnow() - dt.timedelta(hours=2), expiry=utcnow() - dt.timedelta(minutes=5))
    bc = BlobClient.from_blob_url(f"{gw.blob_endpoint}/{container}/one?{sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(offset=0, length=2)
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bc.upload_blob(b"expired write", overwrite=True)
    azure_error(ei.value, 403, "AuthenticationFailed")
    # Tampered: a later expiry on the same signature.
    tampered = "&".join(p if not p.startswith("se=") else "se=2099-01-01T00%3A00%3A00Z" for p in sas.split("&"))
    resp = requests.get(f"{gw.blob_endpoint}/{container}/one?{tampered}", timeout=30)
    raw_azure_error(resp.status_code, resp.headers, resp.content, 403, "AuthenticationFailed")
    # Not yet valid is refused too.
    sas = generate_container_sas(
        gw.azure_account, container, account_key=gw.azure_key,
        permission=ContainerSasPermissions(read=True, list=True),
        start=utcnow() + dt.timedelta(hours=1), expiry=utcnow() + dt.timedelta(hours=2),
    )
    cc = ContainerClient.from_container_url(f"{gw.blob_endpoint}/{container}?{sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        list(cc.list_blobs())
    azure_error(ei.value, 403, "AuthenticationFailed")
    assert snapshot() == before


# ================================================================= from the origin stub's own suite
# (folded in 2026-12-05: every case now runs on every target)


def raw_azure_answer(resp, status: int, code: str):
    """An Azure error answer read with ``requests``: status, code, request id, and the
    XML body (none for HEAD)."""
    assert resp.status_code == status, f"expected {status} {code}, got {resp.status_code}: {resp.text[:500]}"
    assert resp.headers.get("x-ms-error-code") == code, dict(resp.headers)
    assert resp.headers.get("x-ms-request-id")
    if resp.request.method != "HEAD":
        root = ET.fromstring(resp.content)
        assert root.tag == "Error" and root.findtext("Code") == code, resp.text


def test_s3_presigned_tampered(gw_s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=300)
    resp = requests.get(url.replace(f"/{bucket}/one?", f"/{bucket}/two/2?"), timeout=30)
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    resp = requests.get(url.replace("X-Amz-Expires=300", "X-Amz-Expires=600"), timeout=30)
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    assert snapshot() == before


def test_s3_signed_request_altered_after_signing(gw, gw_s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    def signed_then(method, path, headers, mutate, body=b""):
        req = AWSRequest(method=method, url=gw.s3 + path, headers=dict(headers), data=body)
        botocore.auth.S3SigV4Auth(Credentials(gw.access_key, gw.secret_key), "s3", gw.region).add_auth(req)
        p = req.prepare()
        url, hdrs, body = mutate(p.url, dict(p.headers), body)
        return requests.request(method, url, headers=hdrs, data=body, timeout=30)

    # A signed header changed.
    resp = signed_then("GET", f"/{bucket}/one", {"Range": "bytes=0-1"},
                       lambda u, h, b: (u, {**h, "Range": "bytes=0-2"}, b))
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    # A query parameter added.
    resp = signed_then("GET", f"/{bucket}/one", {},
                       lambda u, h, b: (u + "?response-content-type=text%2Fhtml", h, b))
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    # The path changed.
    resp = signed_then("GET", f"/{bucket}/one", {}, lambda u, h, b: (u.replace("/one", "/two/2"), h, b))
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    # The body changed (its declared SHA-256 no longer matches).
    resp = signed_then("PUT", f"/{bucket}/one", {}, lambda u, h, b: (u, h, b"evil"), body=b"good")
    assert resp.status_code in (400, 403), resp.status_code
    assert_s3_error(resp, resp.status_code, "XAmzContentSHA256Mismatch" if resp.status_code == 400 else "SignatureDoesNotMatch")
    # A presigned GET URL used for a PUT.
    url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=300)
    assert_s3_error(requests.put(url, data=b"evil", timeout=30), 403, "SignatureDoesNotMatch")
    # An extra query parameter on a presigned URL.
    assert_s3_error(requests.get(url + "&x-id=GetObject&extra=1", timeout=30), 403, "SignatureDoesNotMatch")
    assert snapshot() == before
    assert gw_s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"one"


@pytest.mark.parametrize("skew_minutes", [-20, 20])
def test_s3_request_time_too_skewed(gw, populated, monkeypatch, skew_minutes):
    bucket, snapshot = populated
    before = snapshot()
    import botocore.auth

    real_now = botocore.auth.get_current_datetime
    monkeypatch.setattr(botocore.auth, "get_current_datetime",
                        lambda: real_now() + dt.timedelta(minutes=skew_minutes))
    resp = signed_request(gw, "GET", f"/{bucket}/one")
    assert_s3_error(resp, 403, "RequestTimeTooSkewed")
    resp = signed_request(gw, "PUT", f"/{bucket}/skewed", body=b"x")
    assert_s3_error(resp, 403, "RequestTimeTooSkewed")
    monkeypatch.undo()
    assert snapshot() == before


def test_s3_no_such_bucket(gw, gw_s3):
    missing = unique("missing")
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=missing, Key="k")
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        gw_s3.list_objects_v2(Bucket=missing)
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        gw_s3.put_object(Bucket=missing, Key="k", Body=b"x")
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        gw_s3.head_bucket(Bucket=missing)
    assert client_error(ei)[0] == 404
    for path in (f"/{missing}/k", f"/{missing}"):
        resp = signed_request(gw, "GET", path)
        assert_s3_error(resp, 404, "NoSuchBucket")
    assert missing not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    assert not (gw.data_dir / missing).exists()


def test_s3_no_such_key(gw, gw_s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=bucket, Key="absent")
    assert client_error(ei) == (404, "NoSuchKey")
    resp = signed_request(gw, "GET", f"/{bucket}/absent/key.bin")
    assert_s3_error(resp, 404, "NoSuchKey")
    # HEAD errors carry the request id but no body.
    resp = signed_request(gw, "HEAD", f"/{bucket}/absent")
    assert resp.status_code == 404
    assert resp.content == b""
    assert resp.headers.get("x-amz-request-id")
    with pytest.raises(ClientError) as ei:
        gw_s3.head_object(Bucket=bucket, Key="absent")
    assert client_error(ei)[0] == 404
    # botocore surfaces the request id of an error.
    with pytest.raises(ClientError) as ei:
        gw_s3.get_object(Bucket=bucket, Key="absent")
    md = ei.value.response["ResponseMetadata"]
    assert md["RequestId"] == md["HTTPHeaders"]["x-amz-request-id"]
    assert snapshot() == before


def test_s3_error_bodies_name_the_resource(gw, gw_bucket):
    """As in S3: NoSuchBucket carries <BucketName>, NoSuchKey carries <Key>."""
    bucket = gw_bucket
    missing = unique("missing")
    err = assert_s3_error(signed_request(gw, "GET", f"/{missing}/k"), 404, "NoSuchBucket")
    assert err.get("BucketName") == missing, err
    err = assert_s3_error(signed_request(gw, "GET", f"/{bucket}/absent/key.bin"), 404, "NoSuchKey")
    assert err.get("Key") == "absent/key.bin", err


def test_s3_request_ids_unique(gw, gw_bucket):
    bucket = gw_bucket
    ids = set()
    for _ in range(5):
        resp = signed_request(gw, "GET", f"/{bucket}/absent")
        ids.add(assert_s3_error(resp, 404, "NoSuchKey")["RequestId"])
    assert len(ids) == 5


def test_s3_oversized_headers(gw, gw_s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    over = gw.max_header_bytes // 1000 + 2  # this many 1000-byte headers are past the limit
    pad = {f"x-talon-pad-{i}": "p" * 1000 for i in range(over)}
    resp = signed_request(gw, "GET", f"/{bucket}/one", headers=pad)
    assert_s3_error(resp, 400, "RequestHeaderSectionTooLarge")
    meta = {f"x-amz-meta-m{i}": "m" * 1000 for i in range(over)}
    resp = signed_request(gw, "PUT", f"/{bucket}/big-headers", headers=meta, body=b"x")
    assert_s3_error(resp, 400, "RequestHeaderSectionTooLarge")
    with pytest.raises(ClientError) as ei:
        gw_s3.put_object(Bucket=bucket, Key="big-meta", Body=b"x", Metadata={f"m{i}": "v" * 1000 for i in range(over)})
    assert client_error(ei) == (400, "RequestHeaderSectionTooLarge")
    assert snapshot() == before
    # Unsigned too: the size is checked before the signature.
    resp = requests.get(f"{gw.s3}/{bucket}/one", headers=pad, timeout=30)
    assert_s3_error(resp, 400, "RequestHeaderSectionTooLarge")
    # Just under the limit is fine.
    ok = {f"x-talon-pad-{i}": "p" * 1000 for i in range(over - 5)}
    resp = signed_request(gw, "GET", f"/{bucket}/one", headers=ok)
    assert resp.status_code == 200 and resp.content == b"one"


def test_s3_not_implemented(gw, gw_s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    with pytest.raises(ClientError) as ei:
        gw_s3.put_bucket_lifecycle_configuration(
            Bucket=bucket,
            LifecycleConfiguration={"Rules": [{"ID": "r", "Status": "Enabled", "Filter": {"Prefix": ""},
                                               "Expiration": {"Days": 1}}]},
        )
    assert client_error(ei) == (501, "NotImplemented")
    resp = signed_request(gw, "GET", f"/{bucket}", params={"policy": ""})
    assert_s3_error(resp, 501, "NotImplemented")
    assert snapshot() == before


@pytest.mark.parametrize("lifetime", ["0", "-7", "604801"])
def test_s3_presigned_lifetime_out_of_range_is_denied(gw_s3, populated, lifetime):
    """X-Amz-Expires outside 1..=604800 seconds grants nothing: 403 AccessDenied, as S3
    answers, and nothing changes."""
    bucket, snapshot = populated
    before = snapshot()
    for method, op, key in (("GET", "get_object", "one"), ("PUT", "put_object", "sneaky")):
        url = gw_s3.generate_presigned_url(op, Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
        assert "X-Amz-Expires=300" in url
        resp = requests.request(method, url.replace("X-Amz-Expires=300", f"X-Amz-Expires={lifetime}"),
                                data=b"x" if method == "PUT" else None, timeout=30)
        assert_s3_error(resp, 403, "AccessDenied")
    assert snapshot() == before


def test_azure_anonymous_to_authenticated(gw, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    base = gw.blob_endpoint
    raw_azure_answer(requests.get(f"{base}/{container}/one", timeout=30), 401, "NoAuthenticationInformation")
    raw_azure_answer(requests.get(f"{base}?comp=list", timeout=30), 401, "NoAuthenticationInformation")
    raw_azure_answer(
        requests.put(f"{base}/{container}/anon", data=b"x", headers={"x-ms-blob-type": "BlockBlob"}, timeout=30),
        401, "NoAuthenticationInformation",
    )
    anon = BlobClient(account_url=base, container_name=container, blob_name="one", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        anon.download_blob()
    azure_error(ei.value, 401, "NoAuthenticationInformation")
    assert snapshot() == before


def _blob_sas(gw, container, blob, **perm):
    return generate_blob_sas(
        gw.azure_account, container, blob, account_key=gw.azure_key,
        permission=BlobSasPermissions(**perm), expiry=utcnow() + dt.timedelta(hours=1),
    )


def test_azure_tampered_sas(gw, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    sas = _blob_sas(gw, container, "one", read=True)
    url = f"{gw.blob_endpoint}/{container}/one"
    assert requests.get(f"{url}?{sas}", timeout=30).content == b"one"
    fields = [part.split("=", 1) for part in sas.split("&")]

    def with_field(name, value):
        out = "&".join(f"{k}={value if k == name else v}" for k, v in fields)
        assert out != sas, name
        return out

    sig = dict(fields)["sig"]
    tampered = {
        "signature": with_field("sig", ("A" if sig[0] != "A" else "B") + sig[1:]),
        "expiry": with_field("se", "2099-01-01T00%3A00%3A00Z"),
        "permission": with_field("sp", "rw"),
    }
    for what, bad in tampered.items():
        bc = BlobClient.from_blob_url(f"{url}?{bad}", retry_total=0)
        with pytest.raises(HttpResponseError) as ei:
            bc.download_blob()
        azure_error(ei.value, 403, "AuthenticationFailed")
        with pytest.raises(HttpResponseError) as ei:
            bc.upload_blob(b"tampered", overwrite=True)
        assert ei.value.status_code == 403, what
    # A blob SAS does not open another blob.
    other = BlobClient.from_blob_url(f"{gw.blob_endpoint}/{container}/two/2?{sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        other.download_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    assert snapshot() == before


def test_azure_read_only_sas_cannot_write(gw, gw_azure, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    sas = generate_container_sas(
        gw.azure_account, container, account_key=gw.azure_key,
        permission=ContainerSasPermissions(read=True, list=True), expiry=utcnow() + dt.timedelta(hours=1),
    )
    cc = ContainerClient.from_container_url(f"{gw.blob_endpoint}/{container}?{sas}", retry_total=0)
    assert cc.download_blob("one").readall() == b"one"
    with pytest.raises(HttpResponseError) as ei:
        cc.upload_blob("sneaky", b"should not land")
    azure_error(ei.value, 403, "AuthorizationPermissionMismatch")
    with pytest.raises(HttpResponseError) as ei:
        cc.get_blob_client("one").upload_blob(b"overwrite", overwrite=True)
    azure_error(ei.value, 403, "AuthorizationPermissionMismatch")
    with pytest.raises(HttpResponseError) as ei:
        cc.get_blob_client("one").delete_blob()
    azure_error(ei.value, 403, "AuthorizationPermissionMismatch")
    with pytest.raises(HttpResponseError) as ei:
        cc.get_blob_client("blocked").stage_block("YmxvY2stMQ==", b"block")
    azure_error(ei.value, 403, "AuthorizationPermissionMismatch")
    # Blob SAS without read permission cannot read.
    wsas = _blob_sas(gw, container, "one", write=True)
    with pytest.raises(HttpResponseError) as ei:
        BlobClient.from_blob_url(f"{gw.blob_endpoint}/{container}/one?{wsas}", retry_total=0).download_blob()
    azure_error(ei.value, 403, "AuthorizationPermissionMismatch")
    assert snapshot() == before
    assert "sneaky" not in [b.name for b in gw_azure.get_container_client(container).list_blobs()]
    assert not (gw.data_dir / container / "sneaky").exists()


def test_azure_container_not_found(gw_azure, gw):
    missing = unique("nocontainer")
    cc = gw_azure.get_container_client(missing)
    with pytest.raises(HttpResponseError) as ei:
        cc.get_container_properties()
    azure_error(ei.value, 404, "ContainerNotFound", body=False)
    with pytest.raises(HttpResponseError) as ei:
        list(cc.list_blobs())
    azure_error(ei.value, 404, "ContainerNotFound")
    with pytest.raises(HttpResponseError) as ei:
        cc.upload_blob("x", b"x")
    azure_error(ei.value, 404, "ContainerNotFound")
    with pytest.raises(HttpResponseError) as ei:
        cc.download_blob("x")
    azure_error(ei.value, 404, "ContainerNotFound")
    assert missing not in [c.name for c in gw_azure.list_containers()]
    assert not (gw.data_dir / missing).exists()


def test_azure_blob_not_found(gw_azure, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    bc = gw_azure.get_blob_client(container, "absent/blob")
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob()
    azure_error(ei.value, 404, "BlobNotFound")
    with pytest.raises(HttpResponseError) as ei:
        bc.get_blob_properties()
    azure_error(ei.value, 404, "BlobNotFound", body=False)
    assert snapshot() == before


def test_azure_range_past_end(gw, gw_azure, az_populated):
    container, snapshot = az_populated
    b, k, size = container, "one", 3
    bc = gw_azure.get_blob_client(b, k)
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(offset=size + 10, length=5)
    azure_error(ei.value, 416, "InvalidRange")
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(offset=size, length=1)
    azure_error(ei.value, 416, "InvalidRange")
    sas = _blob_sas(gw, b, k, read=True)
    url = f"{gw.blob_endpoint}/{b}/{k}?{sas}"
    raw_azure_answer(requests.get(url, headers={"x-ms-range": f"bytes={size}-{size + 9}"}, timeout=30), 416,
                     "InvalidRange")
    raw_azure_answer(requests.get(url, headers={"Range": f"bytes={size + 100}-"}, timeout=30), 416, "InvalidRange")
    # The object still reads fine.
    assert bc.download_blob().readall() == b"one"


def test_azure_request_id_everywhere(gw):
    """Every answer, refusals of unsigned requests included, carries a request id and the
    version it answered in."""
    base = gw.blob_endpoint
    b, k = gw.generated["big"][:2]
    for method, path in (("GET", "?comp=list"), ("GET", f"/{b}/{k}"), ("HEAD", f"/{b}/{k}"),
                         ("GET", f"/{b}?restype=container&comp=list"), ("GET", "/nocontainer-zz/x")):
        resp = requests.request(method, base + path, headers={"x-ms-version": "2020-10-02"}, timeout=30)
        assert resp.headers.get("x-ms-request-id"), (method, path, resp.status_code)
        assert resp.headers.get("x-ms-version") == "2020-10-02", (method, path)
