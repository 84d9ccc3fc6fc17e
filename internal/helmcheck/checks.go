package main

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// expectation is what one value set must render.
type expectation struct {
	mode           string // "embedded" or "redis"
	strategy       string // redis mode: "RollingUpdate" (default) or "Recreate"
	replicas       int    // spec.replicas; -1: absent (an HPA owns them)
	readiness      string // readiness probe path
	hpa            bool   // a HorizontalPodAutoscaler is rendered
	grafana        bool   // the Grafana dashboard ConfigMap is rendered
	extraEnv       []string
	existingSecret []string // KEY=VALUE of a Secret the release refers to but does not render
	says           []string // what check-config's answer must contain (e.g. "rotation: under way")
	adminPort      int      // admin.listen's port; 0: none (operator endpoints on the producers' port)
	networkPolicy  bool     // a NetworkPolicy is rendered
}

// result is a render's configuration, the container's environment and
// every rule it breaks.
type result struct {
	config   string            // data.smsgw.yaml of the ConfigMap
	env      map[string]string // what the container's process sees
	problems []string
}

type obj = map[string]any

// inspect checks a `helm template` output against want. An error means the
// render could not be read at all; broken rules are result.problems.
func inspect(data []byte, want expectation) (result, error) {
	var r result
	byKind := map[string][]obj{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o obj
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return r, fmt.Errorf("rendered YAML: %w", err)
		}
		if o != nil {
			byKind[str(o, "kind")] = append(byKind[str(o, "kind")], o)
		}
	}
	bad := func(f string, a ...any) { r.problems = append(r.problems, fmt.Sprintf(f, a...)) }
	one := func(kind string) obj {
		if n := len(byKind[kind]); n != 1 {
			bad("want exactly one %s, got %d", kind, n)
			return nil
		}
		return byKind[kind][0]
	}
	byKind["ConfigMap"] = checkDashboards(byKind["ConfigMap"], want.grafana, bad)
	cm, dep := one("ConfigMap"), one("Deployment")
	if cm == nil || dep == nil {
		return r, errors.New(strings.Join(r.problems, "\n"))
	}
	r.config = str(cm, "data", "smsgw.yaml")
	if r.config == "" {
		return r, errors.New("ConfigMap has no data.smsgw.yaml")
	}
	var cfg obj
	if err := yaml.Unmarshal([]byte(r.config), &cfg); err != nil {
		return r, fmt.Errorf("smsgw.yaml in the ConfigMap: %w", err)
	}
	spec := get(dep, "spec")
	pod := get(spec, "template", "spec")
	containers := list(pod, "containers")
	if len(containers) != 1 {
		return r, fmt.Errorf("want one container, got %d", len(containers))
	}
	c := containers[0]
	checkReplicas(spec, want, bad)
	if err := checkMode(byKind, cfg, spec, c, want, bad); err != nil {
		return r, err
	}
	checkPod(cfg, spec, c, want, bad)
	checkPorts(byKind, cfg, c, want, bad)
	env, err := environment(byKind, c, want, bad)
	if err != nil {
		return r, err
	}
	r.env = env
	for k, v := range env {
		if strings.HasPrefix(k, "SMSGW_") && len(v) >= 8 && k != "SMSGW_PRODUCERS" && strings.Contains(r.config, v) {
			bad("the value of secret %s appears in the ConfigMap", k)
		}
	}
	return r, nil
}

type badFunc func(format string, a ...any)

// checkReplicas: a fixed count, or none at all when an HPA owns them.
func checkReplicas(spec any, want expectation, bad badFunc) {
	got, has := get(spec, "replicas").(int)
	switch {
	case want.replicas < 0 && has:
		bad("Deployment sets replicas %d; with an HPA it must leave them to the HPA", got)
	case want.replicas >= 0 && (!has || got != want.replicas):
		bad("Deployment replicas = %v, want %d", get(spec, "replicas"), want.replicas)
	}
}

