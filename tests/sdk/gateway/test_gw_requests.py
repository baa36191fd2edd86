"""Requests, not only bytes: what a dataset of many small objects costs the origin, counted
by the origin stub's own `talon_origin_requests_total` (every operation of both protocols:
HEADs, GETs, listings), never by the gateway's view of itself.

A `talon up` over a folder of 1,000 small files, with a staleness bound (`--max-staleness`)
far longer than a pass: every object is read whole through each front, then again in
another order. The first pass costs one origin request per object, the second, inside
the bound, nothing.
"""

from __future__ import annotations

import random
import types

import pytest

from conftest import blob_service, read_metrics, s3_client, sha256

from . import harness

OBJECTS = 1000
BOUND = "10m"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, _isolated_client_env):
    """(front, {key: sha256}) for a `talon up` whose folder holds bucket `dataset` with
    OBJECTS files of 1-8 KiB, written before it starts (files of the user's own)."""
    workdir = tmp_path_factory.mktemp("talon-up-dataset")
    rng = random.Random(31)
    want = {}
    for i in range(OBJECTS):
        key = f"train/{i // 100:02d}/sample-{i:05d}.bin"
        body = rng.randbytes(rng.randrange(1024, 8192))
        path = workdir / "data" / "dataset" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        want[key] = sha256(body)
    front = harness.start_talon_up("dataset", workdir, auth=True, workers=2,
                                   extra=["--max-staleness", BOUND])
    yield front, want
    harness.stop_all(front.procs)


def origin_requests(front) -> dict:
    """The origin stub's request counts, {(protocol, operation): n}."""
    counts = {}
    for (name, labels), value in read_metrics(types.SimpleNamespace(admin=front.origin_admin)).items():
        if name == "talon_origin_requests_total":
            labels = dict(labels)
            counts[(labels.get("protocol"), labels.get("operation"))] = value
    return counts


def spent(before: dict, after: dict) -> dict:
    """What changed between two counts, nonzero only."""
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def read_all_s3(front, keys):
    s3 = s3_client(front)
    return {k: sha256(s3.get_object(Bucket="dataset", Key=k)["Body"].read()) for k in keys}


def read_all_azure(front, keys):
    container = blob_service(front).get_container_client("dataset")
    return {k: sha256(container.get_blob_client(k).download_blob().readall()) for k in keys}


def test_the_banner_says_the_bound_in_force(dataset):
    front, _ = dataset
    assert f"Staleness   {BOUND}:" in front.procs[0].tail(20_000), front.logs()


@pytest.mark.parametrize("read_all", [read_all_s3, read_all_azure], ids=["s3", "azure"])
def test_a_second_pass_within_the_bound_costs_the_origin_nothing(dataset, read_all):
    front, want = dataset
    keys = sorted(want)
    start = origin_requests(front)
    assert read_all(front, keys) == want
    first = origin_requests(front)
    cold = sum(spent(start, first).values())
    # Each object's metadata and bytes came from the origin in one request: the GET of
    # its first bytes, which carries the metadata (before 2026-12-04, a HEAD and then a
    # GET).
    assert cold == OBJECTS, spent(start, first)

    again = list(keys)
    random.Random(7).shuffle(again)
    assert read_all(front, again) == {k: want[k] for k in again}
    assert spent(first, origin_requests(front)) == {}, "a re-read within the bound reached the origin"
