"""Fixtures of the gateway SDK suite: real clients against a real Talon gateway.

Deployments (session-scoped, started on first use, SIGTERMed at the end):

* ``up`` — ``talon up`` requiring S3 SigV4 by the client key and Azure Shared Key/SAS
  by the emulator key; 2 workers; 1 MiB blocks of 64 KiB pages.
* ``up_open`` — ``talon up --anonymous read-write``: the development S3 identity, unsigned requests allowed on both fronts; 1 worker.
* ``cluster`` — separate origin stub (its own S3 and Azure identities), coordinator,
  three workers and two gateways (``main``: each front over its own protocol's origin;
  ``cross``: each front over the other protocol's origin).

``gw`` is parametrized over ``up`` and ``cluster.main`` for the tests that must hold on both.
"""

from __future__ import annotations

import pytest

from conftest import blob_service, s3_client, unique

from . import harness


@pytest.fixture(scope="session")
def up(tmp_path_factory, _isolated_client_env):
    front = harness.start_talon_up("auth", tmp_path_factory.mktemp("talon-up-auth"), auth=True)
    yield front
    harness.stop_all(front.procs)


@pytest.fixture(scope="session")
def up_open(tmp_path_factory, _isolated_client_env):
    front = harness.start_talon_up("open", tmp_path_factory.mktemp("talon-up-open"), auth=False, workers=1,
                                   anonymous="read-write")
    yield front
    harness.stop_all(front.procs)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, _isolated_client_env):
    c = harness.start_cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    harness.stop_all(c.procs)


@pytest.fixture(params=["up", "cluster"])
def gw(request) -> harness.Front:
    """The gateway under test: ``talon up`` or the multi-process cluster's main gateway."""
    if request.param == "up":
        return request.getfixturevalue("up")
    return request.getfixturevalue("cluster").main


@pytest.fixture
def gw_s3(gw):
    return s3_client(gw)


@pytest.fixture
def gw_azure(gw):
    return blob_service(gw)


@pytest.fixture
def gw_bucket(gw_s3) -> str:
    """A fresh bucket, created through the gateway (relayed to the S3 origin)."""
    name = unique("gwb")
    gw_s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def gw_container(gw_azure) -> str:
    """A fresh container, created through the gateway's Azure front (over the Azure origin)."""
    name = unique("gwc")
    gw_azure.create_container(name)
    return name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries the tail of its deployment's process logs."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    seen = set()
    for value in getattr(item, "funcargs", {}).values():
        fronts = [value.main, value.cross] if isinstance(value, harness.Cluster) else [value]
        for front in fronts:
            if isinstance(front, harness.Front) and id(front.procs) not in seen:
                seen.add(id(front.procs))
                report.sections.append((f"talon processes ({front.name})", front.logs()))


@pytest.fixture(autouse=True)
def _gateway_processes_alive(request):
    """After every test, fail it if a deployment process died meanwhile."""
    yield
    for proc in list(harness.LIVE):
        proc.check_alive()
