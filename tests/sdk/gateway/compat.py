"""What the gateway suite actually served, for docs/gateway.md's compatibility table.

Before a deployment stops, its gateway's ``talon_gateway_requests_total`` is read and,
per front, the requests each operation answered (and failed) are written to
``target/compat/<deployment>.json`` with the origin that front reads: the stub's S3 or
Azure API, moto's S3 server or Azurite. ``scripts/compat_table.py`` turns the files into
the table (``--write``) or checks the table against them (``--check``, in the test
command), so the table says what ran, not what someone wrote.
"""

from __future__ import annotations

import json
import pathlib

from conftest import read_metrics

OUT = pathlib.Path(__file__).resolve().parents[3] / "target" / "compat"
REQUESTS = "talon_gateway_requests_total"


def record(front, deployment: str, origin_by_protocol: dict) -> None:
    """Writes what ``front`` served; ``origin_by_protocol`` names the origin each front
    (``s3``, ``azure``) reads. Best effort: a gateway that cannot be read is left out."""
    try:
        metrics = read_metrics(front)
    except Exception:  # noqa: BLE001 - the deployment may already be gone
        return
    served = {}
    for (name, labels), value in metrics.items():
        if name != REQUESTS:
            continue
        labels = dict(labels)
        protocol, operation = labels.get("protocol"), labels.get("operation")
        if protocol not in origin_by_protocol or not operation or operation == "Unknown":
            continue
        key = f"{protocol}|{operation}|{origin_by_protocol[protocol]}"
        entry = served.setdefault(key, {"ok": 0, "failed": 0})
        entry["failed" if labels.get("outcome") == "failed" else "ok"] += int(value)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{deployment}.json").write_text(json.dumps(served, indent=1, sort_keys=True) + "\n")
