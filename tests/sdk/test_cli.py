"""The stub's command line: configuration from TALON_STUB_* environment variables, bad arguments."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess

import pytest
import requests
from botocore.exceptions import ClientError

import generated
from conftest import AZURE_KEY, Stub, blob_service, s3_client, sha256, stub_command, wait_until


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("TALON_STUB_")}


def test_configured_entirely_from_environment(tmp_path):
    ready = tmp_path / "ready.json"
    data = tmp_path / "data"
    (data / "envbucket").mkdir(parents=True)
    (data / "envbucket" / "f.txt").write_bytes(b"from the env-configured data dir")
    env = _clean_env()
    env.update(
        TALON_STUB_DATA_DIR=str(data),
        TALON_STUB_S3_LISTEN="127.0.0.1:0",
        TALON_STUB_AZURE_LISTEN="127.0.0.1:0",
        TALON_STUB_ADMIN_LISTEN="127.0.0.1:0",
        TALON_STUB_READY_FILE=str(ready),
        TALON_STUB_GENERATE="envgen/a.bin=3KiB;envgen/b.bin=1000,9",
        TALON_STUB_S3_CREDENTIALS="AKIAENVONE:secret-one,AKIAENVTWO:secret-two",
        TALON_STUB_AZURE_ACCOUNT="envaccount",
        TALON_STUB_AZURE_KEY=AZURE_KEY,
        TALON_STUB_REGION="eu-west-3",
    )
    stderr = open(tmp_path / "stderr.log", "wb")
    proc = subprocess.Popen(stub_command(), env=env, stdout=stderr, stderr=stderr, stdin=subprocess.DEVNULL)
    stderr.close()
    try:
        def is_ready():
            if proc.poll() is not None:
                return "exited"
            try:
                return json.loads(ready.read_text())
            except (OSError, ValueError):
                return None

        info = wait_until(is_ready, 60, what="ready file")
        assert info != "exited", (tmp_path / "stderr.log").read_text()
        assert info["azure_account"] == "envaccount"
        stub = Stub(name="env", proc=proc, data_dir=data, stderr_path=tmp_path / "stderr.log", s3=info["s3"],
                    azure=info["azure"], admin=info["admin"], azure_account="envaccount", region="eu-west-3",
                    s3_credentials=[("AKIAENVTWO", "secret-two")], azure_key=AZURE_KEY, argv=[])
        s3 = s3_client(stub)
        for key, size, seed in (("a.bin", 3 * 1024, 0), ("b.bin", 1000, 9)):
            got = s3.get_object(Bucket="envgen", Key=key)["Body"].read()
            assert sha256(got) == generated.sha256_of_generated("envgen", key, size, seed)
        assert s3.get_object(Bucket="envbucket", Key="f.txt")["Body"].read() == b"from the env-configured data dir"
        assert s3.get_bucket_location(Bucket="envbucket").get("LocationConstraint") == "eu-west-3"
        with pytest.raises(ClientError) as ei:
            s3_client(stub, access_key="AKIAENVTWO", secret_key="wrong").get_object(Bucket="envgen", Key="a.bin")
        assert ei.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        assert requests.get(f"{stub.s3}/envgen/a.bin", timeout=30).status_code == 403
        az = blob_service(stub)
        assert sha256(az.get_blob_client("envgen", "b.bin").download_blob().readall()) == (
            generated.sha256_of_generated("envgen", "b.bin", 1000, 9)
        )
        assert requests.get(stub.admin + "/healthz", timeout=30).status_code == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=15)
            assert rc in (0, -signal.SIGTERM), (rc, (tmp_path / "stderr.log").read_text())
        else:
            pytest.fail(f"stub exited early: {proc.returncode}\n{(tmp_path / 'stderr.log').read_text()}")


@pytest.mark.parametrize("args", [
    ["--generate", "no-equals-sign"],
    ["--generate", "gen/x=12XB"],
    ["--s3-credentials", "no-colon"],
    ["--azure-key", "not base64!"],
    ["--error-rate", "1.5"],
    ["--error-kinds", "meteor"],
    ["--s3-listen", "not-an-address"],
])
def test_bad_arguments_fail_fast(tmp_path, args):
    ready = tmp_path / "ready.json"
    argv = [*stub_command(), "--s3-listen", "127.0.0.1:0", "--azure-listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0", "--ready-file", str(ready), *args]
    # A later --s3-listen overrides the first one where the case sets it.
    proc = subprocess.run(argv, env=_clean_env(), capture_output=True, timeout=30)
    assert proc.returncode != 0, f"{args} was accepted; stderr: {proc.stderr.decode(errors='replace')}"
    assert proc.stderr.strip(), "a rejected argument must be explained on stderr"
    assert not ready.exists()


def test_help_lists_every_flag():
    out = subprocess.run([*stub_command(), "--help"], capture_output=True, timeout=30, env=_clean_env())
    assert out.returncode == 0
    text = out.stdout.decode()
    for flag in ("--data-dir", "--generate", "--s3-listen", "--azure-listen", "--admin-listen", "--ready-file",
                 "--region", "--s3-credentials", "--azure-account", "--azure-key", "--latency-ms", "--bandwidth",
                 "--error-rate", "--error-kinds"):
        assert flag in text, flag
        assert "TALON_STUB_" + flag[2:].upper().replace("-", "_") in text, flag


def test_the_stub_binary_is_an_alias_of_talon_origin():
    """`talon-origin-stub` stays as an alias: the same flags as `talon origin`."""
    if len(stub_command()) != 2:
        pytest.skip("TALON_ORIGIN_STUB_BIN names the binary under test")
    alias = str(pathlib.Path(stub_command()[0]).with_name("talon-origin-stub"))
    flags = []
    for argv in ([*stub_command(), "--help"], [alias, "--help"]):
        out = subprocess.run(argv, capture_output=True, timeout=30, env=_clean_env())
        assert out.returncode == 0, out.stderr
        # Only the alias answers --version (`talon --version` does for the subcommands).
        flags.append(sorted(set(re.findall(r"--[a-z0-9-]+", out.stdout.decode())) - {"--version"}))
    assert flags[0] == flags[1]
    assert "--data-dir" in flags[0]
