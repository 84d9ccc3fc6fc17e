#!/usr/bin/env bash
# helm-check: lint and render the Helm chart (deploy/helm/smsgw) for several
# value sets, assert the replica rules, and run `smsgw check-config` on the
# smsgw.yaml each valid render puts in its ConfigMap, with the SMSGW_*
# environment its Deployment would give the container (the Secret through
# envFrom, plus literal env entries). The chart can therefore never render a
# configuration the binary refuses.
#
# Helm is built from its Go module (no Debian package) and cached under
# ${TMPDIR:-/tmp}/smsgw-helm-<version>/helm; HELM=/path/to/helm overrides.
# Usage: scripts/helm-check.sh   (or: make helm-check)
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHART=$ROOT/deploy/helm/smsgw
CACHE=${TMPDIR:-/tmp}/smsgw-helm-$HELM_VERSION
WORK=$(mktemp -d "${TMPDIR:-/tmp}/helm-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fails=0
pass() { printf 'ok    %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; fails=$((fails + 1)); }

# --- helm -------------------------------------------------------------------
HELM=${HELM:-$CACHE/helm}
if [ ! -x "$HELM" ]; then
	echo "building helm $HELM_VERSION into $CACHE (first run only; takes a few minutes)"
	mkdir -p "$CACHE"
	(cd "$WORK" && GOFLAGS=-mod=mod GOBIN="$CACHE" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
	HELM=$CACHE/helm
fi
echo "helm: $("$HELM" version --short 2>/dev/null || "$HELM" version)"

# --- smsgw and the render checker ------------------------------------------
cd "$ROOT"
go build -o "$WORK/smsgw" ./cmd/smsgw

# rendercheck reads one `helm template` output, checks the Kubernetes objects
# and runs check-config. It is built from a temporary file with the
# repository's own module (its yaml dependency); nothing is written to the
# repository.
mkdir -p "$WORK/rendercheck"
cat >"$WORK/rendercheck/main.go" <<'GO'
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

type obj = map[string]any

func get(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

func str(o any, path ...string) string {
	v := get(o, path...)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(o any, path ...string) []any {
	l, _ := get(o, path...).([]any)
	return l
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	rendered := flag.String("rendered", "", "helm template output")
	bin := flag.String("smsgw", "", "smsgw binary")
	out := flag.String("out", "", "directory for the extracted smsgw.yaml")
	mode := flag.String("mode", "", "expected mode: embedded or redis")
	replicas := flag.Int("replicas", -1, "expected spec.replicas (-1: absent, HPA)")
	readiness := flag.String("readiness", "/readyz", "expected readiness path")
	hpa := flag.Bool("hpa", false, "expect a HorizontalPodAutoscaler")
	grafana := flag.Bool("grafana", false, "expect the Grafana dashboard ConfigMap")
	var extraEnv, extraSecret multi
	flag.Var(&extraEnv, "env", "KEY=VALUE the container gets besides the rendered Secret (repeatable)")
	flag.Var(&extraSecret, "existing-secret", "KEY=VALUE of the existingSecret the release refers to (repeatable)")
	flag.Parse()
	if err := run(*rendered, *bin, *out, *mode, *replicas, *readiness, *hpa, *grafana, extraEnv, extraSecret); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(rendered, bin, out, mode string, replicas int, readiness string, wantHPA, wantGrafana bool, extraEnv, extraSecret []string) error {
	data, err := os.ReadFile(rendered)
	if err != nil {
		return err
	}
	byKind := map[string][]obj{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o obj
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("rendered YAML: %w", err)
		}
		if o != nil {
			byKind[str(o, "kind")] = append(byKind[str(o, "kind")], o)
		}
	}
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	one := func(kind string) obj {
		if n := len(byKind[kind]); n != 1 {
			bad("want exactly one %s, got %d", kind, n)
			return nil
		}
		return byKind[kind][0]
	}

	// The Grafana dashboard's ConfigMap (optional) is checked apart from
	// the one holding smsgw.yaml.
	isDashboard := func(c obj) bool { _, ok := get(c, "data", "smsgw.json").(string); return ok }
	var dashboards []obj
	for _, c := range byKind["ConfigMap"] {
		if isDashboard(c) {
			dashboards = append(dashboards, c)
		}
	}
	byKind["ConfigMap"] = slices.DeleteFunc(byKind["ConfigMap"], isDashboard)
	switch {
	case wantGrafana && len(dashboards) != 1:
		bad("want one Grafana dashboard ConfigMap, got %d", len(dashboards))
	case !wantGrafana && len(dashboards) != 0:
		bad("the Grafana dashboard ConfigMap is rendered though not enabled")
	case wantGrafana:
		var d struct {
			UID    string `json:"uid"`
			Panels []any  `json:"panels"`
		}
		if str(dashboards[0], "metadata", "labels", "grafana_dashboard") != "1" {
			bad("the dashboard ConfigMap lacks the sidecar label grafana_dashboard: \"1\"")
		}
		if err := json.Unmarshal([]byte(str(dashboards[0], "data", "smsgw.json")), &d); err != nil || d.UID != "smsgw" || len(d.Panels) == 0 {
			bad("the dashboard ConfigMap's smsgw.json is not the smsgw dashboard (uid %q, %d panels, %v)", d.UID, len(d.Panels), err)
		}
	}
	cm, dep := one("ConfigMap"), one("Deployment")
	if cm == nil || dep == nil {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	cfgText := str(cm, "data", "smsgw.yaml")
	if cfgText == "" {
		return errors.New("ConfigMap has no data.smsgw.yaml")
	}
	var cfg obj
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		return fmt.Errorf("smsgw.yaml in the ConfigMap: %w", err)
	}

	// Replica rule and strategy.
	spec := get(dep, "spec")
	gotReplicas, hasReplicas := get(spec, "replicas").(int)
	switch {
	case replicas < 0 && hasReplicas:
		bad("Deployment sets replicas %d; with an HPA it must leave them to the HPA", gotReplicas)
	case replicas >= 0 && (!hasReplicas || gotReplicas != replicas):
		bad("Deployment replicas = %v, want %d", get(spec, "replicas"), replicas)
	}
	strategy := str(spec, "strategy", "type")
	pod := get(spec, "template", "spec")
	containers := list(pod, "containers")
	if len(containers) != 1 {
		return fmt.Errorf("want one container, got %d", len(containers))
	}
	c := containers[0]
	redisAddr := strings.TrimSpace(strings.ReplaceAll(str(cfg, "redis", "addr"), ",", ""))
	switch mode {
	case "embedded":
		if redisAddr != "" {
			bad("embedded render has redis.addr %q", redisAddr)
		}
		if strategy != "Recreate" {
			bad("embedded mode needs strategy Recreate, got %q", strategy)
		}
		if len(byKind["PodDisruptionBudget"]) != 0 {
			bad("embedded mode must not render a PodDisruptionBudget")
		}
		if len(byKind["HorizontalPodAutoscaler"]) != 0 {
			bad("embedded mode must not render a HorizontalPodAutoscaler")
		}
		storePath := str(cfg, "store", "path")
		mounted := false
		for _, m := range list(c, "volumeMounts") {
			if str(m, "mountPath") == storePath && str(m, "name") == "data" {
				mounted = true
			}
		}
		if !mounted {
			bad("store.path %q is not the mount path of the data volume", storePath)
		}
		for _, v := range list(pod, "volumes") {
			if str(v, "name") == "data" && get(v, "persistentVolumeClaim") == nil {
				bad("the data volume is not a PersistentVolumeClaim")
			}
		}
	case "redis":
		if redisAddr == "" {
			bad("redis render has an empty redis.addr")
		}
		if strategy != "RollingUpdate" {
			bad("redis mode: strategy %q, want RollingUpdate", strategy)
		}
		if len(byKind["PodDisruptionBudget"]) != 1 {
			bad("redis mode: want one PodDisruptionBudget, got %d", len(byKind["PodDisruptionBudget"]))
		}
		if len(byKind["PersistentVolumeClaim"]) != 0 {
			bad("redis mode must not render a PersistentVolumeClaim")
		}
	default:
		return fmt.Errorf("-mode %q", mode)
	}
	if got := len(byKind["HorizontalPodAutoscaler"]); wantHPA != (got == 1) {
		bad("HorizontalPodAutoscaler: got %d, want hpa=%v", got, wantHPA)
	}

	// Probes, shutdown, security.
	if p := str(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		bad("liveness path %q, want /healthz", p)
	}
	if p := str(c, "readinessProbe", "httpGet", "path"); p != readiness {
		bad("readiness path %q, want %s", p, readiness)
	}
	shutdown := 20 * time.Second
	if s := str(cfg, "dispatch", "shutdown_timeout"); s != "" {
		if shutdown, err = time.ParseDuration(s); err != nil {
			bad("dispatch.shutdown_timeout: %v", err)
		}
	}
	preStop := 0
	if s, ok := get(c, "lifecycle", "preStop", "sleep", "seconds").(int); ok {
		preStop = s
	} else if cmd := list(c, "lifecycle", "preStop", "exec", "command"); len(cmd) == 2 {
		fmt.Sscan(fmt.Sprint(cmd[1]), &preStop)
	} else {
		bad("no preStop sleep")
	}
	grace, _ := get(pod, "terminationGracePeriodSeconds").(int)
	if need := time.Duration(preStop)*time.Second + shutdown + 2*time.Second; time.Duration(grace)*time.Second <= need {
		bad("terminationGracePeriodSeconds %d <= preStop %ds + shutdown_timeout %s + 2s", grace, preStop, shutdown)
	}
	if get(pod, "securityContext", "runAsNonRoot") != true {
		bad("pod securityContext.runAsNonRoot is not true")
	}
	if get(c, "securityContext", "readOnlyRootFilesystem") != true {
		bad("container readOnlyRootFilesystem is not true")
	}
	if str(spec, "template", "metadata", "annotations", "checksum/config") == "" {
		bad("no checksum/config annotation on the pod template")
	}

	// The environment: envFrom secretRef (the rendered Secret or the
	// existing one) plus literal env entries.
	env := map[string]string{}
	secrets := map[string]map[string]string{}
	for _, s := range byKind["Secret"] {
		kv := map[string]string{}
		if d, ok := get(s, "stringData").(map[string]any); ok {
			for k, v := range d {
				kv[k] = fmt.Sprint(v)
			}
		}
		if d, ok := get(s, "data").(map[string]any); ok {
			for k, v := range d {
				b, err := base64.StdEncoding.DecodeString(fmt.Sprint(v))
				if err != nil {
					return fmt.Errorf("secret data %s: %w", k, err)
				}
				kv[k] = string(b)
			}
		}
		secrets[str(s, "metadata", "name")] = kv
	}
	for _, ef := range list(c, "envFrom") {
		name := str(ef, "secretRef", "name")
		kv, ok := secrets[name]
		if !ok {
			if len(extraSecret) == 0 {
				bad("envFrom refers to Secret %q, which the release does not render", name)
			}
			kv = map[string]string{}
			for _, e := range extraSecret {
				k, v, _ := strings.Cut(e, "=")
				kv[k] = v
			}
		}
		for k, v := range kv {
			env[k] = v
		}
	}
	for _, e := range list(c, "env") {
		if v := get(e, "value"); v != nil {
			env[str(e, "name")] = fmt.Sprint(v)
		}
	}
	for _, e := range extraEnv {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	for k, v := range env {
		if strings.HasPrefix(k, "SMSGW_") && len(v) >= 8 && k != "SMSGW_PRODUCERS" && strings.Contains(cfgText, v) {
			bad("the value of secret %s appears in the ConfigMap", k)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}

	path := filepath.Join(out, "smsgw.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		return err
	}
	names := make([]string, 0, len(env))
	cmdEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		names = append(names, k)
		cmdEnv = append(cmdEnv, k+"="+v)
	}
	sort.Strings(names)
	fmt.Printf("      env from the Deployment: %s\n", strings.Join(names, " "))
	cmd := exec.Command(bin, "check-config", "--config", path)
	cmd.Env = cmdEnv
	o, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(o), "\n"), "\n") {
		fmt.Printf("      | %s\n", l)
	}
	if err != nil {
		return fmt.Errorf("smsgw check-config refused the rendered configuration: %w", err)
	}
	return nil
}
GO
go build -o "$WORK/rendercheck/rendercheck" "$WORK/rendercheck/main.go"
RC=$WORK/rendercheck/rendercheck

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
valid "embedded (one replica, PVC, http provider)" -mode embedded -replicas 1 -- -f "$CI/embedded-values.yaml"
valid "redis, 3 replicas, ServiceMonitor" -mode redis -replicas 3 -- -f "$CI/redis-values.yaml"
valid "redis, 3 replicas, Grafana dashboard ConfigMap" -mode redis -replicas 3 -grafana -- -f "$CI/redis-values.yaml" \
	--set metrics.grafanaDashboard.enabled=true
valid "redis cluster, HPA 2..20, readiness on /healthz" -mode redis -hpa -readiness /healthz -- -f "$CI/redis-cluster-values.yaml"
valid "redis sentinel, 2 replicas" -mode redis -replicas 2 -- -f "$CI/sentinel-values.yaml"
valid "twilio (embedded)" -mode embedded -replicas 1 -- -f "$CI/twilio-values.yaml"
valid "existingSecret (redis, 2 replicas)" -mode redis -replicas 2 \
	-existing-secret 'SMSGW_PRODUCERS=[{name: login, key: login-key-0123456789abcdef, classes: [otp], rate: 50, burst: 100}]' \
	-existing-secret 'SMSGW_ADMIN_KEY=admin-key-0123456789abcdef' -- \
	-f "$CI/redis-values.yaml" --set replicaCount=2 --set existingSecret=smsgw-keys
valid "extraEnv override (embedded, shutdown_timeout 45s)" -mode embedded -replicas 1 -- \
	-f "$CI/embedded-values.yaml" --set config.dispatch.shutdown_timeout=45s \
	--set 'extraEnv[0].name=SMSGW_LOG_LEVEL' --set 'extraEnv[0].value=debug'

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
refused "no producers" "secrets.producers must list at least one producer" \
	-f "$CI/embedded-values.yaml" --set secrets.producers=null
refused "unquoted all-digit key_sha256" "must be a string: quote it" \
	-f "$CI/embedded-values.yaml" --set 'secrets.producers[0].key_sha256=1234'
refused "terminationGracePeriodSeconds too short" "terminationGracePeriodSeconds 20 must exceed" \
	-f "$CI/embedded-values.yaml" --set terminationGracePeriodSeconds=20

caught "config the binary refuses (burst 20) is caught by check-config" "limits.burst: target_rps 90 + burst 20 exceeds" \
	-mode embedded -replicas 1 -- -f "$CI/embedded-values.yaml" --set config.limits.burst=20
caught "unknown key in config is caught by check-config" "field bogus not found" \
	-mode embedded -replicas 1 -- -f "$CI/embedded-values.yaml" --set config.bogus=1

echo
if [ "$fails" -gt 0 ]; then
	echo "helm-check: $fails failure(s)"
	exit 1
fi
echo "helm-check: all cases passed"
