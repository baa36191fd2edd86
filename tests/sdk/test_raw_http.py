"""Raw HTTP against the anonymous stub: wire details the SDKs hide."""

from __future__ import annotations

import base64
import socket
import hashlib
import urllib.parse
import xml.etree.ElementTree as ET

import pytest
import requests

import generated
from conftest import GENERATED, assert_s3_error, generated_sha, sha256, unique

S3NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"

KEYS = ["plain", "amp&lt<gt>\"'.txt", "plus+sp ace.txt", "pct%2F.txt", "ünï/ключ"]


@pytest.fixture(scope="module")
def raw_bucket(anon_stub):
    name = unique("raw")
    assert requests.put(f"{anon_stub.s3}/{name}", timeout=30).status_code == 200
    for key in KEYS:
        resp = requests.put(f"{anon_stub.s3}/{name}/{urllib.parse.quote(key)}", data=key.encode(), timeout=30)
        assert resp.status_code == 200, resp.text
    return name


def _list(anon_stub, bucket, **params):
    resp = requests.get(f"{anon_stub.s3}/{bucket}", params={"list-type": "2", **params}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers.get("x-amz-request-id")
    root = ET.fromstring(resp.content)
    assert root.tag == S3NS + "ListBucketResult", root.tag
    return root


def test_list_xml_escaping(anon_stub, raw_bucket):
    root = _list(anon_stub, raw_bucket)
    got = [c.findtext(S3NS + "Key") for c in root.findall(S3NS + "Contents")]
    assert got == sorted(KEYS, key=lambda k: k.encode())
    assert root.find(S3NS + "EncodingType") is None


def test_list_encoding_type_url(anon_stub, raw_bucket):
    root = _list(anon_stub, raw_bucket, **{"encoding-type": "url", "delimiter": "/", "prefix": ""})
    assert root.findtext(S3NS + "EncodingType") == "url"
    raw = [c.findtext(S3NS + "Key") for c in root.findall(S3NS + "Contents")]
    # Decoded as botocore does it (unquote_plus), the keys come back exactly.
    assert sorted(urllib.parse.unquote_plus(k) for k in raw) == sorted(k for k in KEYS if "/" not in k)
    for k in raw:
        assert "+" not in k.replace("%2B", ""), f"a literal '+' must be encoded: {k}"
    prefixes = [urllib.parse.unquote_plus(p.findtext(S3NS + "Prefix")) for p in root.findall(S3NS + "CommonPrefixes")]
    assert prefixes == ["ünï/"]


def test_success_has_request_id_and_etag(anon_stub):
    b, k, size, seed = GENERATED["small"]
    url = f"{anon_stub.s3}/{b}/{k}"
    get = requests.get(url, timeout=30)
    head = requests.head(url, timeout=30)
    assert get.status_code == head.status_code == 200
    assert get.headers.get("x-amz-request-id") and head.headers.get("x-amz-request-id")
    assert get.headers["ETag"] == head.headers["ETag"] == generated.generated_etag(b, k, size, seed)
    assert int(head.headers["Content-Length"]) == size == len(get.content)
    assert get.headers["Last-Modified"] == head.headers["Last-Modified"]
    assert sha256(get.content) == generated_sha("small")


def test_head_error_has_no_body(anon_stub):
    resp = requests.head(f"{anon_stub.s3}/gen/absent", timeout=30)
    assert resp.status_code == 404 and resp.content == b""
    assert resp.headers.get("x-amz-request-id")
    resp = requests.get(f"{anon_stub.s3}/gen/absent", timeout=30)
    assert_s3_error(resp, 404, "NoSuchKey")


def test_azure_put_blob_wrong_md5(anon_stub):
    name = unique("rawaz")
    base = f"{anon_stub.blob_endpoint}/{name}"
    assert requests.put(base, params={"restype": "container"}, timeout=30).status_code == 201
    body = b"blob body"
    wrong = base64.b64encode(hashlib.md5(b"not the body").digest()).decode()
    resp = requests.put(f"{base}/b", data=body, headers={"x-ms-blob-type": "BlockBlob", "Content-MD5": wrong},
                        timeout=30)
    assert resp.status_code == 400, resp.text
    assert resp.headers.get("x-ms-error-code") == "Md5Mismatch"
    assert requests.head(f"{base}/b", timeout=30).status_code == 404
    good = base64.b64encode(hashlib.md5(body).digest()).decode()
    resp = requests.put(f"{base}/b", data=body, headers={"x-ms-blob-type": "BlockBlob", "Content-MD5": good},
                        timeout=30)
    assert resp.status_code == 201, resp.text
    assert resp.headers.get("Content-MD5") == good
    assert requests.get(f"{base}/b", timeout=30).content == body


def test_azure_range_md5(anon_stub):
    """x-ms-range-get-content-md5: a range of at most 4 MiB comes with the MD5 of the range
    itself as Content-MD5 (the blob's own stays in x-ms-blob-content-md5); a larger or
    missing range is refused, as Azure does."""
    name = unique("rawaz")
    base = f"{anon_stub.blob_endpoint}/{name}"
    assert requests.put(base, params={"restype": "container"}, timeout=30).status_code == 201
    body = bytes(range(256)) * 40
    resp = requests.put(f"{base}/b", data=body, headers={"x-ms-blob-type": "BlockBlob"}, timeout=30)
    assert resp.status_code == 201, resp.text
    resp = requests.get(f"{base}/b", headers={"x-ms-range": "bytes=100-1123", "x-ms-range-get-content-md5": "true"},
                        timeout=30)
    assert resp.status_code == 206, resp.text
    assert resp.content == body[100:1124]
    assert resp.headers["Content-MD5"] == base64.b64encode(hashlib.md5(body[100:1124]).digest()).decode()
    assert resp.headers["x-ms-blob-content-md5"] == base64.b64encode(hashlib.md5(body).digest()).decode()
    for headers in ({"x-ms-range-get-content-md5": "true"},
                    {"x-ms-range": "bytes=0-4194304", "x-ms-range-get-content-md5": "true"}):
        resp = requests.get(f"{base}/b", headers=headers, timeout=30)
        assert resp.status_code == 400, resp.text
        assert resp.headers.get("x-ms-error-code") == "InvalidHeaderValue"


def test_azure_put_blob_requires_blob_type(anon_stub):
    name = unique("rawaz")
    base = f"{anon_stub.blob_endpoint}/{name}"
    assert requests.put(base, params={"restype": "container"}, timeout=30).status_code == 201
    resp = requests.put(f"{base}/b", data=b"x", timeout=30)
    assert resp.status_code == 400, resp.text
    assert resp.headers.get("x-ms-error-code") == "MissingRequiredHeader"
    assert requests.head(f"{base}/b", timeout=30).status_code == 404


def _http_exchange(base_url: str, head: bytes, late_body: bytes, follow_up: bytes):
    """Send a request's head, read the (early) response, then the body, then a second request.

    HTTP/1.1 (RFC 9112 §9.3): a server that answers before reading the body must either
    read and discard it and keep the connection usable, or say ``Connection: close``.
    """
    host, port = base_url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        first = _read_response(sock)
        if first is None:
            return None, None
        if b"connection: close" in first[0].lower():
            return first, "closed-as-announced"
        try:
            sock.sendall(late_body + follow_up)
            second = _read_response(sock)
        except OSError as exc:
            second = None
            return first, f"error: {exc}"
        return first, second


def _read_response(sock):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:length]


