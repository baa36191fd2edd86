#!/usr/bin/env bash
# Checks the monitoring files in deploy/ with Prometheus's own tool (promtool, from
# Debian's prometheus package):
#   - the alert rules parse and their expressions are valid PromQL;
#   - the alert rules' unit tests pass (each alert fires on the series meant to raise
#     it and not on healthy ones);
#   - every query of the Grafana dashboard is valid PromQL once Grafana's variables are
#     replaced (each is checked as a recording rule).
# That each query names only exported metrics is gateway/tests/dashboards.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null; then
  echo "promtool is required: apt-get install prometheus" >&2
  exit 1
fi

promtool check rules deploy/prometheus/talon-alerts.yml
(cd deploy/prometheus && promtool test rules talon-alerts.test.yml)

rules=$(mktemp --suffix=.yml)
trap 'rm -f "$rules"' EXIT
python3 - deploy/grafana/talon.json "$rules" <<'PY'
import json, sys

dashboard = json.load(open(sys.argv[1]))
exprs = []

def walk(v):
    if isinstance(v, dict):
        if isinstance(v.get("expr"), str):
            exprs.append(v["expr"])
        for x in v.values():
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)

walk(dashboard)
if len(exprs) < 20:
    sys.exit(f"only {len(exprs)} queries in the dashboard")
# Grafana's variables, replaced by what they stand for at query time.
subst = {"$__rate_interval": "1m", "$gateway": ".*", "$worker": ".*"}
with open(sys.argv[2], "w") as out:
    out.write("groups:\n  - name: dashboard-queries\n    rules:\n")
    for i, e in enumerate(exprs):
        for k, v in subst.items():
            e = e.replace(k, v)
        if "$" in e:
            sys.exit(f"an unknown Grafana variable in: {e}")
        out.write(f"      - record: talon_dashboard_query_{i}\n        expr: {json.dumps(e)}\n")
print(f"{len(exprs)} dashboard queries")
PY
promtool check rules "$rules"
