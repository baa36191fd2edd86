"""Error paths: each request gets the protocol's own error and changes nothing."""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
import xml.etree.ElementTree as ET

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

import generated
from conftest import (
    GENERATED,
    assert_s3_error,
    client_error,
    generated_sha,
    s3_client,
    sha256,
    signed_request,
    unique,
    wait_until,
)

OTHER_AZURE_KEY = "bm90LXRoZS1yaWdodC1rZXktbm90LXRoZS1yaWdodC1rZXktbm90LXRoZS1yaWdodC1rZXktbm90LXJpZ2h0IQ=="


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@pytest.fixture
def populated(s3, bucket):
    """A bucket with two objects; returns a snapshot function of its state."""
    s3.put_object(Bucket=bucket, Key="one", Body=b"one")
    s3.put_object(Bucket=bucket, Key="two/2", Body=b"two")

    def snapshot():
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        return [(o["Key"], o["Size"], o["ETag"]) for o in listed]

    return bucket, snapshot


# ================================================================= S3


def test_s3_wrong_secret(stub, populated, s3):
    bucket, snapshot = populated
    before = snapshot()
    bad = s3_client(stub, access_key=stub.access_key, secret_key="not-the-secret")
    for call in (
        lambda: bad.get_object(Bucket=bucket, Key="one"),
        lambda: bad.put_object(Bucket=bucket, Key="new", Body=b"x"),
        lambda: bad.put_object(Bucket=bucket, Key="one", Body=b"overwritten"),
        lambda: bad.delete_object(Bucket=bucket, Key="one"),
        lambda: bad.list_objects_v2(Bucket=bucket),
        lambda: bad.create_bucket(Bucket=unique("nope")),
    ):
        with pytest.raises(ClientError) as ei:
            call()
        assert client_error(ei) == (403, "SignatureDoesNotMatch")
    assert snapshot() == before
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"one"
    resp = signed_request(stub, "GET", f"/{bucket}/one", secret_key="not-the-secret")
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    resp = signed_request(stub, "PUT", f"/{bucket}/raw-new", body=b"raw", secret_key="not-the-secret")
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    assert snapshot() == before


def test_s3_unknown_access_key(stub, populated):
    bucket, snapshot = populated
    before = snapshot()
    bad = s3_client(stub, access_key="AKIAUNKNOWNUNKNOWN00", secret_key=stub.secret_key)
    with pytest.raises(ClientError) as ei:
        bad.get_object(Bucket=bucket, Key="one")
    assert client_error(ei) == (403, "InvalidAccessKeyId")
    with pytest.raises(ClientError) as ei:
        bad.put_object(Bucket=bucket, Key="new", Body=b"x")
    assert client_error(ei) == (403, "InvalidAccessKeyId")
    resp = signed_request(stub, "GET", f"/{bucket}/one", access_key="AKIAUNKNOWNUNKNOWN00")
    assert_s3_error(resp, 403, "InvalidAccessKeyId")
    assert snapshot() == before


def test_s3_anonymous_to_authenticated(stub, populated):
    bucket, snapshot = populated
    before = snapshot()
    resp = requests.get(f"{stub.s3}/{bucket}/one", timeout=30)
    assert_s3_error(resp, 403, "AccessDenied")
    resp = requests.put(f"{stub.s3}/{bucket}/anon-new", data=b"x", timeout=30)
    assert_s3_error(resp, 403, "AccessDenied")
    resp = requests.delete(f"{stub.s3}/{bucket}/one", timeout=30)
    assert_s3_error(resp, 403, "AccessDenied")
    resp = requests.get(f"{stub.s3}/", timeout=30)
    assert_s3_error(resp, 403, "AccessDenied")
    anon = s3_client(stub, unsigned=True)
    with pytest.raises(ClientError) as ei:
        anon.list_objects_v2(Bucket=bucket)
    assert client_error(ei) == (403, "AccessDenied")
    assert snapshot() == before


