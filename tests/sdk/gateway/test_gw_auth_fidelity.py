"""Authentication fidelity through the gateway (SEC-08, -09, -10, -15, -16 of the security
review), signed by code Talon does not share: botocore's signers, the Azure SDK's SAS
generators, and the review's own hand-made HMACs. Each forged request is refused with
the protocol's code, and the origin's data is unchanged afterwards."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import urllib.parse

import pytest
import requests
from azure.storage.blob import ContainerSasPermissions, generate_container_sas
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import parse_s3_error, unique

from . import harness


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def sigv4(gw, method: str, path: str, region: str | None = None, service: str = "s3", headers=None):
    req = AWSRequest(method=method, url=gw.s3 + path, headers=dict(headers or {}), data=b"")
    S3SigV4Auth(Credentials(gw.access_key, gw.secret_key), service, region or gw.region).add_auth(req)
    p = req.prepare()
    return requests.request(method, p.url, headers=dict(p.headers), timeout=30)


@pytest.fixture
def s3_object(up):
    """An object in a fresh bucket of `talon up` (its folder is the origin's)."""
    bucket = unique("fid")
    (up.data_dir / bucket).mkdir()
    (up.data_dir / bucket / "hello.txt").write_bytes(b"genuine")
    return bucket, up.data_dir / bucket


def test_a_signature_for_another_region_or_service_is_refused(up, s3_object):
    bucket, folder = s3_object
    assert sigv4(up, "GET", f"/{bucket}/hello.txt").status_code == 200
    for region, service in (("eu-west-1", "s3"), ("us-east-1", "sqs"), ("mars-1", "sqs")):
        resp = sigv4(up, "GET", f"/{bucket}/hello.txt", region=region, service=service)
        assert resp.status_code == 400, (region, service, resp.text)
        assert parse_s3_error(resp.content)["Code"] == "AuthorizationHeaderMalformed"


def test_unsigned_operation_changing_headers_are_refused_on_presigned_urls(up, s3_object):
    bucket, folder = s3_object
    req = AWSRequest(method="PUT", url=f"{up.s3}/{bucket}/uploads/x", data=b"")
    S3SigV4QueryAuth(Credentials(up.access_key, up.secret_key), "s3", up.region, expires=600).add_auth(req)
    url = req.prepare().url
    for extra in ({"x-amz-copy-source": f"/{bucket}/hello.txt"}, {"x-amz-meta-owner": "mallory"},
                  {"x-amz-tagging": "a=b"}):
        resp = requests.put(url, data=b"data", headers=extra, timeout=30)
        assert resp.status_code == 403, (extra, resp.text)
        assert parse_s3_error(resp.content)["Code"] == "AccessDenied"
    assert not (folder / "uploads" / "x").exists()
    # The same URL without them works: the refusal was about the unsigned headers.
    assert requests.put(url, data=b"data", timeout=30).status_code == 200
    assert (folder / "uploads" / "x").read_bytes() == b"data"


def sigv2_url(gw, bucket: str, key: str, expires: int, extra: str = "") -> str:
    sts = f"GET\n\n\n{expires}\n/{bucket}/{key}"
    sig = base64.b64encode(hmac.new(gw.secret_key.encode(), sts.encode(), hashlib.sha1).digest()).decode()
    q = f"AWSAccessKeyId={gw.access_key}&Expires={expires}&Signature={urllib.parse.quote(sig, safe='')}"
    return f"{gw.s3}/{bucket}/{key}?{q}{extra}"


def test_sigv2_expiry_is_capped_and_encoded_subresources_are_signed(up, s3_object):
    bucket, _ = s3_object
    soon = int(utcnow().timestamp()) + 600
    assert requests.get(sigv2_url(up, bucket, "hello.txt", soon), timeout=30).status_code == 200
    # Valid until 2100: refused however well signed.
    resp = requests.get(sigv2_url(up, bucket, "hello.txt", 4102444800), timeout=30)
    assert resp.status_code == 403, resp.text
    # An encoded sub-resource name is signed like the plain one: adding it breaks the URL.
    for extra in ("&response-content-type=text/html", "&response-content-typ%65=text/html"):
        resp = requests.get(sigv2_url(up, bucket, "hello.txt", soon, extra), timeout=30)
        assert resp.status_code == 403, (extra, resp.headers.get("content-type"), resp.text)
        assert parse_s3_error(resp.content)["Code"] == "SignatureDoesNotMatch"


def shared_key_get(gw, container: str, blob: str, date: str | None, query: str = ""):
    key = base64.b64decode(harness.CLIENT_AZURE_KEY)
    acct = gw.azure_account
    headers = {"x-ms-version": "2021-08-06"}
    if date:
        headers["x-ms-date"] = date
    canon_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    resource = f"/{acct}/{acct}/{container}/{blob}"
    params = urllib.parse.parse_qsl(query)
    canon_res = resource + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(params))
    sts = "GET" + "\n" * 12 + canon_headers + canon_res
    sig = base64.b64encode(hmac.new(key, sts.encode(), hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {acct}:{sig}"
    url = f"{gw.blob_endpoint}/{container}/{blob}" + (f"?{query}" if query else "")
    return requests.get(url, headers=headers, timeout=30)


def test_shared_key_needs_a_fresh_date_and_classifies_query_names_as_signed(up, s3_object):
    container, _ = s3_object
    now = utcnow().strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert shared_key_get(up, container, "hello.txt", now).status_code == 200
    for date in ("Mon, 01 Jan 2001 00:00:00 GMT", None,
                 (utcnow() + dt.timedelta(minutes=20)).strftime("%a, %d %b %Y %H:%M:%S GMT")):
        resp = shared_key_get(up, container, "hello.txt", date)
        assert resp.status_code == 403, (date, resp.text)
        assert resp.headers.get("x-ms-error-code") == "AuthenticationFailed"
    # The review's case flip: a signature made for COMP=blocklist is classified as
    # Get Block List, exactly what it signed, not as Get Blob.
    resp = shared_key_get(up, container, "hello.txt", now, query="COMP=blocklist")
    assert resp.content != b"genuine", "a case-flipped comp was served as Get Blob"


def test_a_service_sas_cannot_create_or_delete_a_container(up):
    name = unique("sasc")
    (up.data_dir / name).mkdir()
    expiry = utcnow() + dt.timedelta(hours=1)
    fresh = unique("sasn")
    for perm, method, target in ((ContainerSasPermissions(delete=True), "DELETE", name),
                                 (ContainerSasPermissions(create=True, write=True), "PUT", fresh)):
        sas = generate_container_sas(up.azure_account, target, account_key=harness.CLIENT_AZURE_KEY,
                                     permission=perm, expiry=expiry)
        resp = requests.request(method, f"{up.blob_endpoint}/{target}?restype=container&{sas}",
                                headers={"x-ms-version": "2021-08-06"}, timeout=30)
        assert resp.status_code == 403, (method, resp.text)
        assert resp.headers.get("x-ms-error-code") == "AuthorizationPermissionMismatch"
    assert (up.data_dir / name).is_dir(), "the container was deleted"
    assert not (up.data_dir / fresh).exists(), "a container was created"


def test_a_missing_bucket_is_no_such_bucket_through_the_cache(gw):
    """Review item 8: a missing bucket is NoSuchBucket (ContainerNotFound), not NoSuchKey,
    also when the read goes through the cache."""
    from botocore.exceptions import ClientError
    from azure.core.exceptions import HttpResponseError

    from conftest import blob_service, client_error, s3_client

    missing = unique("nobkt")
    with pytest.raises(ClientError) as ei:
        s3_client(gw).get_object(Bucket=missing, Key="k")
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(HttpResponseError) as ei:
        blob_service(gw).get_blob_client(missing, "k").download_blob()
    assert ei.value.error_code == "ContainerNotFound"
