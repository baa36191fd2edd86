#!/usr/bin/env python3
"""The cluster secret, for the scripts that start a Talon cluster (bench_ab.py,
memory_footprint.py, dataplane_loadtest.sh): a fresh secret per run, the signature of a
coordinator API request, and the data plane's Hello exchange.

Every process of a cluster shares one secret (`--cluster-secret-file` or
`TALON_CLUSTER_SECRET`, at least 16 bytes, surrounding whitespace not part of it). The
formulas are those of core/src/cluster_auth.rs:

    key       = HMAC-SHA256(secret, "talon cluster key v1")
    signature = HMAC-SHA256(key, "talon api v1\\n{role}\\n{METHOD}\\n{path}\\n{unix seconds}\\n{sha256 hex of body}")
    header    = "x-talon-auth: {role} {unix seconds} {signature hex}"

From a shell (the secret from TALON_CLUSTER_SECRET):

    python3 scripts/talon_cluster.py new-secret             # prints a fresh secret
    python3 scripts/talon_cluster.py sign GET /v1/members   # prints the x-talon-auth value
        [--role reader|worker|ingester|admin] [--body-file PATH]

Only the standard library is used.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
import socket
import struct
import sys
import time

SECRET_ENV = "TALON_CLUSTER_SECRET"
SECRET_FILE_ENV = "TALON_CLUSTER_SECRET_FILE"
AUTH_HEADER = "x-talon-auth"
MIN_SECRET_LEN = 16

# Role names and their byte on the data plane (core/src/cluster_auth.rs, `Role`).
ROLES = {"reader": 1, "worker": 2, "ingester": 3, "admin": 4}

# What Rust's `trim_ascii` trims (not the vertical tab that bytes.strip() also takes).
_ASCII_WHITESPACE = b" \t\n\x0c\r"


def new_secret() -> str:
    """A fresh random secret: 32 random bytes as 64 hex characters."""
    return secrets.token_hex(32)


def child_env(secret: str, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment for a cluster process: `base` (default os.environ) with
    TALON_CLUSTER_SECRET set to `secret`. TALON_CLUSTER_SECRET_FILE is dropped, since a
    secret file takes precedence over the variable and would give the children another
    secret than the one this script signs with."""
    env = dict(os.environ if base is None else base, **extra)
    env.pop(SECRET_FILE_ENV, None)
    env[SECRET_ENV] = secret
    return env


def _secret_bytes(secret: str | bytes) -> bytes:
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    raw = raw.strip(_ASCII_WHITESPACE)
    if len(raw) < MIN_SECRET_LEN:
        raise ValueError(f"a cluster secret needs at least {MIN_SECRET_LEN} bytes, this one has {len(raw)}")
    return raw


def cluster_key(secret: str | bytes) -> bytes:
    """The HMAC key every proof and signature uses, derived from the secret."""
    return hmac.new(_secret_bytes(secret), b"talon cluster key v1", hashlib.sha256).digest()