def test_s3_presigned_expired(s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=1)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "late"}, ExpiresIn=1)
    q = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    signed_at = dt.datetime.strptime(q["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    expires_at = signed_at.timestamp() + int(q["X-Amz-Expires"][0])
    # Wait on the clock, not a fixed sleep: until well past expiry (second granularity).
    wait_until(lambda: time.time() > expires_at + 1.5, timeout=10, interval=0.1, what="presigned URL expiry")
    resp = requests.get(url, timeout=30)
    err = assert_s3_error(resp, 403, "AccessDenied")
    assert "expired" in err.get("Message", "").lower(), err
    resp = requests.put(put_url, data=b"too late", timeout=30)
    assert_s3_error(resp, 403, "AccessDenied")
    assert snapshot() == before


def test_s3_presigned_tampered(s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=300)
    resp = requests.get(url.replace(f"/{bucket}/one?", f"/{bucket}/two/2?"), timeout=30)
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    resp = requests.get(url.replace("X-Amz-Expires=300", "X-Amz-Expires=600"), timeout=30)
    assert_s3_error(resp, 403, "SignatureDoesNotMatch")
    assert snapshot() == before


def test_s3_signed_request_altered_after_signing(stub, s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    def signed_then(method, path, headers, mutate, body=b""):
        req = AWSRequest(method=method, url=stub.s3 + path, headers=dict(headers), data=body)
        botocore.auth.S3SigV4Auth(Credentials(stub.access_key, stub.secret_key), "s3", stub.region).add_auth(req)
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
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "one"}, ExpiresIn=300)
    assert_s3_error(requests.put(url, data=b"evil", timeout=30), 403, "SignatureDoesNotMatch")
    # An extra query parameter on a presigned URL.
    assert_s3_error(requests.get(url + "&x-id=GetObject&extra=1", timeout=30), 403, "SignatureDoesNotMatch")
    assert snapshot() == before
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"one"


@pytest.mark.parametrize("skew_minutes", [-20, 20])
def test_s3_request_time_too_skewed(stub, populated, monkeypatch, skew_minutes):
    bucket, snapshot = populated
    before = snapshot()
    import botocore.auth

    real_now = botocore.auth.get_current_datetime
    monkeypatch.setattr(botocore.auth, "get_current_datetime",
                        lambda: real_now() + dt.timedelta(minutes=skew_minutes))
    resp = signed_request(stub, "GET", f"/{bucket}/one")
    assert_s3_error(resp, 403, "RequestTimeTooSkewed")
    resp = signed_request(stub, "PUT", f"/{bucket}/skewed", body=b"x")
    assert_s3_error(resp, 403, "RequestTimeTooSkewed")
    monkeypatch.undo()
    assert snapshot() == before


def test_s3_no_such_bucket(stub, s3):
    missing = unique("missing")
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=missing, Key="k")
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        s3.list_objects_v2(Bucket=missing)
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=missing, Key="k", Body=b"x")
    assert client_error(ei) == (404, "NoSuchBucket")
    with pytest.raises(ClientError) as ei:
        s3.head_bucket(Bucket=missing)
    assert client_error(ei)[0] == 404
    for path in (f"/{missing}/k", f"/{missing}"):
        resp = signed_request(stub, "GET", path)
        assert_s3_error(resp, 404, "NoSuchBucket")
    assert missing not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert not (stub.data_dir / missing).exists()


def test_s3_no_such_key(stub, s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="absent")
    assert client_error(ei) == (404, "NoSuchKey")
    resp = signed_request(stub, "GET", f"/{bucket}/absent/key.bin")
    assert_s3_error(resp, 404, "NoSuchKey")
    # HEAD errors carry the request id but no body.
    resp = signed_request(stub, "HEAD", f"/{bucket}/absent")
    assert resp.status_code == 404
    assert resp.content == b""
    assert resp.headers.get("x-amz-request-id")
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key="absent")
    assert client_error(ei)[0] == 404
    # botocore surfaces the request id of an error.
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="absent")
    md = ei.value.response["ResponseMetadata"]
    assert md["RequestId"] == md["HTTPHeaders"]["x-amz-request-id"]
    assert snapshot() == before


