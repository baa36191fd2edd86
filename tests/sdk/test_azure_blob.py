"""azure-storage-blob against the stub's Azure Blob API (Shared Key, SAS, anonymous)."""

from __future__ import annotations

import base64
import datetime as dt

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
from conftest import GENERATED, MiB, SEEDED, blob_service, generated_sha, sha256, unique

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


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(100 + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@pytest.fixture(scope="module")
def listing_container(azure):
    name = unique("azlist")
    cc = azure.create_container(name)
    for i, blob in enumerate(ODD_NAMES):
        cc.upload_blob(blob, f"blob {blob} #{i}".encode())
    return name


# -------------------------------------------------------------- containers


def test_list_containers(azure, container):
    names = [c.name for c in azure.list_containers()]
    assert container in names and "gen" in names and "seeded" in names
    assert names == sorted(names)
    assert not [n for n in names if n.startswith(".")], names
    assert [c.name for c in azure.list_containers(name_starts_with=container)] == [container]


def test_list_containers_paged(azure):
    created = sorted(unique("azpage") for _ in range(5))
    for name in created:
        azure.create_container(name)
    pages = list(azure.list_containers(name_starts_with="azpage-", results_per_page=2).by_page())
    page_names = [[c.name for c in p] for p in pages]
    assert [n for p in page_names for n in p] == created
    assert [len(p) for p in page_names] == [2, 2, 1]


def test_container_properties_and_create_conflict(azure, container, stub):
    props = azure.get_container_client(container).get_container_properties()
    assert props.name == container
    assert props.etag
    assert (stub.data_dir / container).is_dir(), "a container created through Azure must be a data-dir folder"
    with pytest.raises(ResourceExistsError) as ei:
        azure.create_container(container)
    assert ei.value.error_code == "ContainerAlreadyExists"
    assert ei.value.status_code == 409


# -------------------------------------------------------------- listing


def test_list_blobs_flat(azure, listing_container):
    cc = azure.get_container_client(listing_container)
    blobs = list(cc.list_blobs())
    assert [b.name for b in blobs] == sorted(ODD_NAMES, key=lambda n: n.encode())
    for b in blobs:
        assert b.size == len(f"blob {b.name} #{ODD_NAMES.index(b.name)}".encode())
        assert b.etag
    assert [b.name for b in cc.list_blobs(name_starts_with="dir/")] == ["dir/b.txt", "dir/sub/c.txt"]
    assert [b.name for b in cc.list_blobs(name_starts_with="ünïcødé/")] == ["ünïcødé/ключ.txt"]
    assert list(cc.list_blobs(name_starts_with="nope/")) == []


def test_list_blobs_paged(azure, listing_container):
    cc = azure.get_container_client(listing_container)
    pager = cc.list_blobs(results_per_page=2).by_page()
    pages = []
    for page in pager:
        pages.append([b.name for b in page])
    assert [n for p in pages for n in p] == sorted(ODD_NAMES, key=lambda n: n.encode())
    assert len(pages) == -(-len(ODD_NAMES) // 2)
    assert all(len(p) == 2 for p in pages[:-1])
    # Resume from a continuation token (marker).
    pager = cc.list_blobs(results_per_page=3).by_page()
    first = [b.name for b in next(pager)]
    token = pager.continuation_token
    assert token
    rest = [b.name for p in cc.list_blobs(results_per_page=3).by_page(continuation_token=token) for b in p]
    assert first + rest == sorted(ODD_NAMES, key=lambda n: n.encode())


def test_walk_blobs_delimiter(azure, listing_container):
    cc = azure.get_container_client(listing_container)
    top = [item.name for item in cc.walk_blobs(delimiter="/")]
    assert sorted(top) == sorted(
        ["a.txt", "plus+sign.txt", "percent%20literal.txt", "amp&lt<gt>.txt",
         "dir/", "dir with space/", "ünïcødé/", "z/"]
    )
    under_dir = [item.name for item in cc.walk_blobs(name_starts_with="dir/", delimiter="/")]
    assert sorted(under_dir) == ["dir/b.txt", "dir/sub/"]


def test_list_generated_container(azure):
    cc = azure.get_container_client("gen")
    got = {b.name: b for b in cc.list_blobs()}
    for b, k, size, seed in GENERATED.values():
        assert got[k].size == size
        assert got[k].etag == generated.generated_etag(b, k, size, seed)


# -------------------------------------------------------------- downloads


def test_download_full_and_offset(azure):
    b, k, size, seed = GENERATED["odd"]
    bc = azure.get_blob_client(b, k)
    full = bc.download_blob().readall()
    assert sha256(full) == generated_sha("odd")
    for offset, length in ((0, 1), (7, 100), (size - 10, 10), (size - 10, None), (4096, 65536)):
        got = bc.download_blob(offset=offset, length=length).readall()
        end = size if length is None else offset + length
        assert sha256(got) == sha256(generated.generated_bytes(b, k, seed, offset, end)), (offset, length)


def test_download_offset_far_into_huge_blob(azure):
    b, k, size, seed = GENERATED["huge"]
    bc = azure.get_blob_client(b, k)
    assert bc.get_blob_properties().size == size
    for offset, length in (((1 << 33) + 5, 3000), (size - 4096, 4096)):
        got = bc.download_blob(offset=offset, length=length).readall()
        assert got == generated.generated_bytes(b, k, seed, offset, offset + length)


def test_download_parallel_chunks_generated(stub):
    """Small single-get and chunk sizes with concurrency force parallel ranged GETs."""
    svc = blob_service(stub, max_single_get_size=1 * MiB, max_chunk_get_size=512 * 1024)
    b, k, size, _ = GENERATED["m24"]
    downloader = svc.get_blob_client(b, k).download_blob(max_concurrency=4)
    assert downloader.size == size
    data = downloader.readall()
    assert len(data) == size
    assert sha256(data) == generated_sha("m24")


def test_download_chunks_iterator_and_readinto(stub, tmp_path):
    svc = blob_service(stub, max_single_get_size=1 * MiB, max_chunk_get_size=1 * MiB)
    b, k, size, _ = GENERATED["m24"]
    bc = svc.get_blob_client(b, k)
    path = tmp_path / "24m.bin"
    with open(path, "wb") as f:
        n = bc.download_blob(max_concurrency=2).readinto(f)
    assert n == size and sha256(path.read_bytes()) == generated_sha("m24")
    import hashlib

    h = hashlib.sha256()
    total = 0
    for chunk in bc.download_blob().chunks():
        h.update(chunk)
        total += len(chunk)
    assert total == size and h.hexdigest() == generated_sha("m24")


def test_blob_properties_match_s3(azure, s3):
    b, k, size, seed = GENERATED["m24"]
    props = azure.get_blob_client(b, k).get_blob_properties()
    assert props.size == size
    head = s3.head_object(Bucket=b, Key=k)
    assert props.etag == head["ETag"] == generated.generated_etag(b, k, size, seed)
    assert props.content_settings.content_type == "application/octet-stream"
    assert props.blob_type == "BlockBlob"
    assert abs((props.last_modified - head["LastModified"]).total_seconds()) < 1


def test_download_empty_blob(azure, container):
    bc = azure.get_blob_client(container, "empty")
    bc.upload_blob(b"")
    assert bc.download_blob().readall() == b""
    assert azure.get_blob_client("gen", "empty.bin").download_blob().readall() == b""
    assert bc.get_blob_properties().size == 0


def test_seeded_blobs(azure):
    cc = azure.get_container_client("seeded")
    assert sorted(b.name for b in cc.list_blobs()) == sorted(SEEDED)
    for name, content in SEEDED.items():
        assert sha256(cc.download_blob(name).readall()) == sha256(content)


# -------------------------------------------------------------- uploads


def test_upload_small_and_overwrite(azure, container, stub):
    body = payload(200_000, 1)
    bc = azure.get_blob_client(container, "small/blob.bin")
    r = bc.upload_blob(body, content_settings=ContentSettings(content_type="application/x-az"))
    assert r["etag"]
    props = bc.get_blob_properties()
    assert props.size == len(body) and props.etag == r["etag"]
    assert props.content_settings.content_type == "application/x-az"
    assert sha256(bc.download_blob().readall()) == sha256(body)
    assert sha256((stub.data_dir / container / "small" / "blob.bin").read_bytes()) == sha256(body)
    # Without overwrite the SDK sends If-None-Match: * → 409 BlobAlreadyExists.
    with pytest.raises(ResourceExistsError) as ei:
        bc.upload_blob(b"other")
    assert ei.value.error_code == "BlobAlreadyExists"
    assert sha256(bc.download_blob().readall()) == sha256(body)
    bc.upload_blob(b"replaced", overwrite=True)
    assert bc.download_blob().readall() == b"replaced"
    assert bc.get_blob_properties().etag != r["etag"]


def test_upload_large_blocked(stub, container):
    svc = blob_service(stub, max_single_put_size=1 * MiB, max_block_size=512 * 1024)
    body = payload(5 * MiB + 1234, 2)
    bc = svc.get_blob_client(container, "large/blocked.bin")
    bc.upload_blob(body, max_concurrency=2)
    committed, uncommitted = bc.get_block_list("all")
    assert len(committed) == -(-len(body) // (512 * 1024))
    assert sum(b.size for b in committed) == len(body)
    assert uncommitted == []
    props = bc.get_blob_properties()
    assert props.size == len(body)
    assert sha256(bc.download_blob(max_concurrency=3).readall()) == sha256(body)


def test_upload_single_put_with_validate_content(stub, container):
    """validate_content=True: the SDK sends Content-MD5 and checks the one the service returns."""
    body = payload(300_000, 4)
    bc = blob_service(stub).get_blob_client(container, "validated/single")
    bc.upload_blob(body, validate_content=True)
    assert sha256(bc.download_blob().readall()) == sha256(body)


def test_upload_blocked_with_validate_content(stub, container):
    """Per-block MD5s; Put Block List's response Content-MD5 must be that of the request body (the list)."""
    body = payload(300_000, 5)
    svc = blob_service(stub, max_single_put_size=64 * 1024, max_block_size=64 * 1024)
    bc = svc.get_blob_client(container, "validated/blocked")
    bc.upload_blob(body, validate_content=True)
    assert sha256(bc.download_blob().readall()) == sha256(body)


def test_stage_and_commit_block_list(azure, container):
    bc = azure.get_blob_client(container, "blocks/manual.bin")
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


def test_delete_blob(azure, container):
    bc = azure.get_blob_client(container, "doomed")
    bc.upload_blob(b"bye")
    keep = azure.get_blob_client(container, "keep")
    keep.upload_blob(b"stay")
    bc.delete_blob()
    with pytest.raises(ResourceNotFoundError) as ei:
        bc.get_blob_properties()
    assert ei.value.status_code == 404
    with pytest.raises(ResourceNotFoundError) as ei:
        bc.download_blob()
    assert ei.value.error_code == "BlobNotFound"
    with pytest.raises(ResourceNotFoundError) as ei:
        bc.delete_blob()
    assert ei.value.error_code == "BlobNotFound"
    assert [b.name for b in azure.get_container_client(container).list_blobs()] == ["keep"]


def test_conditional_download(azure, container):
    bc = azure.get_blob_client(container, "cond")
    etag = bc.upload_blob(b"conditional")["etag"]
    assert bc.download_blob(etag=etag, match_condition=MatchConditions.IfNotModified).readall() == b"conditional"
    with pytest.raises(HttpResponseError) as ei:
        bc.download_blob(etag='"0x8D000000BADBAD"', match_condition=MatchConditions.IfNotModified)
    assert ei.value.status_code == 412 and ei.value.error_code == "ConditionNotMet"
    with pytest.raises(HttpResponseError) as ei:
        bc.get_blob_properties(etag=etag, match_condition=MatchConditions.IfModified)
    assert ei.value.status_code == 304


# -------------------------------------------------------------- SAS and keys


def test_connection_string_shared_key(stub):
    svc = BlobServiceClient.from_connection_string(stub.connection_string(), retry_total=0)
    assert svc.account_name == stub.azure_account
    assert "gen" in [c.name for c in svc.list_containers()]
    assert sha256(svc.get_blob_client("gen", "small.bin").download_blob().readall()) == generated_sha("small")


def test_blob_sas_download(stub):
    b, k, _, _ = GENERATED["odd"]
    sas = generate_blob_sas(
        stub.azure_account, b, k, account_key=stub.azure_key,
        permission=BlobSasPermissions(read=True), expiry=utcnow() + dt.timedelta(hours=1),
        start=utcnow() - dt.timedelta(minutes=5),
    )
    url = f"{stub.blob_endpoint}/{b}/{requests.utils.quote(k)}?{sas}"
    bc = BlobClient.from_blob_url(url, retry_total=0)
    assert sha256(bc.download_blob().readall()) == generated_sha("odd")
    assert bc.get_blob_properties().size == GENERATED["odd"][2]
    # The same SAS works for plain HTTP.
    resp = requests.get(url, headers={"x-ms-range": "bytes=0-99"}, timeout=30)
    assert resp.status_code == 206
    assert resp.content == generated.generated_bytes(b, k, GENERATED["odd"][3], 0, 100)


def test_container_sas_list_read_write(stub, azure, container):
    azure.get_blob_client(container, "pre-existing").upload_blob(b"already here")
    sas = generate_container_sas(
        stub.azure_account, container, account_key=stub.azure_key,
        permission=ContainerSasPermissions(read=True, list=True, write=True, create=True),
        expiry=utcnow() + dt.timedelta(hours=1),
    )
    cc = ContainerClient.from_container_url(f"{stub.blob_endpoint}/{container}?{sas}", retry_total=0)
    cc.upload_blob("via-sas", b"written with a container SAS")
    assert sorted(b.name for b in cc.list_blobs()) == ["pre-existing", "via-sas"]
    assert cc.download_blob("pre-existing").readall() == b"already here"
    assert azure.get_blob_client(container, "via-sas").download_blob().readall() == b"written with a container SAS"


def test_account_sas(stub):
    sas = generate_account_sas(
        stub.azure_account, stub.azure_key,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, list=True),
        expiry=utcnow() + dt.timedelta(hours=1),
    )
    svc = BlobServiceClient(account_url=stub.blob_endpoint, credential=sas, retry_total=0)
    assert "gen" in [c.name for c in svc.list_containers()]
    assert [b.name for b in svc.get_container_client("seeded").list_blobs()] == sorted(SEEDED)
    assert sha256(svc.get_blob_client("gen", "small.bin").download_blob().readall()) == generated_sha("small")


# -------------------------------------------------------------- anonymous stub


def test_anonymous_stub_roundtrip(anon_stub, anon_azure):
    name = unique("anon")
    cc = anon_azure.create_container(name)
    body = payload(70_000, 3)
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