@pytest.mark.parametrize("case", ["s3-oversized-headers", "s3-anonymous-put-on-auth-stub", "azure-anonymous-put-on-auth-stub"])
def test_early_error_keeps_connection_usable_or_closes_it(anon_stub, stub, case):
    body = b"b" * 5000
    if case == "s3-oversized-headers":
        base, path = anon_stub.s3, "/gen/early-error"
        extra = "".join(f"x-talon-pad-{i}: {'p' * 1000}\r\n" for i in range(10))
        follow = b"GET /gen/small.bin HTTP/1.1\r\nHost: stub\r\n\r\n"
    elif case == "s3-anonymous-put-on-auth-stub":
        base, path, extra = stub.s3, "/gen/early-error", ""
        follow = b"GET /gen/small.bin HTTP/1.1\r\nHost: stub\r\n\r\n"
    else:
        base, path = stub.azure, f"/{stub.azure_account}/gen/early-error"
        extra = "x-ms-blob-type: BlockBlob\r\n"
        follow = f"GET /{stub.azure_account}/gen/small.bin HTTP/1.1\r\nHost: stub\r\n\r\n".encode()
    head = f"PUT {path} HTTP/1.1\r\nHost: stub\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
    first, second = _http_exchange(base, head, body, follow)
    assert first is not None, "no response to the request head"
    status = int(first[0].split(b" ")[1])
    assert 400 <= status < 500, first[0]
    if second == "closed-as-announced":
        return
    assert isinstance(second, tuple), (
        f"after an early {status} without 'Connection: close', sending the body and a second request "
        f"on the same connection failed ({second!r}): the server dropped a connection it had left open"
    )
    second_status = int(second[0].split(b" ")[1])
    assert second_status in (200, 401, 403), second[0]


def test_anonymous_stub_roundtrip(anon_stub, anon_azure):
    name = unique("anon")
    cc = anon_azure.create_container(name)
    body = bytes((i * 7 + 3) % 256 for i in range(70_000))
    cc.upload_blob("x/y.bin", body)
    assert sha256(cc.download_blob("x/y.bin").readall()) == sha256(body)
    assert [b.name for b in cc.list_blobs()] == ["x/y.bin"]
    b, k, _, _ = GENERATED["small"]
    assert sha256(anon_azure.get_blob_client(b, k).download_blob().readall()) == generated_sha("small")


def test_raw_range_headers_and_version_echo(anon_stub):
    b, k, size, seed = GENERATED["small"]
    url = f"{anon_stub.blob_endpoint}/{b}/{k}"
    for header in ("x-ms-range", "Range"):
        resp = requests.get(url, headers={header: "bytes=10-29", "x-ms-version": "2021-08-06"}, timeout=30)
        assert resp.status_code == 206, (header, resp.text)
        assert resp.headers["Content-Range"] == f"bytes 10-29/{size}"
        assert resp.content == generated.generated_bytes(b, k, seed, 10, 30)
        assert resp.headers.get("x-ms-version") == "2021-08-06"
        assert resp.headers.get("x-ms-request-id")
        assert resp.headers.get("ETag") == generated.generated_etag(b, k, size, seed)
    resp = requests.head(url, headers={"x-ms-version": "2025-11-05"}, timeout=30)
    assert resp.status_code == 200
    assert int(resp.headers["Content-Length"]) == size
    assert resp.headers.get("x-ms-version") == "2025-11-05"
    assert resp.headers.get("x-ms-blob-type") == "BlockBlob"
