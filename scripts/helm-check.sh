#!/usr/bin/env bash
# helm-check: lint and render the Helm chart (deploy/helm/smsgw) for several
# value sets; for each valid render, internal/helmcheck asserts the replica
# rules and runs `smsgw check-config` on the smsgw.yaml the render puts in its
# ConfigMap, with the SMSGW_* environment its Deployment would give the
# container (the Secret through envFrom, plus literal env entries). The chart
# can therefore never render a configuration the binary refuses. Renders that
# must be refused are checked to fail with the chart's own message.
#
# Helm is built from its Go module (no Debian package) by
# scripts/ensure-deps.sh and cached under ${TMPDIR:-/tmp}/smsgw-helm-<version>/helm;
# HELM=/path/to/helm overrides.
# Usage: scripts/helm-check.sh   (or: make helm-check)
set -euo pipefail
# go.mod's toolchain, fetched from the module proxy when the installed go is older.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHART=$ROOT/deploy/helm/smsgw
WORK=$(mktemp -d "${TMPDIR:-/tmp}/helm-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fails=0
pass() { printf 'ok    %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; fails=$((fails + 1)); }

# --- helm -------------------------------------------------------------------
HELM=$(bash "$ROOT/scripts/ensure-deps.sh" helm | sed -n 's/^ensure-deps: helm at //p')
[ -x "$HELM" ] || { echo "helm-check: no helm" >&2; exit 1; }
echo "helm: $("$HELM" version --short 2>/dev/null || "$HELM" version)"

# --- smsgw and the render checker ------------------------------------------
cd "$ROOT"
go build -o "$WORK/smsgw" ./cmd/smsgw
# helmcheck (internal/helmcheck) reads one `helm template` output, checks the
# Kubernetes objects and runs smsgw check-config on the configuration.
go build -o "$WORK/helmcheck" ./internal/helmcheck
RC=$WORK/helmcheck

# --- cases ------------------------------------------------------------------
n=0
# valid NAME RENDERCHECK-ARGS... -- HELM-ARGS...
valid() {
	local name=$1
	shift
	local rc_args=()
	while [ "$1" != "--" ]; do rc_args+=("$1"); shift; done
	shift
	n=$((n + 1))
	local dir=$WORK/case$n
	mkdir -p "$dir"
	if ! "$HELM" lint "$CHART" --strict "$@" >"$dir/lint.out" 2>&1; then
		fail "$name: helm lint"; sed 's/^/      /' "$dir/lint.out"; return
	fi
	if ! "$HELM" template smsgw "$CHART" "$@" >"$dir/rendered.yaml" 2>"$dir/template.err"; then
		fail "$name: helm template"; sed 's/^/      /' "$dir/template.err"; return
	fi
	if "$RC" -rendered "$dir/rendered.yaml" -smsgw "$WORK/smsgw" -out "$dir" "${rc_args[@]}" >"$dir/check.out" 2>&1; then
		pass "$name"; cat "$dir/check.out"
	else
		fail "$name"; sed 's/^/      /' "$dir/check.out"
	fi
}

# refused NAME "EXPECTED MESSAGE" HELM-ARGS...: the render must fail, saying so.
refused() {
	local name=$1 want=$2
	shift 2
	local out
	if out=$("$HELM" template smsgw "$CHART" "$@" 2>&1); then
		fail "$name: rendered, but must be refused"
	elif grep -qF -- "$want" <<<"$out"; then
		pass "$name: refused: $(grep -F -- "$want" <<<"$out" | head -1 | sed 's/^Error: execution error at ([^)]*): //; s/^ *//')"
	else
		fail "$name: refused without \"$want\""; sed 's/^/      /' <<<"$out"
	fi
}

# caught NAME "EXPECTED" RENDERCHECK-ARGS... -- HELM-ARGS...: helm renders it,
# and the check must refuse it (proves check-config really runs).
caught() {
	local name=$1 want=$2
	shift 2
	local rc_args=()
	while [ "$1" != "--" ]; do rc_args+=("$1"); shift; done
	shift
	n=$((n + 1))
	local dir=$WORK/case$n
	mkdir -p "$dir"
	if ! "$HELM" template smsgw "$CHART" "$@" >"$dir/rendered.yaml" 2>"$dir/template.err"; then
		fail "$name: helm template"; sed 's/^/      /' "$dir/template.err"; return
	fi
	if "$RC" -rendered "$dir/rendered.yaml" -smsgw "$WORK/smsgw" -out "$dir" "${rc_args[@]}" >"$dir/check.out" 2>&1; then
		fail "$name: check-config accepted it"
	elif grep -qF -- "$want" "$dir/check.out"; then
		pass "$name: caught: $(grep -F -- "$want" "$dir/check.out" | head -1 | sed 's/^ *| *//')"
	else
		fail "$name: caught without \"$want\""; sed 's/^/      /' "$dir/check.out"
	fi
}

CI=$CHART/ci
valid "embedded (one replica, PVC, http provider)" -mode embedded -replicas 1 -says "regions JP, GB" \
	-says "at most 5 OTPs per number" -- -f "$CI/embedded-values.yaml"
valid "redis, 3 replicas, ServiceMonitor" -mode redis -replicas 3 -- -f "$CI/redis-values.yaml"
valid "redis, 3 replicas, Grafana dashboard ConfigMap" -mode redis -replicas 3 -grafana -- -f "$CI/redis-values.yaml" \
	--set metrics.grafanaDashboard.enabled=true
valid "redis cluster, HPA 2..20, readiness on /healthz" -mode redis -hpa -readiness /healthz -- -f "$CI/redis-cluster-values.yaml"
valid "redis, 3 replicas, operator endpoints on admin.listen :9191" -mode redis -replicas 3 -admin-port 9191 -- -f "$CI/redis-values.yaml" \
	--set config.admin.listen=:9191
valid "embedded, operator endpoints on the producers' port (admin.listen \"\")" -mode embedded -replicas 1 -admin-port 0 -- \
	-f "$CI/embedded-values.yaml" --set config.admin.listen=
valid "embedded, no NetworkPolicy" -mode embedded -replicas 1 -network-policy=false -- \
	-f "$CI/embedded-values.yaml" --set networkPolicy.enabled=false
valid "redis, producers' port only from the producers' namespace" -mode redis -replicas 3 -- -f "$CI/redis-values.yaml" \
	--set 'networkPolicy.producers[0].namespaceSelector.matchLabels.team=producers'
valid "redis, 3 replicas, Recreate for a format upgrade" -mode redis -replicas 3 -strategy Recreate -- -f "$CI/redis-values.yaml" \
	--set updateStrategy=Recreate
valid "redis sentinel, 2 replicas" -mode redis -replicas 2 -- -f "$CI/sentinel-values.yaml"
valid "twilio (embedded), protection.countries all" -mode embedded -replicas 1 -says "all regions" -- -f "$CI/twilio-values.yaml"
valid "existingSecret (redis, 2 replicas)" -mode redis -replicas 2 \
	-existing-secret 'SMSGW_PRODUCERS=[{name: login, key: login-key-0123456789abcdef, classes: [otp], rate: 50, burst: 100}]' \
	-existing-secret 'SMSGW_ADMIN_KEY=admin-key-0123456789abcdef' -- \
	-f "$CI/redis-values.yaml" --set replicaCount=2 --set existingSecret=smsgw-keys
valid "credential rotation under way (embedded: previous producer, admin and receipt keys)" -mode embedded -replicas 1 \
	-says "rotation: under way" -says "producers[0] (login).previous_key" -says "producers[1] (notify-worker).previous_key_sha256" \
	-says "admin.previous_key" -says "provider.previous_receipt_secret" -- \
	-f "$CI/embedded-values.yaml" -f "$CI/rotation-values.yaml"
valid "extraEnv override (embedded, shutdown_timeout 45s)" -mode embedded -replicas 1 -- \
	-f "$CI/embedded-values.yaml" --set config.dispatch.shutdown_timeout=45s \
	--set 'extraEnv[0].name=SMSGW_LOG_LEVEL' --set 'extraEnv[0].value=debug'

refused "no protection.countries" "config.protection.countries must be set" \
	-f "$CI/embedded-values.yaml" --set 'config.protection.countries=null'
refused "protection.countries a word other than all" 'config.protection.countries is "any"' \
	-f "$CI/embedded-values.yaml" --set config.protection.countries=any
refused "embedded + replicaCount 3" "Embedded mode runs EXACTLY ONE replica" \
	-f "$CI/embedded-values.yaml" --set replicaCount=3
refused "embedded + HPA" "Embedded mode runs EXACTLY ONE replica" \
	-f "$CI/embedded-values.yaml" --set autoscaling.enabled=true
refused "redis + max_senders 2 + replicaCount 3" "config.limits.max_senders is 2 but up to 4 smsgw pods" \
	-f "$CI/redis-values.yaml" --set config.limits.max_senders=2
refused "redis + max_senders 3 + replicaCount 3 + maxSurge 1" "config.limits.max_senders is 3 but up to 4" \
	-f "$CI/redis-values.yaml" --set config.limits.max_senders=3
refused "redis + HPA max 23 + surge 1 > max_senders 23" "autoscaling.maxReplicas 23" \
	-f "$CI/redis-cluster-values.yaml" --set autoscaling.maxReplicas=23
refused "secret in the ConfigMap (config.admin.key)" "config.admin.key / key_sha256 must not be set" \
	-f "$CI/embedded-values.yaml" --set config.admin.key=admin-key-0123456789abcdef
refused "previous admin key in the ConfigMap" "config.admin.previous_key / previous_key_sha256 must not be set" \
	-f "$CI/embedded-values.yaml" --set config.admin.previous_key=admin-key-0123456789abcdef
refused "unquoted all-digit previous_key_sha256" "secrets.producers[0].previous_key_sha256 must be a string: quote it" \
	-f "$CI/embedded-values.yaml" --set 'secrets.producers[0].previous_key_sha256=1234'
refused "ServiceMonitor with the admin port closed to all" "list your Prometheus under networkPolicy.admin" \
	-f "$CI/redis-values.yaml" --set networkPolicy.admin=null
refused "unknown updateStrategy" "updateStrategy must be RollingUpdate or Recreate" \
	-f "$CI/redis-values.yaml" --set updateStrategy=BlueGreen
refused "no producers" "secrets.producers must list at least one producer" \
	-f "$CI/embedded-values.yaml" --set secrets.producers=null
refused "unquoted all-digit key_sha256" "must be a string: quote it" \
	-f "$CI/embedded-values.yaml" --set 'secrets.producers[0].key_sha256=1234'
refused "terminationGracePeriodSeconds too short" "terminationGracePeriodSeconds 20 must exceed" \
	-f "$CI/embedded-values.yaml" --set terminationGracePeriodSeconds=20

caught "config the binary refuses (burst 20) is caught by check-config" "limits.burst: target_rps 90 + burst 20 exceeds" \
	-mode embedded -replicas 1 -- -f "$CI/embedded-values.yaml" --set config.limits.burst=20
caught "a previous key equal to the current one is caught by check-config" "admin.previous_key: must differ from the current key" \
	-mode embedded -replicas 1 -- -f "$CI/embedded-values.yaml" -f "$CI/rotation-values.yaml" \
	--set secrets.adminPreviousKey=admin-key-new-0123456789abcdef
caught "unknown key in config is caught by check-config" "field bogus not found" \
	-mode embedded -replicas 1 -- -f "$CI/embedded-values.yaml" --set config.bogus=1

echo
if [ "$fails" -gt 0 ]; then
	echo "helm-check: $fails failure(s)"
	exit 1
fi
echo "helm-check: all cases passed"