def test_s3_error_bodies_name_the_resource(stub, bucket):
    """As in S3: NoSuchBucket carries <BucketName>, NoSuchKey carries <Key>."""
    missing = unique("missing")
    err = assert_s3_error(signed_request(stub, "GET", f"/{missing}/k"), 404, "NoSuchBucket")
    assert err.get("BucketName") == missing, err
    err = assert_s3_error(signed_request(stub, "GET", f"/{bucket}/absent/key.bin"), 404, "NoSuchKey")
    assert err.get("Key") == "absent/key.bin", err


def test_s3_request_ids_unique(stub, bucket):
    ids = set()
    for _ in range(5):
        resp = signed_request(stub, "GET", f"/{bucket}/absent")
        ids.add(assert_s3_error(resp, 404, "NoSuchKey")["RequestId"])
    assert len(ids) == 5


def test_s3_malformed_range_ignored_raw(stub):
    b, k, size, _ = GENERATED["small"]
    resp = signed_request(stub, "GET", f"/{b}/{k}", headers={"Range": "bytes=1-0"})
    assert resp.status_code == 200
    assert "Content-Range" not in resp.headers
    assert sha256(resp.content) == generated_sha("small")


def test_s3_oversized_headers(stub, s3, populated, anon_stub):
    bucket, snapshot = populated
    before = snapshot()
    pad = {f"x-talon-pad-{i}": "p" * 1000 for i in range(10)}  # ~10 KiB of headers
    resp = signed_request(stub, "GET", f"/{bucket}/one", headers=pad)
    assert_s3_error(resp, 400, "RequestHeaderSectionTooLarge")
    meta = {f"x-amz-meta-m{i}": "m" * 1000 for i in range(10)}
    resp = signed_request(stub, "PUT", f"/{bucket}/big-headers", headers=meta, body=b"x")
    assert_s3_error(resp, 400, "RequestHeaderSectionTooLarge")
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bucket, Key="big-meta", Body=b"x", Metadata={f"m{i}": "v" * 1000 for i in range(10)})
    assert client_error(ei) == (400, "RequestHeaderSectionTooLarge")
    assert snapshot() == before
    # Unsigned, on the anonymous stub, too.
    resp = requests.get(f"{anon_stub.s3}/gen/small.bin", headers=pad, timeout=30)
    assert_s3_error(resp, 400, "RequestHeaderSectionTooLarge")
    # Just under the limit is fine.
    ok = {f"x-talon-pad-{i}": "p" * 1000 for i in range(6)}
    resp = requests.get(f"{anon_stub.s3}/gen/small.bin", headers=ok, timeout=30)
    assert resp.status_code == 200 and sha256(resp.content) == generated_sha("small")


def test_s3_not_implemented(stub, s3, populated):
    bucket, snapshot = populated
    before = snapshot()
    with pytest.raises(ClientError) as ei:
        s3.put_bucket_lifecycle_configuration(
            Bucket=bucket,
            LifecycleConfiguration={"Rules": [{"ID": "r", "Status": "Enabled", "Filter": {"Prefix": ""},
                                               "Expiration": {"Days": 1}}]},
        )
    assert client_error(ei) == (501, "NotImplemented")
    resp = signed_request(stub, "GET", f"/{bucket}", params={"policy": ""})
    assert_s3_error(resp, 501, "NotImplemented")
    assert snapshot() == before


# ================================================================= Azure


def azure_error(exc: HttpResponseError, status: int, code: str, body: bool = True):
    """Check an Azure SDK error: status, error_code, x-ms-error-code, x-ms-request-id, XML <Code>."""
    assert exc.status_code == status, f"expected {status} {code}, got {exc.status_code} {exc.error_code}: {exc}"
    assert exc.error_code == code, f"expected {code}, got {exc.error_code}: {exc}"
    headers = exc.response.headers
    assert headers.get("x-ms-error-code") == code
    assert headers.get("x-ms-request-id")
    if body:
        root = ET.fromstring(exc.response.text())
        assert root.tag == "Error" and root.findtext("Code") == code, exc.response.text()


