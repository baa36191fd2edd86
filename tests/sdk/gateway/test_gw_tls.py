"""TLS on the fronts: `talon up --tls-cert/--tls-key` with a certificate this test makes
(openssl, for 127.0.0.1), and unmodified boto3 and azure-storage-blob verifying it."""

from __future__ import annotations

import hashlib
import ssl
import socket
import subprocess

import boto3
import pytest
import requests
from azure.storage.blob import BlobServiceClient
from botocore.config import Config

from . import harness


@pytest.fixture(scope="module")
def tls_up(tmp_path_factory, _isolated_client_env):
    work = tmp_path_factory.mktemp("talon-up-tls")
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    front = harness.start_talon_up("tls", work, auth=True, workers=1,
                                   extra=["--tls-cert", str(cert), "--tls-key", str(key)])
    yield front, cert
    harness.stop_all(front.procs)


def test_boto3_over_https_verifies_the_certificate(tls_up):
    front, cert = tls_up
    assert front.s3.startswith("https://"), front.s3
    s3 = boto3.session.Session(
        aws_access_key_id=front.access_key, aws_secret_access_key=front.secret_key, region_name=front.region,
    ).client("s3", endpoint_url=front.s3, verify=str(cert),
             config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
    body = b"over TLS " * 1000
    s3.put_object(Bucket="demo", Key="tls.bin", Body=body)
    got = s3.get_object(Bucket="demo", Key="tls.bin", Range="bytes=9-8999")["Body"].read()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body[9:9000]).hexdigest()
    assert (front.data_dir / "demo" / "tls.bin").read_bytes() == body


def test_azure_sdk_over_https_verifies_the_certificate(tls_up):
    front, cert = tls_up
    assert front.blob_endpoint.startswith("https://"), front.blob_endpoint
    conn = (f"DefaultEndpointsProtocol=https;AccountName={front.azure_account};"
            f"AccountKey={harness.CLIENT_AZURE_KEY};BlobEndpoint={front.blob_endpoint};")
    svc = BlobServiceClient.from_connection_string(conn, connection_verify=str(cert), retry_total=0)
    blob = svc.get_blob_client("demo", "tls-azure.txt")
    blob.upload_blob(b"azure over TLS", overwrite=True)
    assert blob.download_blob().readall() == b"azure over TLS"


def test_untrusted_and_plain_clients_are_refused(tls_up):
    front, _ = tls_up
    # Without the certificate a client refuses the server...
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{front.s3}/demo/hello.txt", timeout=10)
    # ... and plain HTTP to the TLS port is told so in plain HTTP (it got a raw TLS
    # alert before 2026-12-05, which curl printed as "HTTP/0.9"), and served nothing.
    port = int(front.s3.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /demo/hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(15)
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    assert data.startswith(b"HTTP/1.1 400"), data[:80]
    assert b"This port speaks HTTPS" in data and b"Hello from Talon" not in data, data
    # The certificate is the one configured (the handshake really is TLS).
    ctx = ssl.create_default_context(cafile=str(tls_up[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
