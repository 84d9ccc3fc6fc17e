package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goodEmbedded is a render of the embedded value set that keeps every rule,
// reduced to the fields the checks read.
const goodEmbedded = `
apiVersion: v1
kind: Secret
metadata: {name: smsgw}
stringData:
  SMSGW_PRODUCERS: "[{name: login, key: login-key-0123456789abcdef, classes: [otp], rate: 50, burst: 100}]"
data:
  SMSGW_ADMIN_KEY: YWRtaW4ta2V5LTAxMjM0NTY3ODlhYmNkZWY=
---
apiVersion: v1
kind: ConfigMap
metadata: {name: smsgw}
data:
  smsgw.yaml: |
    store: {path: /data}
    provider: {url: "http://sim:9100/send"}
    admin: {listen: ":9091"}
---
apiVersion: v1
kind: Service
metadata: {name: smsgw}
spec:
  ports:
    - {name: http, port: 8080, targetPort: http}
    - {name: admin, port: 9091, targetPort: admin}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: smsgw}
spec:
  ingress:
    - ports: [{port: http}]
    - ports: [{port: admin}]
      from: [{namespaceSelector: {matchLabels: {team: ops}}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: smsgw-data}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: smsgw}
spec:
  replicas: 1
  strategy: {type: Recreate}
  template:
    metadata:
      annotations: {checksum/config: abc}
    spec:
      terminationGracePeriodSeconds: 35
      securityContext: {runAsNonRoot: true}
      volumes:
        - name: data
          persistentVolumeClaim: {claimName: smsgw-data}
      containers:
        - name: smsgw
          envFrom:
            - secretRef: {name: smsgw}
          env:
            - {name: SMSGW_LOG_LEVEL, value: debug}
          volumeMounts:
            - {name: data, mountPath: /data}
          ports:
            - {name: http, containerPort: 8080}
            - {name: admin, containerPort: 9091}
          livenessProbe: {httpGet: {path: /healthz, port: http}}
          readinessProbe: {httpGet: {path: /readyz, port: http}}
          lifecycle: {preStop: {sleep: {seconds: 5}}}
          securityContext: {readOnlyRootFilesystem: true}
`

var embeddedWant = expectation{mode: "embedded", replicas: 1, readiness: "/readyz", adminPort: 9091, networkPolicy: true}

