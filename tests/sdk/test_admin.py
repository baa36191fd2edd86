"""Admin listener: health, metrics and run-time faults, on a stub of this module's own."""

from __future__ import annotations

import pytest
import requests

from conftest import (
    GENERATED,
    _LIVE_STUBS,
    assert_s3_error,
    generated_sha,
    metric,
    read_metrics,
    s3_client,
    blob_service,
    sha256,
    start_stub,
    stop_stub,
)

REQS = "talon_origin_requests_total"
BYTES = "talon_origin_get_bytes_total"


@pytest.fixture(scope="module")
def own_stub(tmp_path_factory, _isolated_client_env):
    """A dedicated anonymous stub, so metric deltas and faults affect no other test."""
    s = start_stub("admin", tmp_path_factory.mktemp("stub-admin"), auth=False)
    _LIVE_STUBS.append(s)
    try:
        yield s
    finally:
        _LIVE_STUBS.remove(s)
        stop_stub(s)


def test_health(own_stub):
    for path in ("/healthz", "/readyz"):
        resp = requests.get(own_stub.admin + path, timeout=30)
        assert resp.status_code == 200, (path, resp.text)


def test_s3_get_metrics_count_exactly(own_stub):
    s3 = s3_client(own_stub)
    b, k, size, _ = GENERATED["small"]
    before = read_metrics(own_stub)
    gets = 3
    for _ in range(gets):
        assert sha256(s3.get_object(Bucket=b, Key=k)["Body"].read()) == generated_sha("small")
    s3.get_object(Bucket=b, Key=k, Range="bytes=0-99")["Body"].read()
    s3.head_object(Bucket=b, Key=k)
    after = read_metrics(own_stub)
    delta = lambda name, **labels: metric(after, name, **labels) - metric(before, name, **labels)  # noqa: E731
    assert delta(REQS, protocol="s3", operation="GetObject") == gets + 1
    assert delta(REQS, protocol="s3", operation="HeadObject") == 1
    assert delta(BYTES, protocol="s3") == gets * size + 100
    assert delta(REQS, protocol="azure", operation="GetBlob") == 0


def test_azure_metrics_count(own_stub):
    svc = blob_service(own_stub)
    b, k, size, _ = GENERATED["small"]
    before = read_metrics(own_stub)
    bc = svc.get_blob_client(b, k)
    bc.get_blob_properties()
    assert sha256(bc.download_blob().readall()) == generated_sha("small")
    list(svc.get_container_client(b).list_blobs())
    after = read_metrics(own_stub)
    delta = lambda name, **labels: metric(after, name, **labels) - metric(before, name, **labels)  # noqa: E731
    assert delta(REQS, protocol="azure", operation="GetBlob") == 1
    assert delta(REQS, protocol="azure", operation="GetBlobProperties") == 1
    assert delta(REQS, protocol="azure", operation="ListBlobs") == 1
    assert delta(REQS, protocol="s3", operation="GetObject") == 0


def test_fault_slowdown_then_restore(own_stub):
    url = f"{own_stub.s3}/gen/small.bin"
    faults = own_stub.admin + "/admin/faults"
    base = {"latency_ms": 0, "bandwidth_bytes_per_sec": None, "error_rate": 0.0, "error_kinds": ["slowdown"]}
    try:
        resp = requests.put(faults, json={**base, "error_rate": 1.0}, timeout=30)
        assert resp.status_code in (200, 204), resp.text
        current = requests.get(faults, timeout=30).json()
        assert current["error_rate"] == 1.0 and current["error_kinds"] == ["slowdown"]
        for _ in range(3):
            assert_s3_error(requests.get(url, timeout=30), 503, "SlowDown")
    finally:
        resp = requests.put(faults, json=base, timeout=30)
    assert resp.status_code in (200, 204), resp.text
    assert requests.get(faults, timeout=30).json()["error_rate"] == 0.0
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200 and sha256(resp.content) == generated_sha("small")


@pytest.mark.parametrize("kind", ["internal", "reset", "truncate"])
def test_fault_kinds(own_stub, kind):
    b, k, size, _ = GENERATED["odd"]
    url = f"{own_stub.s3}/{b}/{k}"
    faults = own_stub.admin + "/admin/faults"
    base = {"latency_ms": 0, "bandwidth_bytes_per_sec": None, "error_rate": 0.0, "error_kinds": [kind]}
    try:
        assert requests.put(faults, json={**base, "error_rate": 1.0}, timeout=30).status_code in (200, 204)
        if kind == "internal":
            assert_s3_error(requests.get(url, timeout=30), 500, "InternalError")
        elif kind == "reset":
            with pytest.raises(requests.exceptions.ConnectionError):
                requests.get(url, timeout=30)
        else:
            try:
                resp = requests.get(url, timeout=30)
            except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError):
                pass  # the body was cut short: the client noticed
            else:
                pytest.fail(f"truncate fault delivered a complete response: {resp.status_code}, "
                            f"{len(resp.content)} of {size} bytes")
    finally:
        assert requests.put(faults, json={**base, "error_kinds": ["slowdown"]}, timeout=30).status_code in (200, 204)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200 and sha256(resp.content) == generated_sha("odd")


def test_latency_and_bandwidth_settings_roundtrip(own_stub):
    """Only the settings are checked (never timing): they read back as written and service stays correct."""
    faults = own_stub.admin + "/admin/faults"
    base = {"latency_ms": 0, "bandwidth_bytes_per_sec": None, "error_rate": 0.0, "error_kinds": ["slowdown"]}
    try:
        setting = {**base, "latency_ms": 5, "bandwidth_bytes_per_sec": 50_000_000}
        assert requests.put(faults, json=setting, timeout=30).status_code in (200, 204)
        current = requests.get(faults, timeout=30).json()
        assert current["latency_ms"] == 5 and current["bandwidth_bytes_per_sec"] == 50_000_000
        resp = requests.get(f"{own_stub.s3}/gen/small.bin", timeout=30)
        assert resp.status_code == 200 and sha256(resp.content) == generated_sha("small")
    finally:
        assert requests.put(faults, json=base, timeout=30).status_code in (200, 204)
    assert requests.get(faults, timeout=30).json()["latency_ms"] == 0