// checkMode: embedded is one pod on a PVC, replaced (Recreate), never
// autoscaled; redis rolls, has a PodDisruptionBudget and no PVC.
func checkMode(byKind map[string][]obj, cfg obj, spec, c any, want expectation, bad badFunc) error {
	strategy := str(spec, "strategy", "type")
	redisAddr := strings.TrimSpace(strings.ReplaceAll(str(cfg, "redis", "addr"), ",", ""))
	switch want.mode {
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
		for _, v := range list(get(spec, "template", "spec"), "volumes") {
			if str(v, "name") == "data" && get(v, "persistentVolumeClaim") == nil {
				bad("the data volume is not a PersistentVolumeClaim")
			}
		}
	case "redis":
		if redisAddr == "" {
			bad("redis render has an empty redis.addr")
		}
		if w := cmp.Or(want.strategy, "RollingUpdate"); strategy != w {
			bad("redis mode: strategy %q, want %s", strategy, w)
		}
		if n := len(byKind["PodDisruptionBudget"]); n != 1 {
			bad("redis mode: want one PodDisruptionBudget, got %d", n)
		}
		if len(byKind["PersistentVolumeClaim"]) != 0 {
			bad("redis mode must not render a PersistentVolumeClaim")
		}
	default:
		return fmt.Errorf("-mode %q", want.mode)
	}
	if got := len(byKind["HorizontalPodAutoscaler"]); want.hpa != (got == 1) {
		bad("HorizontalPodAutoscaler: got %d, want hpa=%v", got, want.hpa)
	}
	return nil
}

// checkPod: probes, a grace period that outlasts preStop plus smsgw's own
// shutdown, a non-root read-only container, and a config checksum that
// rolls the pods when the configuration changes.
func checkPod(cfg obj, spec, c any, want expectation, bad badFunc) {
	pod := get(spec, "template", "spec")
	if p := str(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		bad("liveness path %q, want /healthz", p)
	}
	if p := str(c, "readinessProbe", "httpGet", "path"); p != want.readiness {
		bad("readiness path %q, want %s", p, want.readiness)
	}
	shutdown := 20 * time.Second // smsgw's default dispatch.shutdown_timeout
	if s := str(cfg, "dispatch", "shutdown_timeout"); s != "" {
		var err error
		if shutdown, err = time.ParseDuration(s); err != nil {
			bad("dispatch.shutdown_timeout: %v", err)
		}
	}
	preStop := 0
	if s, ok := get(c, "lifecycle", "preStop", "sleep", "seconds").(int); ok {
		preStop = s
	} else if cmd := list(c, "lifecycle", "preStop", "exec", "command"); len(cmd) == 2 {
		_, _ = fmt.Sscan(fmt.Sprint(cmd[1]), &preStop)
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
}

// environment is what the container's process sees: every key of the
// Secrets its envFrom names (rendered ones, or want.existingSecret for one
// the release only refers to), then literal env entries, then
// want.extraEnv, later ones overriding earlier ones.
func environment(byKind map[string][]obj, c any, want expectation, bad badFunc) (map[string]string, error) {
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
					return nil, fmt.Errorf("secret data %s: %w", k, err)
				}
				kv[k] = string(b)
			}
		}
		secrets[str(s, "metadata", "name")] = kv
	}
	env := map[string]string{}
	for _, ef := range list(c, "envFrom") {
		name := str(ef, "secretRef", "name")
		kv, ok := secrets[name]
		if !ok {
			if len(want.existingSecret) == 0 {
				bad("envFrom refers to Secret %q, which the release does not render", name)
			}
			kv = pairs(want.existingSecret)
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
	for k, v := range pairs(want.extraEnv) {
		env[k] = v
	}
	return env, nil
}

func pairs(kvs []string) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, e := range kvs {
		k, v, _ := strings.Cut(e, "=")
		out[k] = v
	}
	return out
}

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

// checkDashboards checks the optional Grafana dashboard ConfigMap (the one
// holding smsgw.json) and returns the other ConfigMaps.
func checkDashboards(cms []obj, want bool, bad func(string, ...any)) []obj {
	isDashboard := func(c obj) bool { _, ok := get(c, "data", "smsgw.json").(string); return ok }
	var dashboards []obj
	for _, c := range cms {
		if isDashboard(c) {
			dashboards = append(dashboards, c)
		}
	}
	rest := slices.DeleteFunc(slices.Clone(cms), isDashboard)
	switch {
	case want && len(dashboards) != 1:
		bad("want one Grafana dashboard ConfigMap, got %d", len(dashboards))
	case !want && len(dashboards) != 0:
		bad("the Grafana dashboard ConfigMap is rendered though not enabled")
	case want:
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
	return rest
}
