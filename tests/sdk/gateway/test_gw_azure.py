"""azure-storage-blob through the gateway's Azure Blob front (talon up and the cluster)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import urllib.parse

import numpy as np
import pytest
import requests
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import (
    AccountSasPermissions,
    BlobClient,
    BlobSasPermissions,
    BlobServiceClient,
    ContainerClient,
    ContainerSasPermissions,
    ContentSettings,
    ResourceTypes,
    generate_account_sas,
    generate_blob_sas,
    generate_container_sas,
)

import generated
from conftest import MiB, blob_service, sha256, unique

ODD_NAMES = [
    "a.txt",
    "dir/b.txt",
    "dir/sub/c.txt",
    "dir with space/d e.txt",
    "plus+sign.txt",
    "percent%20literal.txt",
    "amp&lt<gt>.txt",
    "ünïcødé/ключ.txt",
    "z/😀 emoji.bin",
]
BLOCK = 1 * MiB


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(6000 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def gen_sha(gw, which="big") -> str:
    b, k, size, seed = gw.generated[which]
    return generated.sha256_of_generated(b, k, size, seed)


# -------------------------------------------------------------- listing


def test_list_containers_and_blobs(gw, gw_azure, gw_container):
    names = [c.name for c in gw_azure.list_containers()]
    assert gw_container in names and gw.generated["big"][0] in names
    assert names == sorted(names)
    assert not [n for n in names if n.startswith(".")], f"internal folders listed as containers: {names}"
    assert [c.name for c in gw_azure.list_containers(name_starts_with=gw_container)] == [gw_container]
    props = gw_azure.get_container_client(gw_container).get_container_properties()
    assert props.name == gw_container and props.etag

    cc = gw_azure.get_container_client(gw_container)
    for i, name in enumerate(ODD_NAMES):
        cc.upload_blob(name, f"blob {name} #{i}".encode())
    expected = sorted(ODD_NAMES, key=lambda n: n.encode())
    blobs = list(cc.list_blobs())
    assert [b.name for b in blobs] == expected
    for b in blobs:
        assert b.size == len(f"blob {b.name} #{ODD_NAMES.index(b.name)}".encode())
    assert [b.name for b in cc.list_blobs(name_starts_with="dir/")] == ["dir/b.txt", "dir/sub/c.txt"]
    pages = [[b.name for b in page] for page in cc.list_blobs(results_per_page=2).by_page()]
    assert [n for p in pages for n in p] == expected
    assert [len(p) for p in pages] == [2, 2, 2, 2, 1]
    top = sorted(item.name for item in cc.walk_blobs(delimiter="/"))
    assert top == sorted(["a.txt", "plus+sign.txt", "percent%20literal.txt", "amp&lt<gt>.txt",
                          "dir/", "dir with space/", "ünïcødé/", "z/"])
    # Each odd name downloads through the cache with its own bytes and ETag.
    for i, name in enumerate(ODD_NAMES):
        bc = cc.get_blob_client(name)
        d = bc.download_blob()
        assert d.readall() == f"blob {name} #{i}".encode(), name
        assert d.properties.etag == bc.get_blob_properties().etag == next(b.etag for b in blobs if b.name == name)


# -------------------------------------------------------------- downloads


def test_download_full_and_offset_length(gw, gw_azure):
    b, k, size, seed = gw.generated["big"]
    bc = gw_azure.get_blob_client(b, k)
    props = bc.get_blob_properties()
    assert props.size == size
    assert props.etag == gw.generated_etag("big")
    assert props.blob_type == "BlockBlob"
    assert props.content_settings.content_type == gw.default_content_type
    full = bc.download_blob().readall()
    assert len(full) == size and sha256(full) == gen_sha(gw)
    for offset, length in ((0, 1), (7, 100), (BLOCK - 3, 10), (BLOCK - 65536, 3 * BLOCK), (size - 10, 10),
                           (size - 4096, None)):
        got = bc.download_blob(offset=offset, length=length).readall()
        end = size if length is None else offset + length
        assert sha256(got) == sha256(generated.generated_bytes(b, k, seed, offset, end)), (offset, length)


def test_download_parallel_small_chunks(gw):
    svc = blob_service(gw, max_single_get_size=1 * MiB, max_chunk_get_size=512 * 1024)
    b, k, size, _ = gw.generated["big"]
    downloader = svc.get_blob_client(b, k).download_blob(max_concurrency=4)
    assert downloader.size == size
    data = downloader.readall()
    assert len(data) == size and sha256(data) == gen_sha(gw)
    # A window of the blob, chunked and parallel too.
    got = svc.get_blob_client(b, k).download_blob(offset=BLOCK + 5, length=3 * MiB, max_concurrency=4).readall()
    assert got == data[BLOCK + 5: BLOCK + 5 + 3 * MiB]
    h = hashlib.sha256()
    for chunk in svc.get_blob_client(b, k).download_blob().chunks():
        h.update(chunk)
    assert h.hexdigest() == gen_sha(gw)


def test_conditional_download(gw_azure, gw_container):
    bc = gw_azure.get_blob_client(gw_container, "cond")
    etag = bc.upload_blob(b"conditional")["etag"]
    assert bc.download_blob(etag=etag, match_condition=MatchConditions.IfNotModified).readall() == b"conditional"
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(etag='"0x8D000000BADBAD"', match_condition=MatchConditions.IfNotModified)
    assert ei.value.status_code == 412 and ei.value.error_code == "ConditionNotMet"
    with pytest.raises(HttpResponseError) as ei:
        bc.get_blob_properties(etag=etag, match_condition=MatchConditions.IfModified)
    assert ei.value.status_code == 304


# -------------------------------------------------------------- uploads


def test_upload_small_and_blocked(gw, gw_container, gw_s3):
    svc = blob_service(gw)
    body = payload(200_000, 1)
    bc = svc.get_blob_client(gw_container, "small/blob.bin")
    r = bc.upload_blob(body, content_settings=ContentSettings(content_type="application/x-az"))
    props = bc.get_blob_properties()
    assert props.size == len(body) and props.etag == r["etag"]
    assert props.content_settings.content_type == "application/x-az"
    d = bc.download_blob()
    assert d.properties.etag == r["etag"] and sha256(d.readall()) == sha256(body)
    # The same object through the gateway's S3 front (same origin folder): same bytes, same ETag.
    got = gw_s3.get_object(Bucket=gw_container, Key="small/blob.bin")
    assert sha256(got["Body"].read()) == sha256(body) and got["ETag"] == r["etag"]

    blocked = blob_service(gw, max_single_put_size=1 * MiB, max_block_size=256 * 1024)
    body = payload(3 * MiB + 1234, 2)
    bc = blocked.get_blob_client(gw_container, "large/blocked.bin")
    r = bc.upload_blob(body, max_concurrency=2)
    committed, uncommitted = bc.get_block_list("all")
    assert len(committed) == -(-len(body) // (256 * 1024)) and uncommitted == []
    props = bc.get_blob_properties()
    assert props.size == len(body) and props.etag == r["etag"]
    chunked = blob_service(gw, max_single_get_size=1 * MiB, max_chunk_get_size=512 * 1024)
    got = chunked.get_blob_client(gw_container, "large/blocked.bin").download_blob(max_concurrency=4).readall()
    assert sha256(got) == sha256(body)
    assert sorted(b.name for b in svc.get_container_client(gw_container).list_blobs()) == [
        "large/blocked.bin", "small/blob.bin"]


def test_conditional_upload_reaches_the_origin(gw, gw_azure, gw_container):
    """A Put Blob's conditions go on to the origin: a stale If-Match is refused with 412
    and the origin's file stays as it was; a current one overwrites."""
    bc = gw_azure.get_blob_client(gw_container, "cond-put")
    etag = bc.upload_blob(b"first")["etag"]
    with pytest.raises(HttpResponseError) as ei:
        bc.upload_blob(b"second", overwrite=True, etag='"0x8D000000BADBAD"',
                       match_condition=MatchConditions.IfNotModified)
    assert ei.value.status_code == 412 and ei.value.error_code == "ConditionNotMet"
    assert (gw.data_dir / gw_container / "cond-put").read_bytes() == b"first"
    assert bc.download_blob().readall() == b"first"
    bc.upload_blob(b"third", overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified)
    assert (gw.data_dir / gw_container / "cond-put").read_bytes() == b"third"
    assert bc.download_blob().readall() == b"third"