func TestInspect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		old     string // replaced by new in goodEmbedded ("": unchanged)
		new     string
		want    func(*expectation)
		problem string // "": none
	}{
		{name: "good embedded render"},
		{name: "embedded with two replicas", old: "replicas: 1", new: "replicas: 2", problem: "Deployment replicas = 2, want 1"},
		{name: "embedded rolling update", old: "type: Recreate", new: "type: RollingUpdate", problem: "embedded mode needs strategy Recreate"},
		{name: "embedded with redis.addr", old: "store: {path: /data}", new: "store: {path: /data}\n    redis: {addr: \"r:6379\"}",
			problem: `embedded render has redis.addr "r:6379"`},
		{name: "store not on the data volume", old: "mountPath: /data", new: "mountPath: /elsewhere", problem: `store.path "/data" is not the mount path`},
		{name: "data volume not a PVC", old: "persistentVolumeClaim: {claimName: smsgw-data}", new: "emptyDir: {}",
			problem: "the data volume is not a PersistentVolumeClaim"},
		{name: "replicas set although an HPA owns them", want: func(e *expectation) { e.replicas = -1 },
			problem: "Deployment sets replicas 1; with an HPA"},
		{name: "redis expected, embedded rendered", want: func(e *expectation) { e.mode = "redis" },
			problem: "redis render has an empty redis.addr"},
		{name: "grace period shorter than preStop + shutdown", old: "terminationGracePeriodSeconds: 35", new: "terminationGracePeriodSeconds: 27",
			problem: "terminationGracePeriodSeconds 27 <= preStop 5s + shutdown_timeout 20s + 2s"},
		{name: "a longer shutdown_timeout needs a longer grace period", old: "store: {path: /data}", new: "store: {path: /data}\n    dispatch: {shutdown_timeout: 45s}",
			problem: "terminationGracePeriodSeconds 35 <= preStop 5s + shutdown_timeout 45s + 2s"},
		{name: "preStop as exec sleep", old: "{preStop: {sleep: {seconds: 5}}}", new: `{preStop: {exec: {command: [sleep, "5"]}}}`},
		{name: "no preStop", old: "lifecycle: {preStop: {sleep: {seconds: 5}}}", new: "lifecycle: {}", problem: "no preStop sleep"},
		{name: "readiness on /healthz unexpected", old: "path: /readyz", new: "path: /healthz", problem: `readiness path "/healthz", want /readyz`},
		{name: "root allowed", old: "runAsNonRoot: true", new: "runAsNonRoot: false", problem: "runAsNonRoot is not true"},
		{name: "writable root filesystem", old: "readOnlyRootFilesystem: true", new: "readOnlyRootFilesystem: false", problem: "readOnlyRootFilesystem is not true"},
		{name: "no config checksum", old: "checksum/config: abc", new: "other: abc", problem: "no checksum/config annotation"},
		{name: "a secret's value in the ConfigMap", old: `admin: {listen: ":9091"}`, new: `admin: {listen: ":9091", key: admin-key-0123456789abcdef}`,
			problem: "the value of secret SMSGW_ADMIN_KEY appears in the ConfigMap"},
		{name: "operator endpoints on the producers' port", old: `admin: {listen: ":9091"}`, new: "log: {level: info}",
			problem: `admin.listen "", want port 9091`},
		{name: "no admin port on the container", old: "{name: admin, containerPort: 9091}", new: "{name: metrics, containerPort: 9091}",
			problem: "the container has no port admin 9091"},
		{name: "no admin port on the Service", old: "{name: admin, port: 9091, targetPort: admin}", new: "{name: ops, port: 9091, targetPort: admin}",
			problem: "Service smsgw has no port admin"},
		{name: "probe on the admin port", old: "path: /readyz, port: http", new: "path: /readyz, port: admin",
			problem: `readinessProbe on port "admin", want http`},
		{name: "admin port open to every source", old: "      from: [{namespaceSelector: {matchLabels: {team: ops}}}]\n", new: "",
			problem: "the NetworkPolicy opens the admin port to every source"},
		{name: "a rule for every port", old: "    - ports: [{port: http}]", new: "    - from: [{podSelector: {}}]",
			problem: "a NetworkPolicy rule without ports opens every port"},
		{name: "no NetworkPolicy", want: func(e *expectation) { e.networkPolicy = false },
			problem: "NetworkPolicy: 1 rendered, want networkPolicy=false"},
		{name: "envFrom a Secret nobody renders", old: "secretRef: {name: smsgw}", new: "secretRef: {name: elsewhere}",
			problem: `envFrom refers to Secret "elsewhere", which the release does not render`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			render := goodEmbedded
			if tc.old != "" {
				if !strings.Contains(render, tc.old) {
					t.Fatalf("the render has no %q", tc.old)
				}
				render = strings.Replace(render, tc.old, tc.new, 1)
			}
			want := embeddedWant
			if tc.want != nil {
				tc.want(&want)
			}
			r, err := inspect([]byte(render), want)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.problem == "" && len(r.problems) > 0:
				t.Errorf("problems %q, want none", r.problems)
			case tc.problem != "" && !slices.ContainsFunc(r.problems, func(p string) bool { return strings.Contains(p, tc.problem) }):
				t.Errorf("problems %q, want one containing %q", r.problems, tc.problem)
			}
		})
	}
}

