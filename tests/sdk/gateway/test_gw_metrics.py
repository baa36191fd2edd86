"""The gateway's /metrics: requests by protocol, operation, route and outcome."""

from __future__ import annotations

import pytest
import requests
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient
from botocore.exceptions import ClientError

from conftest import metric, read_metrics, s3_client

REQUESTS = "talon_gateway_requests_total"


def test_requests_counted_by_protocol_operation_route_outcome(up_open):
    gw = up_open
    s3 = s3_client(gw)
    az = BlobServiceClient(account_url=gw.blob_endpoint, retry_total=0)
    for path in ("/healthz", "/readyz"):
        assert requests.get(gw.admin + path, timeout=10).status_code == 200, path
    before = read_metrics(gw)
    full = s3.get_object(Bucket="demo", Key="hello.txt")["Body"].read()
    part = s3.get_object(Bucket="demo", Key="hello.txt", Range="bytes=0-3")["Body"].read()
    s3.head_object(Bucket="demo", Key="hello.txt")
    s3.list_objects_v2(Bucket="demo")
    with pytest.raises(ClientError):
        s3.get_object(Bucket="demo", Key="no-such-key")
    blob = az.get_blob_client("demo", "hello.txt").download_blob().readall()
    with pytest.raises(ResourceNotFoundError):
        az.get_blob_client("demo", "no-such-blob").download_blob()
    after = read_metrics(gw)

    def delta(**labels):
        return metric(after, REQUESTS, **labels) - metric(before, REQUESTS, **labels)

    def delta_any_outcome(outcomes, **labels):
        return sum(delta(outcome=o, **labels) for o in outcomes)

    ok = ("hit", "fill")
    assert delta_any_outcome(ok, protocol="s3", operation="GetObject", route="cache") == 2
    assert delta_any_outcome(ok, protocol="s3", operation="HeadObject", route="cache") == 1
    assert delta(protocol="s3", operation="ListObjectsV2", route="cache", outcome="origin") == 1
    assert delta(protocol="s3", operation="GetObject", route="cache", outcome="failed") == 1
    assert delta_any_outcome(ok, protocol="azure", operation="GetBlob", route="cache") == 1
    assert delta(protocol="azure", operation="GetBlob", route="cache", outcome="failed") == 1
    # Object bytes sent, by protocol, and the latency histogram.
    sent = {protocol: metric(after, "talon_gateway_response_bytes_total", protocol=protocol)
            - metric(before, "talon_gateway_response_bytes_total", protocol=protocol) for protocol in ("s3", "azure")}
    assert sent == {"s3": len(full) + len(part), "azure": len(blob)}, sent
    counts = [k for k in after if k[0] == "talon_gateway_response_start_seconds_count"]
    assert counts, sorted({k[0] for k in after})


def test_cached_reads_are_counted_as_fill_then_hit(up_open):
    gw = up_open
    s3 = s3_client(gw)
    # Above the write-through threshold (8 MiB): the upload is not pushed into the cache,
    # so the first read is a fill.
    s3.put_object(Bucket="demo", Key="metrics/fill-then-hit.bin", Body=b"x" * (9 * 1024 * 1024))
    before = read_metrics(gw)
    s3.get_object(Bucket="demo", Key="metrics/fill-then-hit.bin")["Body"].read()
    middle = read_metrics(gw)
    s3.get_object(Bucket="demo", Key="metrics/fill-then-hit.bin")["Body"].read()
    after = read_metrics(gw)
    labels = dict(protocol="s3", operation="GetObject", route="cache")
    assert metric(middle, REQUESTS, outcome="fill", **labels) - metric(before, REQUESTS, outcome="fill", **labels) == 1
    assert metric(after, REQUESTS, outcome="hit", **labels) - metric(middle, REQUESTS, outcome="hit", **labels) == 1
