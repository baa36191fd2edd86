"""`talon up`'s access defaults (SEC-02, SEC-13): like MinIO and Azurite it requires signed
requests with well-known development credentials, which it prints; `--anonymous` serves
unsigned reads on both fronts and nothing more. Every refusal leaves the data folder as it was.
Also: SDKs with nothing configured but an endpoint and credentials, on every target."""

from __future__ import annotations

import hashlib
import shlex
import subprocess

import boto3
import pytest
import requests

from conftest import blob_service, s3_client, sha256, unique
from generated import generated_bytes, generated_etag

from . import harness

HELLO = "demo/hello.txt"


@pytest.fixture(scope="module")
def up_default(tmp_path_factory, _isolated_client_env):
    front = harness.start_talon_up("default", tmp_path_factory.mktemp("talon-up-default"), auth=False, workers=1)
    yield front
    harness.stop_all(front.procs)


@pytest.fixture(scope="module")
def up_read(tmp_path_factory, _isolated_client_env):
    front = harness.start_talon_up("read", tmp_path_factory.mktemp("talon-up-read"), auth=False, workers=1,
                                   anonymous="read")
    yield front
    harness.stop_all(front.procs)


def _folder(front) -> dict:
    return {str(p.relative_to(front.data_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(front.data_dir.rglob("*")) if p.is_file() and ".talon-cache" not in p.parts}


def _unsigned(front) -> dict:
    """Unsigned reads and writes against both fronts: {what: status}."""
    s3, az = front.s3, front.blob_endpoint
    v = {"x-ms-version": "2021-08-06"}
    return {
        "s3 GET": requests.get(f"{s3}/{HELLO}", timeout=30).status_code,
        "s3 LIST": requests.get(f"{s3}/demo?list-type=2", timeout=30).status_code,
        "s3 PUT": requests.put(f"{s3}/demo/new.txt", data=b"x", timeout=30).status_code,
        "s3 DELETE": requests.delete(f"{s3}/{HELLO}", timeout=30).status_code,
        "azure GET": requests.get(f"{az}/{HELLO}", headers=v, timeout=30).status_code,
        "azure PUT": requests.put(f"{az}/demo/new.txt", data=b"x", timeout=30,
                                  headers={**v, "x-ms-blob-type": "BlockBlob"}).status_code,
        "azure DELETE": requests.delete(f"{az}/{HELLO}", headers=v, timeout=30).status_code,
        "azure CREATE": requests.put(f"{az}/newcontainer?restype=container", headers=v, timeout=30).status_code,
    }


def test_default_requires_signatures_on_both_fronts(up_default):
    before = _folder(up_default)
    for what, status in _unsigned(up_default).items():
        assert status in (401, 403), f"{what}: {status}"
    assert _folder(up_default) == before, "a refused request changed the data folder"


def test_default_serves_the_printed_credentials(up_default):
    banner = up_default.procs[0].tail()
    assert "access key talon, secret talon" in banner, banner
    assert harness.CLIENT_AZURE_KEY in banner, banner
    s3 = s3_client(up_default)
    assert s3.get_object(Bucket="demo", Key="hello.txt")["Body"].read().startswith(b"Hello from Talon")
    s3.put_object(Bucket="demo", Key="signed.txt", Body=b"signed write")
    assert (up_default.data_dir / "demo" / "signed.txt").read_bytes() == b"signed write"
    blob = blob_service(up_default).get_blob_client("demo", "hello.txt")
    assert blob.download_blob().readall().startswith(b"Hello from Talon")


def test_the_printed_curl_line_works(up_default):
    banner = up_default.procs[0].tail()
    line = next(l.strip() for l in banner.splitlines() if l.strip().startswith("curl "))
    assert "--aws-sigv4" in line, line
    out = subprocess.run(shlex.split(line), capture_output=True, timeout=30)
    assert out.stdout.startswith(b"Hello from Talon"), out


def test_the_printed_lines_name_an_object_of_a_users_own_folder(tmp_path_factory, _isolated_client_env):
    """Over a folder of the user's own (no sample), the banner's commands read one of its
    files, not the sample's `demo/hello.txt`."""
    workdir = tmp_path_factory.mktemp("talon-up-own")
    body = b"the user's own bytes\n" * 100
    (workdir / "data" / "datasets" / "2024").mkdir(parents=True)
    (workdir / "data" / "datasets" / "2024" / "part-0.csv").write_bytes(body)
    front = harness.start_talon_up("own", workdir, auth=False, workers=1)
    try:
        banner = front.procs[0].tail()
        assert "demo" not in banner, banner
        line = next(l.strip() for l in banner.splitlines() if l.strip().startswith("curl "))
        assert line.endswith("/datasets/2024/part-0.csv"), line
        out = subprocess.run(shlex.split(line), capture_output=True, timeout=30)
        assert hashlib.sha256(out.stdout).hexdigest() == hashlib.sha256(body).hexdigest(), out
    finally:
        harness.stop_all(front.procs)


def test_anonymous_flag_allows_reads_only(up_read):
    before = _folder(up_read)
    got = _unsigned(up_read)
    for what, status in got.items():
        if what.endswith(("GET", "LIST")):
            assert status == 200, f"{what}: {status}"
        else:
            assert status == 403, f"{what}: {status}"
    assert _folder(up_read) == before, "an anonymous write changed the data folder"


def test_talon_status_shows_the_cluster(cluster):
    """`talon status` asks the coordinator (signed with the cluster secret) and shows
    every worker: a table for a person, one JSON line for a script; without the secret
    it says why and exits non-zero."""
    import json

    argv = [str(harness.binary("talon")), "status", "--coordinator", cluster.coordinator]
    out = subprocess.run([*argv, "--json"], capture_output=True, timeout=60, env=harness.clean_env())
    assert out.returncode == 0, out.stderr.decode()
    report = json.loads(out.stdout)
    assert report["cluster"]["live"] == 3
    ids = sorted(m["id"] for m in report["members"])
    assert len(ids) == 3 and all(m["state"] == "live" for m in report["members"])
    table = subprocess.run(argv, capture_output=True, timeout=60, env=harness.clean_env())
    assert table.returncode == 0, table.stderr.decode()
    text = table.stdout.decode()
    assert "3 workers (3 live, 0 draining)" in text, text
    for worker in ids:
        assert f"| {worker} |" in text, text
    # Each worker's data plane and what the readers' circuits say of it, in both forms.
    assert "| plane |" in text and "| readers' circuits |" in text, text
    for m in report["members"]:
        assert m["data_plane"] in ("io_uring", "tokio"), m
        assert set(m["circuits"]) == {"readers", "open", "opened", "deadlines_missed"}, m
        line = next(l for l in text.splitlines() if l.startswith(f"| {m['id']} |"))
        assert f"| {m['data_plane']} |" in line, line
    # The coordinator's warm jobs: none yet, said in both forms.
    assert report["warm_jobs"] == [], report["warm_jobs"]
    assert "no warm jobs" in text, text
    env = harness.clean_env()
    del env["TALON_CLUSTER_SECRET"]
    refused = subprocess.run(argv, capture_output=True, timeout=60, env=env)
    assert refused.returncode != 0
    assert b"secret" in refused.stderr.lower(), refused.stderr


def _origin_get_bytes(front) -> float:
    text = requests.get(front.origin_admin + "/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("talon_origin_get_bytes_total"))


def test_talon_warm_fills_the_cache_before_a_read(cluster):
    """`talon warm` reads named objects through the cluster so that a job's first read is
    a hit: after it, reading the object through the gateway costs the origin no bytes."""
    import json

    import boto3

    origin = boto3.client("s3", endpoint_url=cluster.origin_s3, region_name="us-east-1",
                          aws_access_key_id=harness.ORIGIN_S3[0], aws_secret_access_key=harness.ORIGIN_S3[1])
    bucket = unique("warm")
    origin.create_bucket(Bucket=bucket)
    body = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB: three blocks and a bit
    origin.put_object(Bucket=bucket, Key="weights.bin", Body=body)
    argv = [str(harness.binary("talon")), "warm", "--coordinator", cluster.coordinator,
            "--block-size", harness.BLOCK_SIZE, f"s3/{bucket}/weights.bin", "--json"]
    first = subprocess.run(argv, capture_output=True, timeout=120, env=harness.clean_env())
    assert first.returncode == 0, first.stderr.decode()
    [warmed] = json.loads(first.stdout)["objects"]
    assert warmed["bytes"] == len(body) and warmed["fills"] > 0 and warmed["hits"] == 0, warmed
    again = subprocess.run(argv, capture_output=True, timeout=120, env=harness.clean_env())
    [rewarmed] = json.loads(again.stdout)["objects"]
    assert rewarmed["fills"] == 0 and rewarmed["hits"] > 0, rewarmed
    before = _origin_get_bytes(cluster.main)
    got = s3_client(cluster.main).get_object(Bucket=bucket, Key="weights.bin")["Body"].read()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest()
    assert _origin_get_bytes(cluster.main) == before
    missing = subprocess.run([*argv[:-2], f"s3/{bucket}/absent.bin"], capture_output=True, timeout=60,
                             env=harness.clean_env())
    assert missing.returncode != 0 and b"absent.bin" in missing.stderr, missing.stderr


def test_a_public_read_acl_opens_a_bucket_and_an_object_to_unsigned_sdks(up_default):
    """boto3 makes a bucket and one object public with canned ACLs (kept by `talon up` in
    its data folder): an unsigned boto3 lists the bucket and reads that object, on the S3
    front, and an anonymous Azure SDK reads it on the Azure front; the other object stays
    refused, writes stay refused, and writing the object again makes it private."""
    from botocore.exceptions import ClientError
    from azure.core.exceptions import HttpResponseError

    signed = s3_client(up_default)
    unsigned = s3_client(up_default, unsigned=True)
    bucket = unique("pub")
    signed.create_bucket(Bucket=bucket, ACL="public-read")
    signed.put_object(Bucket=bucket, Key="open.txt", Body=b"open to all", ACL="public-read")
    signed.put_object(Bucket=bucket, Key="closed.txt", Body=b"not public")
    grants = signed.get_object_acl(Bucket=bucket, Key="open.txt")["Grants"]
    assert {"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
            "Permission": "READ"} in grants, grants

    listed = unsigned.list_objects_v2(Bucket=bucket)
    assert sorted(o["Key"] for o in listed["Contents"]) == ["closed.txt", "open.txt"]
    assert unsigned.get_object(Bucket=bucket, Key="open.txt")["Body"].read() == b"open to all"
    before = _folder(up_default)
    for call in (lambda: unsigned.get_object(Bucket=bucket, Key="closed.txt"),
                 lambda: unsigned.put_object(Bucket=bucket, Key="open.txt", Body=b"overwritten"),
                 lambda: unsigned.delete_object(Bucket=bucket, Key="open.txt")):
        with pytest.raises(ClientError) as ei:
            call()
        assert ei.value.response["Error"]["Code"] == "AccessDenied"
    assert _folder(up_default) == before, "a refused request changed the data folder"

    from azure.storage.blob import BlobServiceClient
    anonymous_blob = BlobServiceClient(up_default.blob_endpoint).get_blob_client(bucket, "open.txt")
    assert anonymous_blob.download_blob().readall() == b"open to all"
    with pytest.raises(HttpResponseError):
        BlobServiceClient(up_default.blob_endpoint).get_blob_client(bucket, "closed.txt").download_blob().readall()

    signed.put_object(Bucket=bucket, Key="open.txt", Body=b"private now")
    with pytest.raises(ClientError) as ei:
        unsigned.get_object(Bucket=bucket, Key="open.txt")
    assert ei.value.response["Error"]["Code"] == "AccessDenied"
    signed.put_bucket_acl(Bucket=bucket, ACL="private")
    with pytest.raises(ClientError) as ei:
        unsigned.list_objects_v2(Bucket=bucket)
    assert ei.value.response["Error"]["Code"] == "AccessDenied"


# ---- clients exactly as a user configures them by default (from the origin stub's own
# suite, 2026-12-05): most tests pin botocore to SigV4 and path-style addressing so that
# failures read easily; these check that an SDK with nothing but an endpoint and
# credentials works too (boto3 still presigns S3 URLs with SigV2 by default), on every
# target, and the generator's golden vector.


def test_generated_content_matches_the_golden_vector():
    # The same constants are asserted by origin-stub/src/generated.rs: if either
    # implementation of the definition drifts, one of the two tests fails.
    data = generated_bytes("bench", "golden.bin", 42, 0, 1000)
    assert hashlib.sha256(data).hexdigest() == "6fc2c36d2b4f3d65f71c5a55987c3ae1573184711794f91c1768f9521f01883c"
    assert generated_etag("bench", "golden.bin", 1000, 42) == '"68ce525e6e526b149aea9f49abaf8573"'


def default_client(gw):
    return boto3.session.Session(
        aws_access_key_id=gw.access_key,
        aws_secret_access_key=gw.secret_key,
        region_name=gw.region,
    ).client("s3", endpoint_url=gw.s3)


def test_default_boto3_client_round_trip_and_presigned_url(gw):
    s3 = default_client(gw)
    name = unique("dflt")
    s3.create_bucket(Bucket=name)
    body = b"defaults " * 1000
    s3.put_object(Bucket=name, Key="dir/object.bin", Body=body)
    got = s3.get_object(Bucket=name, Key="dir/object.bin")["Body"].read()
    assert sha256(got) == sha256(body)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "dir/object.bin"}, ExpiresIn=300)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200, resp.text
    assert sha256(resp.content) == sha256(body)
    # A presigned URL for one key does not open another.
    other = url.replace("object.bin", "other.bin")
    assert requests.get(other, timeout=30).status_code == 403
