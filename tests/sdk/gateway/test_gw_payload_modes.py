"""S3 PutObject payload modes and flexible checksums beyond what botocore sends over plain HTTP,
on every target (the origin stub's own module until 2026-12-05).

botocore signs the whole payload over http and puts checksums in headers; other
SDKs (Java v2, Go v2, Rust, JS v3) send ``aws-chunked`` bodies with signed
chunks and/or trailing checksums. These raw requests are built to the SigV4
streaming spec, signed with botocore's SigV4 signer for the seed signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import zlib

import numpy as np
import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import assert_s3_error, sha256

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


# ---------------------------------------------------------------- checksums


def _crc_table(poly: int) -> list:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc_table(0x82F63B78)
_CRC64NVME = _crc_table(0x9A6C9329AC4BC9B5)


def crc32c(data: bytes) -> bytes:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return (c ^ 0xFFFFFFFF).to_bytes(4, "big")


def crc64nvme(data: bytes) -> bytes:
    m = (1 << 64) - 1
    c = m
    for b in data:
        c = _CRC64NVME[(c ^ b) & 0xFF] ^ (c >> 8)
    return (c ^ m).to_bytes(8, "big")


def crc32(data: bytes) -> bytes:
    return zlib.crc32(data).to_bytes(4, "big")


CHECKSUMS = {
    "crc32": crc32,
    "crc32c": crc32c,
    "crc64nvme": crc64nvme,
    "sha1": lambda d: hashlib.sha1(d).digest(),
    "sha256": lambda d: hashlib.sha256(d).digest(),
}


def b64(d: bytes) -> str:
    return base64.b64encode(d).decode()


def test_checksum_helpers_known_values():
    assert crc32c(b"123456789").hex() == "e3069283"
    assert crc64nvme(b"123456789").hex() == "ae8b14860a799888"
    assert crc32(b"123456789").hex() == "cbf43926"


# ---------------------------------------------------------------- signing


class _Signer(S3SigV4Auth):
    """botocore's S3 SigV4 signer with a fixed x-amz-content-sha256 value; remembers its signature."""

    def __init__(self, creds, region, content_sha256):
        super().__init__(creds, "s3", region)
        self._content_sha256 = content_sha256
        self.last_signature = None

    def payload(self, request):
        return self._content_sha256 or super().payload(request)

    def _inject_signature_to_request(self, request, signature):
        self.last_signature = signature
        return super()._inject_signature_to_request(request, signature)


def _signing_key(secret: str, date: str, region: str) -> bytes:
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def _prepare(stub, method, path, headers, content_sha256, secret=None):
    creds = Credentials(stub.access_key, stub.secret_key)
    req = AWSRequest(method=method, url=stub.s3 + path, headers=dict(headers))
    signer = _Signer(creds, stub.region, content_sha256)
    signer.add_auth(req)
    ts = req.context["timestamp"]
    scope = f"{ts[:8]}/{stub.region}/s3/aws4_request"
    key = _signing_key(secret or stub.secret_key, ts[:8], stub.region)
    return req, signer.last_signature, ts, scope, key


def _hmac_hex(key: bytes, msg: str) -> str:
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def _chunks(data: bytes, size: int) -> list:
    return [data[i : i + size] for i in range(0, len(data), size)]


