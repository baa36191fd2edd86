"""What a new operator meets in the first hour with `talon up` (the first-hour review of
2026-12): settings that could never work are refused at start with one line that says
why (no backtrace, each cause once), nothing is created or changed by a refusal, a
second `talon up` on a folder in use is refused, and every answer says in RFC 9211's
`Cache-Status` how it was served."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from botocore.exceptions import ClientError

from conftest import blob_service, s3_client

from . import harness


def _refused(argv: list, env_extra: dict | None = None) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, timeout=60,
                          env=harness.clean_env(RUST_BACKTRACE="1", **(env_extra or {})))
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0, f"{argv} was accepted: {stderr}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    # One line, from the binary, without a backtrace, whatever RUST_BACKTRACE says.
    assert len(lines) == 1, stderr
    assert lines[0].startswith("talon: "), stderr
    assert "backtrace" not in stderr.lower() and "Caused by" not in stderr, stderr
    return lines[0]


def _up_argv(data, *extra) -> list:
    return [harness.binary("talon"), "up", "--data-dir", data, "--s3-port", "0", "--azure-port", "0",
            "--admin-port", "0", "--coordinator-port", "0", "--status-port", "0", *extra]


def _tree(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("args, says", [
    (["--workers", "0"], "--workers 0"),
    (["--capacity", "1MiB"], "is less than one --block-size"),
    (["--block-size", "3MiB"], "block size must be a power of two"),
])
def test_settings_that_could_never_work_are_refused_at_start(tmp_path, args, says):
    data = tmp_path / "data"
    line = _refused([harness.binary("talon"), "up", "--data-dir", data, "--s3-port", "0", "--azure-port", "0",
                     "--admin-port", "0", "--coordinator-port", "0", "--status-port", "0", *args])
    assert says in line, line
    assert not data.exists(), "a refused start created the data folder"


@pytest.mark.parametrize("part", ["up", "origin"])
def test_a_data_folder_that_is_a_file_is_named_as_such(tmp_path, part):
    data = tmp_path / "data"
    data.write_bytes(b"not a folder")
    ports = (["--s3-port", "0", "--azure-port", "0", "--admin-port", "0", "--coordinator-port", "0",
              "--status-port", "0"] if part == "up" else
             ["--s3-listen", "127.0.0.1:0", "--azure-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
    line = _refused([harness.binary("talon"), part, "--data-dir", data, *ports])
    # `talon origin` said "File exists (os error 17)" before 2026-12-05.
    assert f"{data}" in line and "is a file, not a folder" in line, line
    assert data.read_bytes() == b"not a folder"


@pytest.mark.parametrize("own_cache", [False, True], ids=["same-cache", "own-cache-dir"])
def test_a_second_talon_up_on_a_folder_in_use_is_refused(tmp_path, _isolated_client_env, own_cache):
    front = harness.start_talon_up("first", tmp_path, auth=False, workers=1)
    try:
        before = _tree(front.data_dir)
        # With a cache folder of its own the second one still serves the same data
        # folder (a second origin over it, and its state file): refused too (it started
        # before 2026-12-05 and removed the first one's state file when it stopped).
        other_cache = tmp_path / "other-cache"
        extra = ["--cache-dir", other_cache] if own_cache else []
        line = _refused([harness.binary("talon"), "up", "--data-dir", front.data_dir, "--s3-port", "0",
                         "--azure-port", "0", "--admin-port", "0", "--coordinator-port", "0", "--status-port", "0",
                         *extra])
        pid = front.procs[0].popen.pid
        assert f"another talon up (pid {pid}) is using {front.data_dir}" in line, line
        # The advice names the folder that is taken (it said "or --cache-dir" before,
        # which then started a second one on the same data folder).
        assert line.endswith("give this one another --data-dir"), line
        assert _tree(front.data_dir) == before
        assert not other_cache.exists()
        # The operator tools still find the first one.
        status = subprocess.run([str(harness.binary("talon")), "status", "--data-dir", str(front.data_dir), "--json"],
                                capture_output=True, timeout=60, env=harness.clean_env())
        assert status.returncode == 0, status.stderr.decode(errors="replace")
        # The first one still serves.
        s3 = s3_client(front)
        assert s3.get_object(Bucket="demo", Key="hello.txt")["Body"].read().startswith(b"Hello from Talon")
    finally:
        harness.stop_all(front.procs)


def test_a_second_talon_up_on_a_cache_folder_in_use_is_told_to_change_it(tmp_path, _isolated_client_env):
    front = harness.start_talon_up("first", tmp_path, auth=False, workers=1)
    try:
        other_data = tmp_path / "other-data"
        line = _refused([*_up_argv(other_data), "--cache-dir", front.data_dir / ".talon-cache"])
        pid = front.procs[0].popen.pid
        assert f"another talon up (pid {pid}) is using" in line, line
        assert line.endswith("give this one another --cache-dir"), line
        assert not other_data.exists(), "a refused start left a data folder behind"
    finally:
        harness.stop_all(front.procs)


def test_cache_status_says_fill_then_hit_on_both_fronts(tmp_path, _isolated_client_env):
    front = harness.start_talon_up("cache-status", tmp_path, auth=False, workers=1)
    try:
        s3 = s3_client(front)
        body = b"c" * 300_000
        # Written at the origin's folder, not through the gateway (whose writes may be
        # pushed into the cache): the first read must fetch it.
        (front.data_dir / "demo" / "status.bin").write_bytes(body)
        seen = []
        for _ in range(2):
            resp = s3.get_object(Bucket="demo", Key="status.bin")
            assert resp["Body"].read() == body
            seen.append(resp["ResponseMetadata"]["HTTPHeaders"].get("cache-status"))
        assert seen == ["talon; fwd=miss; stored", "talon; hit"], seen
        # The Azure front reads the folder through the origin's Azure endpoint: blocks
        # are the origin's, so its first read fills too.
        azure_seen = []
        blob = blob_service(front).get_blob_client("demo", "status.bin")
        for _ in range(2):
            download = blob.download_blob(
                raw_response_hook=lambda r: azure_seen.append(r.http_response.headers.get("cache-status")))
            assert download.readall() == body
        assert azure_seen == ["talon; fwd=miss; stored", "talon; hit"], azure_seen
        # A refusal carries none: the error is the answer.
        with pytest.raises(ClientError) as refused:
            s3.get_object(Bucket="demo", Key="never-written.bin")
        assert refused.value.response["Error"]["Code"] == "NoSuchKey"
        assert "cache-status" not in refused.value.response["ResponseMetadata"]["HTTPHeaders"]
    finally:
        harness.stop_all(front.procs)


def test_the_operator_tools_find_a_plain_talon_up(tmp_path, _isolated_client_env):
    """`talon up` given no cluster secret writes its state file (mode 0600) into the data
    folder; `talon status` and `talon warm` with only --data-dir (no coordinator, no
    secret, no block size: the coordinator says it) find it, and what the warm filled is a hit for the next read.
    The file goes when talon up stops."""
    import stat

    front = harness.start_talon_up("tools", tmp_path, auth=False, workers=1,
                                   env={"TALON_CLUSTER_SECRET": None})
    state_file = front.data_dir / ".talon-up.json"
    tools_env = harness.clean_env(TALON_CLUSTER_SECRET=None)
    try:
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        state = json.loads(state_file.read_text())
        assert state["pid"] == front.procs[0].popen.pid and state["s3"] == front.s3, state
        talon = str(harness.binary("talon"))
        out = subprocess.run([talon, "status", "--data-dir", str(front.data_dir), "--json"],
                             capture_output=True, timeout=60, env=tools_env)
        assert out.returncode == 0, out.stderr.decode()
        assert json.loads(out.stdout)["cluster"]["live"] == 1
        # A reader that is gone (`talon status | head -1`): the tool ends quietly, no panic.
        read_end, write_end = os.pipe()
        os.close(read_end)
        gone = subprocess.run([talon, "status", "--data-dir", str(front.data_dir)], stdout=write_end,
                              stderr=subprocess.PIPE, timeout=60, env=tools_env)
        os.close(write_end)
        assert gone.returncode == 0 and not gone.stderr, gone.stderr.decode()
        body = b"w" * 200_000
        (front.data_dir / "demo" / "warm-me.bin").write_bytes(body)
        warm = subprocess.run([talon, "warm", "s3://demo/warm-me", "--data-dir", str(front.data_dir), "--json"],
                              capture_output=True, timeout=120, env=tools_env)
        assert warm.returncode == 0, warm.stderr.decode()
        # The block size is the cluster's, as its coordinator publishes it.
        assert json.loads(warm.stdout)["block_size"] == 1 << 20, warm.stdout
        resp = s3_client(front).get_object(Bucket="demo", Key="warm-me.bin")
        assert resp["Body"].read() == body
        assert resp["ResponseMetadata"]["HTTPHeaders"]["cache-status"] == "talon; hit"
        # Elsewhere, with nothing to go by, the tool says what it lacks.
        lost = subprocess.run([talon, "status", "--data-dir", str(tmp_path / "nowhere")], capture_output=True,
                              timeout=60, env=tools_env)
        assert lost.returncode != 0 and b"no cluster secret" in lost.stderr, lost.stderr
        pointed = subprocess.run([talon, "status", "--coordinator", "127.0.0.1:1", "--data-dir", str(front.data_dir)],
                                 capture_output=True, timeout=60, env=tools_env)
        assert b"with --coordinator, a talon up's state file is read only when it names that coordinator" \
            in pointed.stderr, pointed.stderr
        # The banner's coordinator, given as a flag: the state file names it, so its
        # secret is used (it said "no cluster secret" before).
        named = subprocess.run([talon, "status", "--coordinator", state["coordinator"], "--data-dir",
                                str(front.data_dir), "--json"], capture_output=True, timeout=60, env=tools_env)
        assert named.returncode == 0, named.stderr.decode()
        assert json.loads(named.stdout)["cluster"]["live"] == 1
        # A prefix with nothing under it is said to be empty, not only "done".
        empty = subprocess.run([talon, "warm", "s3://demo/no-such-prefix/", "--data-dir", str(front.data_dir)],
                               capture_output=True, timeout=120, env=tools_env)
        assert empty.returncode == 0, empty.stderr.decode()
        assert b"warm: nothing at the origin under s3://demo/no-such-prefix/" in empty.stderr, empty.stderr
        # Pointed at the gateway's S3 port instead of the coordinator: said so, no XML.
        wrong = subprocess.run([talon, "status", "--coordinator", front.s3], capture_output=True, timeout=60,
                               env=harness.clean_env())
        assert wrong.returncode != 0 and b"not a Talon coordinator's" in wrong.stderr, wrong.stderr
        assert b"<?xml" not in wrong.stderr, wrong.stderr
        # The state file of a talon up killed without cleaning up names it as gone.
        stale = tmp_path / "stale"
        stale.mkdir()
        gone_pid = subprocess.Popen(["true"])
        gone_pid.wait()
        (stale / ".talon-up.json").write_text(json.dumps({**state, "pid": gone_pid.pid}))
        killed = subprocess.run([talon, "status", "--data-dir", str(stale)], capture_output=True, timeout=60,
                                env=tools_env)
        assert killed.returncode != 0 and f"(pid {gone_pid.pid}) is no longer running".encode() in killed.stderr, \
            killed.stderr
    finally:
        harness.stop_all(front.procs)
    assert not state_file.exists(), "talon up left its state file behind"
    # A clean stop says nothing alarming (it used to log "accept failed ... Invalid
    # argument" from the workers' rings).
    assert "accept failed" not in front.procs[0].tail(), front.procs[0].tail()


@pytest.mark.parametrize("case", ["dead", "wrong scheme", "no credentials", "wrong credentials"])
def test_an_origin_that_cannot_serve_is_refused_at_start_with_why(tmp_path, stub, case):
    """`talon up --origin` checks the origin with one signed ListBuckets before it says it
    is up: a dead origin, https to a plain-HTTP server, no credentials for an origin that
    requires them and refused credentials each stop it with one line naming the URL and
    what to do; the data folder is not created. (Before: "Talon is up", then clients got
    "Anonymous access is not allowed" or a 503 after 7-10 s.)"""
    host = stub.s3.removeprefix("http://")
    key, secret = stub.s3_credentials[0]
    keys = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    origin, env, says = {
        "dead": (f"s3+http://127.0.0.1:{harness.free_port()}", keys, "cannot reach the origin at http://127.0.0.1:"),
        "wrong scheme": (f"s3://{host}", keys, f"cannot reach the origin at https://{host}"),
        "no credentials": (f"s3+http://{host}", {}, "refuses unsigned requests"),
        "wrong credentials": (f"s3+http://{host}", {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "wrong"},
                              "refused the credentials"),
    }[case]
    data = tmp_path / "data"
    line = _refused(_up_argv(data, "--origin", origin), env)
    assert says in line, line
    assert "--origin-check warn" in line, line
    assert not data.exists(), "a refused start created the data folder"


def test_origin_check_warn_starts_and_says_it_on_readyz(tmp_path, _isolated_client_env):
    """With --origin-check warn, a dead origin does not stop talon up: /readyz answers 503
    with the problem (and /healthz stays ok) until the origin passes."""
    import requests

    dead = f"s3+http://127.0.0.1:{harness.free_port()}"
    front = harness.start_talon_up("warn", tmp_path, auth=False, workers=1,
                                   extra=["--origin", dead, "--origin-check", "warn"])
    try:
        ready = requests.get(front.admin + "/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        assert "cannot reach the origin at http://127.0.0.1:" in ready.text, ready.text
        assert requests.get(front.admin + "/healthz", timeout=10).status_code == 200
        # A read meanwhile fails, and its log line says why (not only "error sending
        # request"), still without the origin's URL.
        with pytest.raises(ClientError):
            s3_client(front).get_object(Bucket="demo", Key="any.bin")
        line = harness.wait_for(front.procs[0], lambda: next(
            (l for l in front.procs[0].tail().splitlines() if "request failed" in l and "any.bin" in l), None),
            "the failed read's log line")
        assert "Connection refused" in line and dead.split("//")[1] not in line, line
    finally:
        harness.stop_all(front.procs)


def test_region_and_status_page_under_talon_up(tmp_path, _isolated_client_env):
    """`talon up --region` serves clients that sign for that region (and refuses others,
    changing nothing); the cluster's status page is on by default, named in the ready
    file and the state file; each worker's /metrics is served on a port the banner, the
    ready file and the state file name (before, the workers' metrics were on no
    endpoint under `talon up`)."""

    import requests

    front = harness.start_talon_up("region", tmp_path, auth=False, workers=1, extra=["--region", "eu-west-3"])
    try:
        s3 = s3_client(front, region_name="eu-west-3")
        s3.put_object(Bucket="demo", Key="region.txt", Body=b"signed for eu-west-3")
        assert s3.get_object(Bucket="demo", Key="region.txt")["Body"].read() == b"signed for eu-west-3"
        other = s3_client(front, region_name="us-east-1")
        with pytest.raises(ClientError) as refused:
            other.put_object(Bucket="demo", Key="region.txt", Body=b"signed for us-east-1")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] in (400, 403), refused.value.response
        assert (front.data_dir / "demo" / "region.txt").read_bytes() == b"signed for eu-west-3"
        state = json.loads((front.data_dir / ".talon-up.json").read_text())
        ready = json.loads((tmp_path / "ready.json").read_text())
        assert state["status"] == ready["status"] and state["status"].startswith("http://127.0.0.1:"), state
        page = requests.get(state["status"], timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower(), page.text[:200]
        workers = requests.get(state["status"] + "status.json", timeout=10).json()
        assert len(workers["members"]) == 1, workers
        # Epochs as strings: a JSON number past 2^53 loses digits in a browser (the
        # cluster's summary carried a bare number before 2026-12-05).
        assert isinstance(workers["epoch"], str) and workers["cluster"]["epoch"] == workers["epoch"], workers
        # The worker's metrics: the one read of region.txt reached it (a hit when the
        # upload's write-through into the cache came first, else a fill).
        assert state["workers"] == ready["workers"] and len(ready["workers"]) == 1, ready
        metrics = requests.get(ready["workers"][0] + "/metrics", timeout=10)
        assert metrics.status_code == 200, metrics.text[:200]
        counted = {line.split()[0]: float(line.split()[1]) for line in metrics.text.splitlines()
                   if line.startswith(("talon_worker_hits_total ", "talon_worker_misses_total "))}
        assert sum(counted.values()) == 1, counted
        assert f"{ready['workers'][0]}/metrics (w0)" in front.procs[0].tail(), front.procs[0].tail()
        # The banner's aws line, as printed, signs for the region in force.
        line = next(l.strip() for l in front.procs[0].tail().splitlines() if l.strip().startswith("AWS_ACCESS_KEY_ID="))
        bin_dir = pathlib.Path(sys.executable).parent
        run = subprocess.run(["bash", "-c", line], capture_output=True, timeout=120,
                             env=harness.clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}", HOME=str(tmp_path)))
        assert run.returncode == 0 and b"region.txt" in run.stdout, run.stderr.decode()
    finally:
        harness.stop_all(front.procs)


def test_a_second_ctrl_c_stops_at_once(tmp_path, _isolated_client_env):
    """The first Ctrl-C says what it waits for (open requests, up to 10 s); a second one
    stops the process at once (exit 130) instead of waiting out an upload in flight."""
    import signal
    import socket
    import urllib.parse

    front = harness.start_talon_up("ctrl-c", tmp_path, auth=False, workers=1, anonymous="read-write")
    proc = front.procs[0]
    s3 = urllib.parse.urlsplit(front.s3)
    # An upload in flight that will not finish: the drain waits for it.
    upload = socket.create_connection((s3.hostname, s3.port), timeout=30)
    try:
        upload.sendall(b"PUT /demo/slow.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                       b"Expect: 100-continue\r\n\r\n")
        # 100 Continue: the gateway has taken the request and reads its body.
        assert upload.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        upload.sendall(b"x" * 1000)
        proc.popen.send_signal(signal.SIGINT)
        harness.wait_for(proc, lambda: "Ctrl-C again stops at once" in proc.tail(), "the first Ctrl-C's log line", 30)
        proc.popen.send_signal(signal.SIGINT)
        assert proc.popen.wait(timeout=30) == 130, proc.tail()
        assert "stopped at once (second Ctrl-C)" in proc.tail(), proc.tail()
    finally:
        upload.close()
        # Exited with 130 above, as it should; anything else has failed already.
        harness.stop(proc, check=False)



def test_the_access_log_says_who_asked_for_what_and_how_it_was_served(tmp_path, _isolated_client_env):
    """`talon up --access-log FILE`: one JSON line per answered request with the request
    id the client saw, the identity, the operation, bucket, key, range, status, bytes and
    outcome, on both fronts; a refused request is logged with its status and no identity."""

    log = tmp_path / "access.log"
    front = harness.start_talon_up("access-log", tmp_path, auth=True, workers=1, extra=["--access-log", log])
    try:
        s3 = s3_client(front)
        body = b"a" * 100_000
        (front.data_dir / "demo" / "logged.bin").write_bytes(body)
        first = s3.get_object(Bucket="demo", Key="logged.bin", Range="bytes=0-999")
        assert first["Body"].read() == body[:1000]
        second = s3.get_object(Bucket="demo", Key="logged.bin", Range="bytes=0-999")
        assert second["Body"].read() == body[:1000]
        intruder = s3_client(front, access_key="AKIANOBODY0000000000", secret_key="nope")
        with pytest.raises(ClientError):
            intruder.get_object(Bucket="demo", Key="logged.bin")
        download = blob_service(front).get_blob_client("demo", "logged.bin").download_blob()
        assert download.readall() == body
        ids = [r["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"] for r in (first, second)]

        def lines():
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        harness.wait_for(front.procs[0], lambda: len(lines()) >= 4, "four access log lines", 30)
        by_id = {line["request_id"]: line for line in lines()}
        for request_id, outcome in zip(ids, ["fill", "hit"]):
            line = by_id[request_id]
            assert {k: line[k] for k in ("protocol", "operation", "identity", "method", "bucket", "key", "range",
                                         "status", "bytes", "outcome")} == {
                "protocol": "s3", "operation": "GetObject", "identity": harness.CLIENT_S3[0], "method": "GET",
                "bucket": "demo", "key": "logged.bin", "range": "bytes=0-999", "status": 206, "bytes": 1000,
                "outcome": outcome}, line
            assert line["time"].endswith("Z") and line["ms"] >= 0, line
        refused = [l for l in lines() if l["status"] == 403]
        assert refused and refused[0]["identity"] is None and refused[0]["outcome"] == "failed", refused
        azure = [l for l in lines() if l["protocol"] == "azure"]
        assert azure and azure[-1]["operation"] == "GetBlob" and azure[-1]["status"] in (200, 206), azure
        assert azure[-1]["identity"] == f"sharedkey:{front.azure_account}", azure
    finally:
        harness.stop_all(front.procs)


def test_talon_up_over_a_real_origin_with_the_cache_elsewhere_writes_its_state(tmp_path, stub):
    """`talon up --origin … --cache-dir …` with no data folder yet: it starts, serves, and
    writes its state file (it failed writing it: nothing else made the folder)."""

    host = stub.s3.removeprefix("http://")
    key, secret = stub.s3_credentials[0]
    front = harness.start_talon_up("elsewhere", tmp_path, auth=True, workers=1,
                                   extra=["--origin", f"s3+http://{host}", "--cache-dir", tmp_path / "cache"],
                                   env={"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret})
    try:
        state = json.loads((front.data_dir / ".talon-up.json").read_text())
        assert state["s3"] == front.s3, state
        assert (tmp_path / "cache" / ".talon-up.lock").exists()
        s3_client(front).list_buckets()
    finally:
        harness.stop_all(front.procs)


def test_parts_of_another_geometry_are_refused_with_both_values(tmp_path):
    """The coordinator publishes the cluster's block and page size; a gateway, a worker or
    a `talon warm` given another refuses to start with one line naming both values, and
    creates nothing. (Before: `talon warm` filled 256 MiB blocks for a 64 MiB cluster and
    said 100% done; every later read was a fill.)"""
    talon = harness.binary("talon")
    coord_dir = tmp_path / "coordinator"
    ready = coord_dir / "ready.json"
    coord = harness.spawn("geometry-coordinator", [
        talon, "coordinator", "--listen", "127.0.0.1:0", "--ready-file", ready,
        "--block-size", "64MiB", "--page-size", "1MiB",
    ], coord_dir, harness.clean_env())
    try:
        url = harness.wait_for(coord, lambda: (harness.read_json(ready) or {}).get("url"), f"ready file {ready}")
        dead_origin = "s3+http://127.0.0.1:9"
        line = _refused([talon, "gateway", "--coordinator", url, "--block-size", "256MiB",
                         "--origin", dead_origin, "--origin-check", "off", "--s3-listen", "127.0.0.1:0",
                         "--azure-listen", "off", "--admin-listen", "off", "--anonymous", "read"])
        assert "--block-size 268435456 bytes differs from the cluster's 67108864 bytes" in line, line
        cache = tmp_path / "worker-cache"
        line = _refused([talon, "worker", "--coordinator", url, "--page-size", "64KiB", "--cache-dir", cache,
                         "--listen", "127.0.0.1:0", "--admin-listen", "off", "--origin", dead_origin,
                         "--origin-check", "off"])
        assert "--page-size 65536 bytes differs from the cluster's 1048576 bytes" in line, line
        assert not cache.exists(), "a refused worker created its cache folder"
        # A worker with another cluster secret is refused at start, not left retrying.
        line = _refused([talon, "worker", "--coordinator", url, "--cache-dir", cache, "--listen", "127.0.0.1:0",
                         "--admin-listen", "off", "--origin", dead_origin, "--origin-check", "off"],
                        env_extra={"TALON_CLUSTER_SECRET": "another-secret-of-32-bytes-at-least-0123456789"})
        assert f"the coordinator at {url} refused this worker" in line, line
        assert not cache.exists(), "a refused worker created its cache folder"
        line = _refused([talon, "warm", "s3://demo/", "--coordinator", url, "--block-size", "1MiB"])
        assert "--block-size 1048576 bytes differs from the cluster's 67108864 bytes" in line, line
        # Nothing reached the coordinator: no member, no warm job.
        members = subprocess.run([talon, "status", "--coordinator", url, "--json"], capture_output=True,
                                 timeout=60, env=harness.clean_env())
        assert members.returncode == 0, members.stderr.decode()
        status = json.loads(members.stdout)
        assert status["cluster"]["workers"] == 0, status
        assert not status.get("warm_jobs"), status
    finally:
        harness.stop_all([coord])


def test_a_failed_request_is_logged_under_the_request_id_the_client_saw(tmp_path, _isolated_client_env):
    """Each front's `request failed` line names the request id the client got
    (`x-amz-request-id`, `x-ms-request-id`) and the resource, so one grep finds it.
    (Before: the line had no request id, and Azure's said `resource=""`.)"""
    from azure.core.exceptions import ResourceNotFoundError

    front = harness.start_talon_up("request-id", tmp_path, auth=False, workers=1)
    log = front.procs[0]
    try:
        with pytest.raises(ClientError) as refused:
            s3_client(front).get_object(Bucket="demo", Key="no-such-key.bin")
        s3_id = refused.value.response["ResponseMetadata"]["RequestId"]
        assert s3_id, refused.value.response
        with pytest.raises(ResourceNotFoundError) as missing:
            blob_service(front).get_blob_client("demo", "no-such-blob.bin").download_blob()
        azure_id = missing.value.response.headers["x-ms-request-id"]
        for request_id, resource in ((s3_id, "/demo/no-such-key.bin"),
                                     (azure_id, "/devstoreaccount1/demo/no-such-blob.bin")):
            line = harness.wait_for(log, lambda r=request_id: next(
                (line for line in log.tail().splitlines() if r in line), None), f"a log line with {request_id}")
            assert "request failed" in line and resource in line, line
    finally:
        harness.stop_all(front.procs)


def test_pins_of_nothing_are_refused_and_change_nothing(tmp_path, _isolated_client_env):
    """`talon pin s3://nosuch/` (a bucket the origin does not have) and `talon pin --remove`
    of a prefix never pinned are refused with why, and the pins stay as they were.
    (Before: both were accepted silently, the first bumping the pins' version.)"""
    front = harness.start_talon_up("pins", tmp_path, auth=False, workers=1)
    talon = str(harness.binary("talon"))
    at = ["--data-dir", str(front.data_dir)]

    def pins() -> dict:
        out = subprocess.run([talon, "pin", *at, "--json"], capture_output=True, timeout=60, env=harness.clean_env())
        assert out.returncode == 0, out.stderr.decode()
        return json.loads(out.stdout)

    try:
        added = subprocess.run([talon, "pin", *at, "s3://demo/keep/"], capture_output=True, timeout=60,
                               env=harness.clean_env())
        assert added.returncode == 0, added.stderr.decode()
        before = pins()
        assert before["prefixes"] == ["s3/demo/keep/"], before
        line = _refused([talon, "pin", *at, "s3://nosuch/"])
        assert "nosuch does not exist at the origin" in line, line
        assert line.count("invalid request") == 1, line  # each cause once
        line = _refused([talon, "warm", *at, "s3://nosuch/"])
        assert "nosuch does not exist at the origin" in line and "503" not in line, line
        line = _refused([talon, "pin", *at, "--remove", "s3://demo/never/"])
        assert "s3/demo/never/ is not pinned (pinned: s3/demo/keep/); nothing changed" in line, line
        assert pins() == before
    finally:
        harness.stop_all(front.procs)


def test_the_origins_fault_injection_is_not_left_open_to_the_network(tmp_path):
    """`talon origin` refuses an admin listener off loopback without --admin-token: its
    PUT /admin/faults would let anyone who reaches it break the origin."""
    line = _refused([harness.binary("talon"), "origin", "--admin-listen", "0.0.0.0:0", "--s3-listen", "127.0.0.1:0",
                     "--azure-listen", "off", "--data-dir", tmp_path / "origin"],
                    env_extra={"TALON_STUB_ADMIN_TOKEN": None})
    assert "--admin-listen 0.0.0.0:0 without --admin-token" in line, line
    assert not (tmp_path / "origin").exists()


@pytest.mark.parametrize("url, says", [
    ("127.0.0.1:1", "http://127.0.0.1:1/v1/members): client error (Connect): tcp connect error: Connection refused"),
    ("ftp://127.0.0.1:1", 'coordinator URL "ftp://127.0.0.1:1" is not http://HOST:PORT'),
])
def test_a_coordinator_url_is_taken_or_refused_by_what_it_says(url, says):
    """A bare HOST:PORT is http, as the operator tools take it; a URL of another scheme is
    refused naming it; an unreachable one says why. (Before: "builder error".)"""
    line = _refused([harness.binary("talon"), "gateway", "--coordinator", url, "--origin", "s3+http://127.0.0.1:9",
                     "--origin-check", "off", "--s3-listen", "127.0.0.1:0", "--azure-listen", "off",
                     "--admin-listen", "off", "--anonymous"])
    assert says in line and "builder error" not in line, line


def test_a_port_in_use_or_given_twice_is_named_before_anything_starts(tmp_path):
    """`talon up` checks its ports first: one held by another process, or two flags with
    the same port, are refused naming the flag, and the data folder is not created.
    (Before: "cannot listen on 127.0.0.1:PORT" after the sample folder and the workers
    were made.)"""
    import socket

    data = tmp_path / "data"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        line = _refused([harness.binary("talon"), "up", "--data-dir", data, "--s3-port", "0", "--azure-port", "0",
                         "--admin-port", "0", "--coordinator-port", "0", "--status-port", str(port)])
        assert f"--status-port {port}: cannot listen on 127.0.0.1:{port}" in line, line
        # The same port twice is said as such even where that port is also held (a
        # clash between flags is wrong whatever else runs on the machine).
        line = _refused([harness.binary("talon"), "up", "--data-dir", data, "--s3-port", str(port),
                         "--azure-port", str(port), "--admin-port", "0", "--coordinator-port", "0",
                         "--status-port", "0"])
        assert f"--s3-port and --azure-port are both {port}" in line, line
    assert not data.exists(), "a refused start created the data folder"


def test_a_client_at_the_other_fronts_port_is_told_where_to_go(tmp_path, _isolated_client_env):
    """boto3 pointed at the Azure Blob endpoint, and the Azure SDK at the S3 one, are told
    which endpoint their requests belong on. (Before: boto3 got `NotImplemented: this
    account operation is not implemented`.)"""
    from azure.core.exceptions import HttpResponseError

    front = harness.start_talon_up("wrong-port", tmp_path, auth=False, workers=1)
    try:
        import dataclasses

        azure_root = front.blob_endpoint.rsplit("/", 1)[0]
        with pytest.raises(ClientError) as s3_at_azure:
            s3_client(dataclasses.replace(front, s3=azure_root)).list_buckets()
        assert "This is the Azure Blob endpoint; the request is signed for S3" in str(s3_at_azure.value), \
            s3_at_azure.value
        with pytest.raises(HttpResponseError) as azure_at_s3:
            account = front.blob_endpoint.rsplit("/", 1)[1]
            blob_service(dataclasses.replace(front, blob_endpoint=f"{front.s3}/{account}")).get_container_client(
                "demo").get_container_properties()
        assert "This is the S3 endpoint; the request is signed for Azure Blob" in str(azure_at_s3.value), \
            azure_at_s3.value
    finally:
        harness.stop_all(front.procs)