def test_delete_blob(gw_azure, gw_container):
    cc = gw_azure.get_container_client(gw_container)
    cc.upload_blob("doomed", b"bye")
    cc.upload_blob("keep", b"stay")
    cc.get_blob_client("doomed").delete_blob()
    with pytest.raises(ResourceNotFoundError) as ei:
        cc.get_blob_client("doomed").delete_blob()
    assert ei.value.error_code == "BlobNotFound"
    assert [b.name for b in cc.list_blobs()] == ["keep"]
    assert cc.download_blob("keep").readall() == b"stay"


def test_download_with_validate_content(gw):
    """validate_content=True asks for each range's MD5 (x-ms-range-get-content-md5, which
    the gateway must accept) and checks each chunk against the digest it gets back: a
    wrong one fails the download. (The SDK skips the check when no digest comes back;
    gateway/tests/gateway_cluster.rs checks that it does.)"""
    svc = blob_service(gw, max_single_get_size=1 * MiB, max_chunk_get_size=1 * MiB)
    b, k, size, _ = gw.generated["big"]
    got = svc.get_blob_client(b, k).download_blob(
        offset=BLOCK - 7, length=3 * MiB, validate_content=True, max_concurrency=2,
    ).readall()
    full = svc.get_blob_client(b, k).download_blob(max_concurrency=4).readall()
    assert got == full[BLOCK - 7: BLOCK - 7 + 3 * MiB]