def _role_name(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (known: {', '.join(ROLES)})")
    return role


def api_signature(secret: str | bytes, role: str, method: str, path: str, unix_seconds: int,
                  body: bytes = b"") -> str:
    """The hex signature of a coordinator API request (`path` without the query)."""
    text = (f"talon api v1\n{_role_name(role)}\n{method}\n{path}\n{unix_seconds}\n"
            f"{hashlib.sha256(body).hexdigest()}")
    return hmac.new(cluster_key(secret), text.encode(), hashlib.sha256).hexdigest()


def auth_header(secret: str | bytes, method: str, path: str, body: bytes = b"", role: str = "reader",
                unix_seconds: int | None = None) -> str:
    """The value of the x-talon-auth header for a request signed now (or at
    `unix_seconds`). The coordinator accepts it within 300 s of its clock."""
    ts = int(time.time()) if unix_seconds is None else int(unix_seconds)
    return f"{role} {ts} {api_signature(secret, role, method.upper(), path, ts, body)}"


def auth_headers(secret: str | bytes, method: str, path: str, body: bytes = b"",
                 role: str = "reader") -> dict[str, str]:
    """{AUTH_HEADER: auth_header(...)}, to pass as a request's headers."""
    return {AUTH_HEADER: auth_header(secret, method, path, body, role)}


# ---- the data plane's Hello exchange (core/src/wire/mod.rs, "Conversation") -------------

_MAGIC, _VERSION, _HELLO_VERSION = 0x544C, 1, 1
_HELLO, _HELLO_PROOF, _HELLO_REPLY, _WELCOME, _ERROR = 0x05, 0x06, 0x85, 0x86, 0xFF
_HEADER = struct.Struct(">HBBHHII")  # magic, version, type, flags, reserved, request id, payload length
_WORKER_LABEL = b"talon hello v1 worker"
_PEER_LABEL = b"talon hello v1 peer\0\0"


def hello_proof(secret: str | bytes, side: str, role: str, peer_nonce: bytes, worker_nonce: bytes) -> bytes:
    """The proof one side ("worker" or "peer") of a Hello sends."""
    label = {"worker": _WORKER_LABEL, "peer": _PEER_LABEL}[side]
    msg = label + bytes([ROLES[_role_name(role)]]) + peer_nonce + worker_nonce
    return hmac.new(cluster_key(secret), msg, hashlib.sha256).digest()


def _frame(kind: int, payload: bytes, request_id: int = 0) -> bytes:
    return _HEADER.pack(_MAGIC, _VERSION, kind, 0, 0, request_id, len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the worker closed the connection during the Hello exchange")
        out += chunk
    return bytes(out)


def _read_control_frame(sock: socket.socket) -> tuple[int, bytes]:
    magic, _, kind, _, _, _, length = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if magic != _MAGIC or length > 4096:
        raise ConnectionError(f"the worker sent a frame that is not a Hello reply (type {kind:#x}, {length} bytes)")
    return kind, _recv_exact(sock, length)


def _error_text(payload: bytes) -> str:
    if len(payload) < 4:
        return "an error"
    code, n = struct.unpack(">HH", payload[:4])
    return f"error {code}: {payload[4:4 + n].decode(errors='replace')}"


def hello(sock: socket.socket, secret: str | bytes, role: str = "reader") -> None:
    """Authenticates a fresh, blocking connection to a worker's data plane as `role`:
    Hello, the worker's proof checked, HelloProof, Welcome. Reads nothing after Welcome.
    Raises ConnectionError when the worker refuses or cannot prove the secret."""
    peer_nonce = secrets.token_bytes(16)
    sock.sendall(_frame(_HELLO, bytes([_HELLO_VERSION, ROLES[_role_name(role)]]) + peer_nonce))
    kind, payload = _read_control_frame(sock)
    if kind == _ERROR:
        raise ConnectionError(f"the worker refused the Hello: {_error_text(payload)}")
    if kind != _HELLO_REPLY or len(payload) != 48:
        raise ConnectionError(f"{kind:#x} of {len(payload)} bytes instead of HelloReply")
    worker_nonce, worker_proof = payload[:16], payload[16:]
    if not hmac.compare_digest(worker_proof, hello_proof(secret, "worker", role, peer_nonce, worker_nonce)):
        raise ConnectionError("the worker cannot prove the cluster secret: not a member of this cluster")
    sock.sendall(_frame(_HELLO_PROOF, hello_proof(secret, "peer", role, peer_nonce, worker_nonce)))
    kind, payload = _read_control_frame(sock)
    if kind == _ERROR:
        raise ConnectionError(f"the worker refused the Hello proof: {_error_text(payload)}")
    if kind != _WELCOME:
        raise ConnectionError(f"{kind:#x} instead of Welcome")


# ---- command line -------------------------------------------------------------------------


def _main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("new-secret", help="print a fresh random cluster secret")
    sign = sub.add_parser("sign", help=f"print the {AUTH_HEADER} value of a request (secret from {SECRET_ENV})")
    sign.add_argument("method")
    sign.add_argument("path", help="the URL path, without the query: /v1/members")
    sign.add_argument("--role", default="reader", choices=list(ROLES))
    sign.add_argument("--body-file", help="the request body (default: empty)")
    args = p.parse_args()
    if args.command == "new-secret":
        print(new_secret())
        return 0
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        print(f"talon_cluster: {SECRET_ENV} is not set", file=sys.stderr)
        return 2
    body = b""
    if args.body_file:
        with open(args.body_file, "rb") as f:
            body = f.read()
    try:
        print(auth_header(secret, args.method, args.path, body, args.role))
    except ValueError as e:
        print(f"talon_cluster: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main())