// TestEnvironment: the container sees the Secret (stringData and decoded
// data), then env entries, then -env, in that order of precedence; an
// existing Secret the release only names is given by -existing-secret.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	want := embeddedWant
	want.extraEnv = []string{"SMSGW_LOG_FORMAT=text"}
	r, err := inspect([]byte(goodEmbedded), want)
	if err != nil || len(r.problems) > 0 {
		t.Fatalf("err %v, problems %q", err, r.problems)
	}
	if r.env["SMSGW_ADMIN_KEY"] != "admin-key-0123456789abcdef" || !strings.Contains(r.env["SMSGW_PRODUCERS"], "login-key") ||
		r.env["SMSGW_LOG_LEVEL"] != "debug" || r.env["SMSGW_LOG_FORMAT"] != "text" || len(r.env) != 4 {
		t.Errorf("env %v", r.env)
	}
	if !strings.Contains(r.config, "store: {path: /data}") {
		t.Errorf("config %q", r.config)
	}

	render := strings.Replace(goodEmbedded, "secretRef: {name: smsgw}", "secretRef: {name: keys}", 1)
	want.existingSecret = []string{"SMSGW_ADMIN_KEY=from-the-existing-secret"}
	r, err = inspect([]byte(render), want)
	if err != nil || len(r.problems) > 0 {
		t.Fatalf("err %v, problems %q", err, r.problems)
	}
	if r.env["SMSGW_ADMIN_KEY"] != "from-the-existing-secret" || r.env["SMSGW_PRODUCERS"] != "" {
		t.Errorf("env with an existing secret %v", r.env)
	}
}

func TestInspectUnreadable(t *testing.T) {
	t.Parallel()
	for name, render := range map[string]string{
		"no Deployment":    "kind: ConfigMap\ndata: {smsgw.yaml: 'a: 1'}\n",
		"no smsgw.yaml":    strings.Replace(goodEmbedded, "smsgw.yaml: |", "other.yaml: |", 1),
		"two containers":   strings.Replace(goodEmbedded, "containers:\n", "containers:\n        - name: sidecar\n", 1),
		"not YAML":         "kind: [",
		"bad secret data":  strings.Replace(goodEmbedded, "YWRtaW4ta2V5LTAxMjM0NTY3ODlhYmNkZWY=", `"@@@"`, 1),
		"mode not a mode":  goodEmbedded + "\n# mode below\n",
		"config not YAML":  strings.Replace(goodEmbedded, "store: {path: /data}", "store: [", 1),
		"two ConfigMaps":   goodEmbedded + "---\nkind: ConfigMap\n",
		"empty render":     "",
		"only a Secret":    "kind: Secret\n",
		"only a ConfigMap": "kind: ConfigMap\n",
	} {
		want := embeddedWant
		if name == "mode not a mode" {
			want.mode = "cluster"
		}
		if _, err := inspect([]byte(render), want); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestRunCallsCheckConfig: run hands check-config the extracted
// configuration and the Deployment's environment, and fails when it does.
func TestRunCallsCheckConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rendered := filepath.Join(dir, "rendered.yaml")
	if err := os.WriteFile(rendered, []byte(goodEmbedded), 0o600); err != nil {
		t.Fatal(err)
	}
	// A stand-in for smsgw: prints what it got; refuses when the log level is debug.
	bin := filepath.Join(dir, "smsgw")
	script := "#!/bin/sh\necho \"args: $*\"\necho \"admin: $SMSGW_ADMIN_KEY level: $SMSGW_LOG_LEVEL\"\n" +
		"cat \"$3\"\n[ \"$SMSGW_LOG_LEVEL\" != debug ]\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(rendered, bin, dir, embeddedWant, &out)
	if err == nil || !strings.Contains(err.Error(), "check-config refused") {
		t.Errorf("err %v, want check-config's refusal", err)
	}
	for _, want := range []string{"args: check-config --config " + filepath.Join(dir, "smsgw.yaml"),
		"admin: admin-key-0123456789abcdef level: debug", "| store: {path: /data}",
		"env from the Deployment: SMSGW_ADMIN_KEY SMSGW_LOG_LEVEL SMSGW_PRODUCERS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	want := embeddedWant
	want.extraEnv = []string{"SMSGW_LOG_LEVEL=info"}
	out.Reset()
	if err := run(rendered, bin, dir, want, &out); err != nil {
		t.Errorf("run: %v\n%s", err, out.String())
	}
	// -says: what the answer must contain.
	want.says = []string{"level: info"}
	out.Reset()
	if err := run(rendered, bin, dir, want, &out); err != nil {
		t.Errorf("run, answer saying %q: %v\n%s", want.says, err, out.String())
	}
	want.says = []string{"level: info", "rotation: under way"}
	out.Reset()
	if err := run(rendered, bin, dir, want, &out); err == nil || !strings.Contains(err.Error(), `does not say "rotation: under way"`) {
		t.Errorf("run, answer without %q: %v", want.says[1], err)
	}
}