def test_download_after_delete_is_404(gw_azure, gw_container):
    bc = gw_azure.get_blob_client(gw_container, "gone")
    bc.upload_blob(payload(70_000, 3))
    bc.download_blob().readall()  # cached now
    bc.delete_blob()
    with pytest.raises(ResourceNotFoundError) as ei:
        bc.download_blob()
    assert ei.value.error_code == "BlobNotFound"


def test_download_after_overwrite(gw_azure, gw_container):
    bc = gw_azure.get_blob_client(gw_container, "over")
    v1, v2 = payload(90_000, 4), payload(120_000, 5)
    bc.upload_blob(v1)
    assert sha256(bc.download_blob().readall()) == sha256(v1)  # cached now
    e2 = bc.upload_blob(v2, overwrite=True)["etag"]
    d = bc.download_blob()
    assert d.properties.etag == e2 and sha256(d.readall()) == sha256(v2)


def test_content_md5_of_put_blob(gw_azure, gw_container):
    body = payload(10_000, 6)
    md5 = hashlib.md5(body).digest()
    bc = gw_azure.get_blob_client(gw_container, "md5.bin")
    assert bytes(bc.upload_blob(body)["content_md5"]) == md5
    listed = list(gw_azure.get_container_client(gw_container).list_blobs())
    assert [bytes(b.content_settings.content_md5 or b"") for b in listed] == [md5]
    assert bytes(bc.get_blob_properties().content_settings.content_md5 or b"") == md5


def test_content_settings_round_trip(gw_azure, gw_container):
    """Content settings set at upload come back in the blob's properties and listing."""
    bc = gw_azure.get_blob_client(gw_container, "settings.bin")
    settings = ContentSettings(
        content_type="text/csv", content_encoding="gzip", content_language="en",
        content_disposition='attachment; filename="t.csv"', cache_control="max-age=60",
    )
    bc.upload_blob(payload(2_000, 3), content_settings=settings)
    got = bc.get_blob_properties().content_settings
    for field in ("content_type", "content_encoding", "content_language",
                  "content_disposition", "cache_control"):
        assert getattr(got, field) == getattr(settings, field), field


def test_list_blobs_with_metadata(gw_azure, gw_container):
    cc = gw_azure.get_container_client(gw_container)
    cc.upload_blob("tagged.bin", b"x" * 10, metadata={"colour": "blue", "owner": "talon"})
    cc.upload_blob("plain.bin", b"y")
    listed = {b.name: b.metadata or {} for b in cc.list_blobs(include=["metadata"])}
    assert listed == {"plain.bin": {}, "tagged.bin": {"colour": "blue", "owner": "talon"}}


# -------------------------------------------------------------- SAS and keys