def raw_azure_error(resp, status: int, code: str):
    assert resp.status_code == status, f"expected {status} {code}, got {resp.status_code}: {resp.text[:500]}"
    assert resp.headers.get("x-ms-error-code") == code, dict(resp.headers)
    assert resp.headers.get("x-ms-request-id")
    if resp.request.method != "HEAD":
        root = ET.fromstring(resp.content)
        assert root.tag == "Error" and root.findtext("Code") == code, resp.text


@pytest.fixture
def az_populated(azure, container):
    cc = azure.get_container_client(container)
    cc.upload_blob("one", b"one")
    cc.upload_blob("two/2", b"two")

    def snapshot():
        return [(b.name, b.size, b.etag) for b in cc.list_blobs()]

    return container, snapshot


def test_azure_wrong_key(stub, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    bad = BlobServiceClient.from_connection_string(stub.connection_string(OTHER_AZURE_KEY), retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        list(bad.list_containers())
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bad.get_blob_client(container, "one").download_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bad.get_blob_client(container, "new").upload_blob(b"x")
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bad.get_blob_client(container, "one").upload_blob(b"overwritten", overwrite=True)
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bad.get_blob_client(container, "one").delete_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bad.get_blob_client(container, "one").get_blob_properties()
    azure_error(ei.value, 403, "AuthenticationFailed", body=False)
    assert snapshot() == before


def test_azure_anonymous_to_authenticated(stub, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    base = stub.blob_endpoint
    raw_azure_error(requests.get(f"{base}/{container}/one", timeout=30), 401, "NoAuthenticationInformation")
    raw_azure_error(requests.get(f"{base}?comp=list", timeout=30), 401, "NoAuthenticationInformation")
    raw_azure_error(
        requests.put(f"{base}/{container}/anon", data=b"x", headers={"x-ms-blob-type": "BlockBlob"}, timeout=30),
        401, "NoAuthenticationInformation",
    )
    anon = BlobClient(account_url=base, container_name=container, blob_name="one", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        anon.download_blob()
    azure_error(ei.value, 401, "NoAuthenticationInformation")
    assert snapshot() == before


def _blob_sas(stub, container, blob, **perm):
    return generate_blob_sas(
        stub.azure_account, container, blob, account_key=stub.azure_key,
        permission=BlobSasPermissions(**perm), expiry=utcnow() + dt.timedelta(hours=1),
    )


def test_azure_tampered_sas(stub, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    sas = _blob_sas(stub, container, "one", read=True)
    url = f"{stub.blob_endpoint}/{container}/one"
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
    other = BlobClient.from_blob_url(f"{stub.blob_endpoint}/{container}/two/2?{sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        other.download_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    assert snapshot() == before


def test_azure_expired_sas(stub, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    sas = generate_blob_sas(
        stub.azure_account, container, "one", account_key=stub.azure_key,
        permission=BlobSasPermissions(read=True, write=True),
        start=utcnow() - dt.timedelta(hours=2), expiry=utcnow() - dt.timedelta(minutes=5),
    )
    bc = BlobClient.from_blob_url(f"{stub.blob_endpoint}/{container}/one?{sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob()
    azure_error(ei.value, 403, "AuthenticationFailed")
    with pytest.raises(HttpResponseError) as ei:
        bc.upload_blob(b"expired write", overwrite=True)
    azure_error(ei.value, 403, "AuthenticationFailed")
    # Not yet valid is refused too.
    sas = generate_container_sas(
        stub.azure_account, container, account_key=stub.azure_key,
        permission=ContainerSasPermissions(read=True, list=True),
        start=utcnow() + dt.timedelta(hours=1), expiry=utcnow() + dt.timedelta(hours=2),
    )
    cc = ContainerClient.from_container_url(f"{stub.blob_endpoint}/{container}?{sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        list(cc.list_blobs())
    azure_error(ei.value, 403, "AuthenticationFailed")
    assert snapshot() == before


def test_azure_read_only_sas_cannot_write(stub, azure, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    sas = generate_container_sas(
        stub.azure_account, container, account_key=stub.azure_key,
        permission=ContainerSasPermissions(read=True, list=True), expiry=utcnow() + dt.timedelta(hours=1),
    )
    cc = ContainerClient.from_container_url(f"{stub.blob_endpoint}/{container}?{sas}", retry_total=0)
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
    wsas = _blob_sas(stub, container, "one", write=True)
    with pytest.raises(HttpResponseError) as ei:
        BlobClient.from_blob_url(f"{stub.blob_endpoint}/{container}/one?{wsas}", retry_total=0).download_blob()
    azure_error(ei.value, 403, "AuthorizationPermissionMismatch")
    assert snapshot() == before
    assert "sneaky" not in [b.name for b in azure.get_container_client(container).list_blobs()]
    assert not (stub.data_dir / container / "sneaky").exists()


def test_azure_container_not_found(azure, stub):
    missing = unique("nocontainer")
    cc = azure.get_container_client(missing)
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
    assert missing not in [c.name for c in azure.list_containers()]
    assert not (stub.data_dir / missing).exists()


def test_azure_blob_not_found(azure, az_populated):
    container, snapshot = az_populated
    before = snapshot()
    bc = azure.get_blob_client(container, "absent/blob")
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob()
    azure_error(ei.value, 404, "BlobNotFound")
    with pytest.raises(HttpResponseError) as ei:
        bc.get_blob_properties()
    azure_error(ei.value, 404, "BlobNotFound", body=False)
    assert snapshot() == before


def test_azure_range_past_end(azure, anon_stub):
    b, k, size, _ = GENERATED["small"]
    bc = azure.get_blob_client(b, k)
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(offset=size + 10, length=5)
    azure_error(ei.value, 416, "InvalidRange")
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(offset=size, length=1)
    azure_error(ei.value, 416, "InvalidRange")
    url = f"{anon_stub.blob_endpoint}/{b}/{k}"
    raw_azure_error(requests.get(url, headers={"x-ms-range": f"bytes={size}-{size + 9}"}, timeout=30), 416, "InvalidRange")
    raw_azure_error(requests.get(url, headers={"Range": f"bytes={size + 100}-"}, timeout=30), 416, "InvalidRange")
    # The object still reads fine.
    assert sha256(bc.download_blob().readall()) == generated_sha("small")


def test_azure_request_id_everywhere(anon_stub):
    base = anon_stub.blob_endpoint
    for method, path in (("GET", "?comp=list"), ("GET", "/gen/small.bin"), ("HEAD", "/gen/small.bin"),
                         ("GET", "/gen?restype=container&comp=list"), ("GET", "/nocontainer-zz/x")):
        resp = requests.request(method, base + path, headers={"x-ms-version": "2020-10-02"}, timeout=30)
        assert resp.headers.get("x-ms-request-id"), (method, path, resp.status_code)
        assert resp.headers.get("x-ms-version") == "2020-10-02", (method, path)


@pytest.mark.parametrize("lifetime", ["0", "-7", "604801"])
def test_s3_presigned_lifetime_out_of_range_is_denied(s3, populated, lifetime):
    """X-Amz-Expires outside 1..=604800 seconds grants nothing: 403 AccessDenied, as S3
    answers, and nothing changes."""
    bucket, snapshot = populated
    before = snapshot()
    for method, op, key in (("GET", "get_object", "one"), ("PUT", "put_object", "sneaky")):
        url = s3.generate_presigned_url(op, Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
        assert "X-Amz-Expires=300" in url
        resp = requests.request(method, url.replace("X-Amz-Expires=300", f"X-Amz-Expires={lifetime}"),
                                data=b"x" if method == "PUT" else None, timeout=30)
        assert_s3_error(resp, 403, "AccessDenied")
    assert snapshot() == before