def put_streaming(stub, path, data, *, mode, chunk_size=64 * 1024, trailer_algo=None, trailer_value=None,
                  tamper_chunk=None):
    """PUT ``data`` as aws-chunked in one of the SigV4 streaming modes.

    mode: "signed" (STREAMING-AWS4-HMAC-SHA256-PAYLOAD),
          "signed-trailer" (STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER),
          "unsigned-trailer" (STREAMING-UNSIGNED-PAYLOAD-TRAILER).
    """
    content_sha256 = {
        "signed": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "signed-trailer": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "unsigned-trailer": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    }[mode]
    headers = {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
    }
    trailer_line = None
    if trailer_algo:
        headers["x-amz-trailer"] = f"x-amz-checksum-{trailer_algo}"
        value = trailer_value if trailer_value is not None else b64(CHECKSUMS[trailer_algo](data))
        trailer_line = f"x-amz-checksum-{trailer_algo}:{value}"
    req, seed_sig, ts, scope, key = _prepare(stub, "PUT", path, headers, content_sha256)

    body = bytearray()
    prev = seed_sig
    pieces = _chunks(data, chunk_size) + [b""]
    for n, piece in enumerate(pieces):
        if mode == "unsigned-trailer":
            body += f"{len(piece):x}\r\n".encode()
        else:
            sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ts, scope, prev, EMPTY_SHA256,
                             hashlib.sha256(piece).hexdigest()])
            sig = _hmac_hex(key, sts)
            prev = sig
            if tamper_chunk == n:
                sig = ("0" if sig[0] != "0" else "1") + sig[1:]
            body += f"{len(piece):x};chunk-signature={sig}\r\n".encode()
        if piece:
            body += piece + b"\r\n"
    if trailer_line is not None:
        body += trailer_line.encode() + b"\r\n"
        if mode == "signed-trailer":
            sts = "\n".join(["AWS4-HMAC-SHA256-TRAILER", ts, scope, prev,
                             hashlib.sha256((trailer_line + "\n").encode()).hexdigest()])
            body += f"x-amz-trailer-signature:{_hmac_hex(key, sts)}\r\n".encode()
    body += b"\r\n"
    out_headers = {k: v for k, v in req.headers.items()}
    return requests.put(stub.s3 + path, headers=out_headers, data=bytes(body), timeout=60)


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(300 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def get(s3, bucket, key) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def keys(s3, bucket) -> list:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("algo", sorted(CHECKSUMS))
def test_header_checksum_verified(gw, gw_s3, gw_bucket, algo):
    data = payload(20_000, 1)
    good = b64(CHECKSUMS[algo](data))
    bad = b64(CHECKSUMS[algo](data + b"!"))
    req, *_ = _prepare(gw, "PUT", f"/{gw_bucket}/good", {f"x-amz-checksum-{algo}": good}, hashlib.sha256(data).hexdigest())
    resp = requests.put(gw.s3 + f"/{gw_bucket}/good", headers=dict(req.headers), data=data, timeout=60)
    assert resp.status_code == 200, resp.text
    assert sha256(get(gw_s3, gw_bucket, "good")) == sha256(data)
    req, *_ = _prepare(gw, "PUT", f"/{gw_bucket}/bad", {f"x-amz-checksum-{algo}": bad}, hashlib.sha256(data).hexdigest())
    resp = requests.put(gw.s3 + f"/{gw_bucket}/bad", headers=dict(req.headers), data=data, timeout=60)
    assert_s3_error(resp, 400, "BadDigest")
    assert keys(gw_s3, gw_bucket) == ["good"]


def test_wrong_content_sha256_rejected(gw, gw_s3, gw_bucket):
    data = b"payload whose hash is declared wrongly"
    req, *_ = _prepare(gw, "PUT", f"/{gw_bucket}/x", {}, hashlib.sha256(b"something else").hexdigest())
    resp = requests.put(gw.s3 + f"/{gw_bucket}/x", headers=dict(req.headers), data=data, timeout=60)
    assert_s3_error(resp, 400, "XAmzContentSHA256Mismatch")
    assert keys(gw_s3, gw_bucket) == []


def test_unsigned_payload(gw, gw_s3, gw_bucket):
    data = payload(10_000, 2)
    req, *_ = _prepare(gw, "PUT", f"/{gw_bucket}/unsigned", {}, "UNSIGNED-PAYLOAD")
    resp = requests.put(gw.s3 + f"/{gw_bucket}/unsigned", headers=dict(req.headers), data=data, timeout=60)
    assert resp.status_code == 200, resp.text
    assert sha256(get(gw_s3, gw_bucket, "unsigned")) == sha256(data)


@pytest.mark.parametrize("size", [0, 1, 65536, 200_001])
def test_streaming_signed_chunks(gw, gw_s3, gw_bucket, size):
    data = payload(size, 3)
    resp = put_streaming(gw, f"/{gw_bucket}/signed", data, mode="signed")
    assert resp.status_code == 200, resp.text
    got = get(gw_s3, gw_bucket, "signed")
    assert len(got) == size and sha256(got) == sha256(data)
    # S3's ETag is the MD5 (an Azure origin's is its own).
    etag = gw_s3.head_object(Bucket=gw_bucket, Key="signed")["ETag"]
    assert etag == '"' + hashlib.md5(data).hexdigest() + '"' or not gw.s3_multipart_etags


@pytest.mark.parametrize("algo", ["crc32", "crc32c", "crc64nvme", "sha256"])
def test_streaming_signed_with_trailer(gw, gw_s3, gw_bucket, algo):
    data = payload(150_000, 4)
    resp = put_streaming(gw, f"/{gw_bucket}/st", data, mode="signed-trailer", trailer_algo=algo)
    assert resp.status_code == 200, resp.text
    assert sha256(get(gw_s3, gw_bucket, "st")) == sha256(data)


@pytest.mark.parametrize("algo", ["crc32", "crc32c", "crc64nvme", "sha1"])
def test_streaming_unsigned_trailer(gw, gw_s3, gw_bucket, algo):
    data = payload(150_000, 5)
    resp = put_streaming(gw, f"/{gw_bucket}/ut", data, mode="unsigned-trailer", trailer_algo=algo)
    assert resp.status_code == 200, resp.text
    assert sha256(get(gw_s3, gw_bucket, "ut")) == sha256(data)


def test_streaming_bad_trailer_checksum(gw, gw_s3, gw_bucket):
    data = payload(100_000, 6)
    wrong = b64(crc32(data + b"x"))
    resp = put_streaming(gw, f"/{gw_bucket}/bad-ut", data, mode="unsigned-trailer", trailer_algo="crc32",
                         trailer_value=wrong)
    assert_s3_error(resp, 400, "BadDigest")
    resp = put_streaming(gw, f"/{gw_bucket}/bad-st", data, mode="signed-trailer", trailer_algo="crc32c",
                         trailer_value=b64(crc32c(b"other")))
    assert_s3_error(resp, 400, "BadDigest")
    assert keys(gw_s3, gw_bucket) == []


def test_streaming_tampered_chunk_signature(gw, gw_s3, gw_bucket):
    data = payload(200_000, 7)
    for n in (0, 2, 4):  # first, middle, final (empty) chunk
        resp = put_streaming(gw, f"/{gw_bucket}/tampered", data, mode="signed", tamper_chunk=n)
        assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    assert keys(gw_s3, gw_bucket) == []