def test_delete_blob_if_match(gw_azure, gw_container):
    """Delete Blob with If-Match: another version's ETag is 412 and the blob stays; its
    own deletes it. A condition the front does not evaluate is refused, not ignored."""
    bc = gw_azure.get_blob_client(gw_container, "cond/del")
    etag = bc.upload_blob(b"kept")["etag"]
    with pytest.raises(HttpResponseError) as ei:
        bc.delete_blob(etag='"0x8D000000000"', match_condition=MatchConditions.IfNotModified)
    assert ei.value.status_code == 412
    with pytest.raises(HttpResponseError) as ei:
        bc.delete_blob(if_modified_since=utcnow() - dt.timedelta(days=1))
    assert ei.value.status_code == 501
    assert bc.download_blob().readall() == b"kept"
    bc.delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
    assert not bc.exists()


def test_copy_blob(gw, gw_azure, gw_container):
    """Copy Blob, Copy Blob From URL and Put Blob From URL within the account: finished
    when answered, SHA-256-equal, with the properties Azure gives each. A source on
    another server, or one the request may not read, is CannotVerifyCopySource and
    nothing is written."""
    body = payload(2 * MiB + 17, 21)
    src = gw_azure.get_blob_client(gw_container, "copy src/a+b c")
    src.upload_blob(body, metadata={"m": "1"},
                    content_settings=ContentSettings(content_type="text/x-src", cache_control="no-cache"))
    dst = gw_azure.get_blob_client(gw_container, "copy dst/1")
    r = dst.start_copy_from_url(src.url)
    assert r["copy_status"] == "success" and r["copy_id"]
    p = dst.get_blob_properties()
    assert p.etag == r["etag"] and p.metadata == {"m": "1"}
    assert (p.content_settings.content_type, p.content_settings.cache_control) == ("text/x-src", "no-cache")
    assert sha256(dst.download_blob().readall()) == sha256(body)
    # New metadata replaces the source's; the content properties stay the source's.
    dst = gw_azure.get_blob_client(gw_container, "copy dst/2")
    dst.start_copy_from_url(src.url, metadata={"n": "2"})
    p = dst.get_blob_properties()
    assert p.metadata == {"n": "2"} and p.content_settings.content_type == "text/x-src"
    # Copy Blob From URL (synchronous) and Put Blob From URL.
    dst = gw_azure.get_blob_client(gw_container, "copy dst/3")
    assert dst.start_copy_from_url(src.url, requires_sync=True)["copy_status"] == "success"
    assert sha256(dst.download_blob().readall()) == sha256(body)
    dst = gw_azure.get_blob_client(gw_container, "copy dst/4")
    dst.upload_blob_from_url(src.url, content_settings=ContentSettings(content_type="image/png"))
    d = dst.download_blob()
    assert sha256(d.readall()) == sha256(body) and d.properties.content_settings.content_type == "image/png"
    # Refusals write nothing.
    never = gw_azure.get_blob_client(gw_container, "copy never")
    with pytest.raises(ResourceNotFoundError):
        never.start_copy_from_url(gw_azure.get_blob_client(gw_container, "no such source").url)
    with pytest.raises(HttpResponseError) as ei:
        never.start_copy_from_url(f"http://192.0.2.1:9/{gw.azure_account}/{gw_container}/x")
    assert (ei.value.status_code, ei.value.error_code) == (403, "CannotVerifyCopySource")
    with pytest.raises(HttpResponseError) as ei:
        never.start_copy_from_url(src.url, source_etag=src.get_blob_properties().etag,
                                  source_match_condition=MatchConditions.IfModified)
    assert ei.value.status_code == 412
    # A SAS that may write the destination does not read the source: the source's own does.
    write_sas = generate_blob_sas(gw.azure_account, gw_container, "copy never", account_key=gw.azure_key,
                                  permission=BlobSasPermissions(write=True, create=True),
                                  expiry=utcnow() + dt.timedelta(hours=1))
    delegated = BlobClient.from_blob_url(f"{never.url}?{write_sas}", retry_total=0)
    with pytest.raises(HttpResponseError) as ei:
        delegated.start_copy_from_url(src.url)
    assert (ei.value.status_code, ei.value.error_code) == (403, "CannotVerifyCopySource")
    assert not never.exists()
    read_sas = generate_blob_sas(gw.azure_account, gw_container, "copy src/a+b c", account_key=gw.azure_key,
                                 permission=BlobSasPermissions(read=True), expiry=utcnow() + dt.timedelta(hours=1))
    delegated.start_copy_from_url(f"{src.url}?{read_sas}")
    assert sha256(never.download_blob().readall()) == sha256(body)


