// Command helmcheck checks one `helm template` output of the smsgw chart:
// the Kubernetes objects keep the replica rules of the chosen mode, the
// probes and shutdown timing fit, no secret leaks into the ConfigMap; then
// it runs `smsgw check-config` on the smsgw.yaml of the ConfigMap with the
// SMSGW_* environment the Deployment gives the container (the Secret through
// envFrom, plus literal env entries). scripts/helm-check.sh builds it and
// runs it on every value set it renders, so the chart can never render a
// configuration the binary refuses.
//
//	helmcheck -rendered out.yaml -smsgw bin/smsgw -out dir -mode embedded -replicas 1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	rendered := flag.String("rendered", "", "helm template output")
	bin := flag.String("smsgw", "", "smsgw binary")
	out := flag.String("out", "", "directory for the extracted smsgw.yaml")
	var want expectation
	flag.StringVar(&want.mode, "mode", "", "expected mode: embedded or redis")
	flag.StringVar(&want.strategy, "strategy", "", "redis mode: expected update strategy (default RollingUpdate)")
	flag.IntVar(&want.replicas, "replicas", -1, "expected spec.replicas (-1: absent, HPA)")
	flag.StringVar(&want.readiness, "readiness", "/readyz", "expected readiness path")
	flag.BoolVar(&want.hpa, "hpa", false, "expect a HorizontalPodAutoscaler")
	flag.BoolVar(&want.grafana, "grafana", false, "expect the Grafana dashboard ConfigMap")
	flag.Var((*multi)(&want.extraEnv), "env", "KEY=VALUE the container gets besides the rendered Secret (repeatable)")
	flag.Var((*multi)(&want.existingSecret), "existing-secret", "KEY=VALUE of the existingSecret the release refers to (repeatable)")
	flag.Var((*multi)(&want.says), "says", "text smsgw check-config's answer must contain (repeatable)")
	flag.IntVar(&want.adminPort, "admin-port", 9091, "expected admin.listen port (0: none)")
	flag.BoolVar(&want.networkPolicy, "network-policy", true, "expect a NetworkPolicy")
	flag.Parse()
	if err := run(*rendered, *bin, *out, want, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

// run checks the render in file rendered and, when it passes, runs bin's
// check-config on its configuration.
func run(rendered, bin, out string, want expectation, stdout io.Writer) error {
	data, err := os.ReadFile(rendered)
	if err != nil {
		return err
	}
	r, err := inspect(data, want)
	if err != nil {
		return err
	}
	if len(r.problems) > 0 {
		return errors.New(strings.Join(r.problems, "\n"))
	}
	path := filepath.Join(out, "smsgw.yaml")
	if err := os.WriteFile(path, []byte(r.config), 0o600); err != nil {
		return err
	}
	names := make([]string, 0, len(r.env))
	cmdEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range r.env {
		names = append(names, k)
		cmdEnv = append(cmdEnv, k+"="+v)
	}
	slices.Sort(names)
	var report strings.Builder
	fmt.Fprintf(&report, "      env from the Deployment: %s\n", strings.Join(names, " "))
	// check-config answers in milliseconds; a minute only bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "check-config", "--config", path)
	cmd.Env = cmdEnv
	o, err := cmd.CombinedOutput()
	for l := range strings.SplitSeq(strings.TrimRight(string(o), "\n"), "\n") {
		fmt.Fprintf(&report, "      | %s\n", l)
	}
	if _, werr := io.WriteString(stdout, report.String()); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("smsgw check-config refused the rendered configuration: %w", err)
	}
	for _, s := range want.says {
		if !strings.Contains(string(o), s) {
			return fmt.Errorf("smsgw check-config's answer does not say %q", s)
		}
	}
	return nil
}