def test_sas_url_download(gw):
    """generate_blob_sas with the emulator key against a gateway that requires a key."""
    b, k, size, seed = gw.generated["big"]
    assert gw.azure_key, "this deployment must require Azure authentication"
    sas = generate_blob_sas(
        gw.azure_account, b, k, account_key=gw.azure_key, permission=BlobSasPermissions(read=True),
        start=utcnow() - dt.timedelta(minutes=5), expiry=utcnow() + dt.timedelta(hours=1),
    )
    url = f"{gw.blob_endpoint}/{b}/{urllib.parse.quote(k)}?{sas}"
    bc = BlobClient.from_blob_url(url, retry_total=0, max_single_get_size=1 * MiB, max_chunk_get_size=1 * MiB)
    assert bc.get_blob_properties().size == size
    assert sha256(bc.download_blob(max_concurrency=3).readall()) == gen_sha(gw)
    resp = requests.get(url, headers={"x-ms-range": f"bytes={BLOCK - 1}-{BLOCK + 1}"}, timeout=30)
    assert resp.status_code == 206, resp.text
    assert resp.content == generated.generated_bytes(b, k, seed, BLOCK - 1, BLOCK + 2)
    # Without the SAS the same URL is refused: the gateway requires a key.
    resp = requests.get(url.split("?")[0], timeout=30)
    assert resp.status_code in (401, 403) and resp.headers.get("x-ms-error-code"), resp.status_code


def test_container_and_account_sas(gw, gw_azure, gw_container):
    gw_azure.get_blob_client(gw_container, "pre-existing").upload_blob(b"already here")
    sas = generate_container_sas(
        gw.azure_account, gw_container, account_key=gw.azure_key,
        permission=ContainerSasPermissions(read=True, list=True, write=True, create=True),
        expiry=utcnow() + dt.timedelta(hours=1),
    )
    cc = ContainerClient.from_container_url(f"{gw.blob_endpoint}/{gw_container}?{sas}", retry_total=0)
    cc.upload_blob("via-sas", b"written with a container SAS")
    assert sorted(b.name for b in cc.list_blobs()) == ["pre-existing", "via-sas"]
    assert cc.download_blob("pre-existing").readall() == b"already here"
    sas = generate_account_sas(
        gw.azure_account, gw.azure_key, resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, list=True), expiry=utcnow() + dt.timedelta(hours=1),
    )
    svc = BlobServiceClient(account_url=gw.blob_endpoint, credential=sas, retry_total=0)
    assert gw_container in [c.name for c in svc.list_containers()]
    assert svc.get_blob_client(gw_container, "via-sas").download_blob().readall() == b"written with a container SAS"


def test_raw_ranges_version_and_request_id(gw):
    b, k, size, seed = gw.generated["big"]
    sas = generate_blob_sas(gw.azure_account, b, k, account_key=gw.azure_key,
                            permission=BlobSasPermissions(read=True), expiry=utcnow() + dt.timedelta(hours=1))
    url = f"{gw.blob_endpoint}/{b}/{urllib.parse.quote(k)}?{sas}"
    for headers, (first, last) in (
        ({"x-ms-range": "bytes=10-29"}, (10, 29)),
        ({"Range": "bytes=10-29"}, (10, 29)),
        ({"x-ms-range": "bytes=100-199", "Range": "bytes=0-9"}, (100, 199)),  # x-ms-range wins
        ({"x-ms-range": f"bytes={size - 5}-"}, (size - 5, size - 1)),
    ):
        resp = requests.get(url, headers={**headers, "x-ms-version": "2021-08-06"}, timeout=30)
        assert resp.status_code == 206, (headers, resp.text)
        assert resp.headers["Content-Range"] == f"bytes {first}-{last}/{size}", headers
        assert resp.content == generated.generated_bytes(b, k, seed, first, last + 1), headers
        assert resp.headers.get("x-ms-version") == "2021-08-06"
        assert resp.headers.get("x-ms-request-id")
        assert resp.headers.get("ETag") == gw.generated_etag("big")
    resp = requests.head(url, headers={"x-ms-version": "2025-11-05"}, timeout=30)
    assert resp.status_code == 200 and int(resp.headers["Content-Length"]) == size
    assert resp.headers.get("x-ms-version") == "2025-11-05"
    assert resp.headers.get("x-ms-blob-type") == "BlockBlob"
    resp = requests.get(url, headers={"x-ms-range": f"bytes={size}-{size + 10}"}, timeout=30)
    assert resp.status_code == 416 and resp.headers.get("x-ms-error-code") == "InvalidRange", resp.text


def test_anonymous_azure_on_open_talon_up(up_open):
    svc = BlobServiceClient(account_url=up_open.blob_endpoint, retry_total=0)
    assert "demo" in [c.name for c in svc.list_containers()]
    b, k, size, seed = up_open.generated["big"]
    got = svc.get_blob_client(b, k).download_blob(offset=BLOCK - 10, length=20).readall()
    assert got == generated.generated_bytes(b, k, seed, BLOCK - 10, BLOCK + 10)


# -------------------------------------------------------------- from the origin stub's own suite
# (folded in 2026-12-05: every case now runs on every target)


def test_list_containers_paged(gw_azure):
    created = sorted(unique("azpage") for _ in range(5))
    for name in created:
        gw_azure.create_container(name)
    pages = list(gw_azure.list_containers(name_starts_with="azpage-", results_per_page=2).by_page())
    page_names = [[c.name for c in p] for p in pages]
    assert [n for p in page_names for n in p] == created
    assert [len(p) for p in page_names] == [2, 2, 1]


def test_create_container_conflict(gw, gw_azure, gw_container):
    with pytest.raises(ResourceExistsError) as ei:
        gw_azure.create_container(gw_container)
    assert ei.value.error_code == "ContainerAlreadyExists" and ei.value.status_code == 409
    if gw.origin_kind == "stub":
        assert (gw.data_dir / gw_container).is_dir(), "a container made through Azure is a data-dir folder"


def test_list_blobs_resumes_from_a_continuation_token(gw_azure, gw_container):
    cc = gw_azure.get_container_client(gw_container)
    for i, name in enumerate(ODD_NAMES):
        cc.upload_blob(name, f"blob {name} #{i}".encode())
    pager = cc.list_blobs(results_per_page=3).by_page()
    first = [b.name for b in next(pager)]
    token = pager.continuation_token
    assert token
    rest = [b.name for p in cc.list_blobs(results_per_page=3).by_page(continuation_token=token) for b in p]
    assert first + rest == sorted(ODD_NAMES, key=lambda n: n.encode())
    assert list(cc.list_blobs(name_starts_with="nope/")) == []
    assert [b.name for b in cc.list_blobs(name_starts_with="ünïcødé/")] == ["ünïcødé/ключ.txt"]


def test_list_generated_container(gw, gw_azure):
    for name, (b, k, size, _) in gw.generated.items():
        got = {blob.name: blob for blob in gw_azure.get_container_client(b).list_blobs(name_starts_with=k)}
        assert got[k].size == size, name
        assert got[k].etag == gw.generated_etag(name), name


def test_download_offset_far_into_huge_blob(gw, gw_azure):
    b, k, size, seed = gw.generated["huge"]
    bc = gw_azure.get_blob_client(b, k)
    assert bc.get_blob_properties().size == size
    for offset, length in (((1 << 33) + 5, 3000), (size - 4096, 4096)):
        got = bc.download_blob(offset=offset, length=length).readall()
        assert got == generated.generated_bytes(b, k, seed, offset, offset + length)


def test_download_readinto_a_file(gw, tmp_path):
    svc = blob_service(gw, max_single_get_size=1 * MiB, max_chunk_get_size=1 * MiB)
    b, k, size, _ = gw.generated["big"]
    path = tmp_path / "big.bin"
    with open(path, "wb") as f:
        n = svc.get_blob_client(b, k).download_blob(max_concurrency=2).readinto(f)
    assert n == size and sha256(path.read_bytes()) == gen_sha(gw)


def test_blob_properties_match_s3(gw, gw_azure, gw_s3):
    b, k, size, _ = gw.generated["big"]
    props = gw_azure.get_blob_client(b, k).get_blob_properties()
    head = gw_s3.head_object(Bucket=b, Key=k)
    assert props.size == size == head["ContentLength"]
    assert props.etag == head["ETag"] == gw.generated_etag("big")
    assert props.blob_type == "BlockBlob"
    assert abs((props.last_modified - head["LastModified"]).total_seconds()) < 1


def test_download_empty_blob(gw_azure, gw_container):
    bc = gw_azure.get_blob_client(gw_container, "empty")
    bc.upload_blob(b"")
    assert bc.download_blob().readall() == b""
    assert bc.get_blob_properties().size == 0


def test_upload_without_overwrite_is_refused_and_changes_nothing(gw_azure, gw_container):
    body = payload(20_000, 40)
    bc = gw_azure.get_blob_client(gw_container, "once")
    r = bc.upload_blob(body)
    # Without overwrite the SDK sends If-None-Match: * → 409 BlobAlreadyExists.
    with pytest.raises(ResourceExistsError) as ei:
        bc.upload_blob(b"other")
    assert ei.value.error_code == "BlobAlreadyExists"
    assert sha256(bc.download_blob().readall()) == sha256(body)
    bc.upload_blob(b"replaced", overwrite=True)
    assert bc.download_blob().readall() == b"replaced"
    assert bc.get_blob_properties().etag != r["etag"]


def test_upload_with_validate_content(gw, gw_container):
    """validate_content=True on upload: the SDK sends Content-MD5 (per block when blocked)
    and checks the one the service returns."""
    body = payload(300_000, 41)
    bc = blob_service(gw).get_blob_client(gw_container, "validated/single")
    bc.upload_blob(body, validate_content=True)
    assert sha256(bc.download_blob().readall()) == sha256(body)
    svc = blob_service(gw, max_single_put_size=64 * 1024, max_block_size=64 * 1024)
    bc = svc.get_blob_client(gw_container, "validated/blocked")
    bc.upload_blob(body, validate_content=True)
    assert sha256(bc.download_blob().readall()) == sha256(body)


def test_stage_and_commit_block_list(gw_azure, gw_container):
    bc = gw_azure.get_blob_client(gw_container, "blocks/manual.bin")
    blocks = {
        base64.b64encode(b"block-0001").decode(): b"first ",
        base64.b64encode(b"block-0002").decode(): b"second ",
        base64.b64encode(b"block-0003").decode(): b"third",
    }
    ids = list(blocks)
    for bid in reversed(ids):
        bc.stage_block(bid, blocks[bid])
    committed, uncommitted = bc.get_block_list("all")
    assert committed == []
    assert sorted(b.id for b in uncommitted) == sorted(ids)
    with pytest.raises(ResourceNotFoundError):
        bc.get_blob_properties()  # staged blocks are not a blob yet
    order = [ids[2], ids[0], ids[1]]
    bc.commit_block_list(order)
    assert bc.download_blob().readall() == b"thirdfirst second "
    committed, _ = bc.get_block_list("committed")
    assert [b.id for b in committed] == order
    assert [b.size for b in committed] == [5, 6, 7]


def test_deleted_blob_is_gone_for_every_call(gw_azure, gw_container):
    bc = gw_azure.get_blob_client(gw_container, "doomed")
    bc.upload_blob(b"bye")
    bc.delete_blob()
    with pytest.raises(ResourceNotFoundError) as ei:
        bc.get_blob_properties()
    assert ei.value.status_code == 404
    with pytest.raises(ResourceNotFoundError) as ei:
        bc.download_blob()
    assert ei.value.error_code == "BlobNotFound"


def test_connection_string_and_account_sas_read_a_generated_blob(gw):
    b, k, _, _ = gw.generated["big"]
    svc = BlobServiceClient.from_connection_string(gw.connection_string(), retry_total=0)
    assert svc.account_name == gw.azure_account
    assert b in [c.name for c in svc.list_containers()]
    got = svc.get_blob_client(b, k).download_blob(offset=0, length=4096).readall()
    assert got == generated.generated_bytes(b, k, gw.generated["big"][3], 0, 4096)
    sas = generate_account_sas(
        gw.azure_account, gw.azure_key,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, list=True),
        expiry=utcnow() + dt.timedelta(hours=1),
    )
    svc = BlobServiceClient(account_url=gw.blob_endpoint, credential=sas, retry_total=0)
    assert b in [c.name for c in svc.list_containers()]
    assert k in [blob.name for blob in svc.get_container_client(b).list_blobs(name_starts_with=k)]
