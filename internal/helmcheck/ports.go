package main

import (
	"strconv"
	"strings"
)

// checkPorts: the operator endpoints (/metrics, /v1/admin/*, /dashboard/)
// are on their own port when want.adminPort is set (admin.listen in the
// configuration, a container port and a Service port named admin, the
// ServiceMonitor scraping it), and the probes stay on the producers' port;
// with a NetworkPolicy, the admin port is open only to the peers it lists,
// and no rule opens every port.
func checkPorts(byKind map[string][]obj, cfg obj, c any, want expectation, bad badFunc) {
	listen := str(cfg, "admin", "listen")
	switch {
	case want.adminPort == 0 && listen != "":
		bad("admin.listen %q, want none", listen)
	case want.adminPort != 0 && !strings.HasSuffix(listen, ":"+strconv.Itoa(want.adminPort)):
		bad("admin.listen %q, want port %d", listen, want.adminPort)
	}
	if want.adminPort != 0 {
		if !hasPort(list(c, "ports"), "admin", "containerPort", want.adminPort) {
			bad("the container has no port admin %d", want.adminPort)
		}
		for _, svc := range byKind["Service"] {
			if !hasPort(list(svc, "spec", "ports"), "admin", "", 0) {
				bad("Service %s has no port admin", str(svc, "metadata", "name"))
			}
		}
	}
	wantScrape := "http"
	if want.adminPort != 0 {
		wantScrape = "admin"
	}
	for _, sm := range byKind["ServiceMonitor"] {
		for _, ep := range list(sm, "spec", "endpoints") {
			if p := str(ep, "port"); p != wantScrape {
				bad("the ServiceMonitor scrapes port %q, want %s", p, wantScrape)
			}
		}
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if p := str(c, probe, "httpGet", "port"); p != "http" {
			bad("%s on port %q, want http (the producers' port has /healthz and /readyz)", probe, p)
		}
	}
	pols := byKind["NetworkPolicy"]
	if got := len(pols) == 1; got != want.networkPolicy {
		bad("NetworkPolicy: %d rendered, want networkPolicy=%v", len(pols), want.networkPolicy)
	}
	for _, pol := range pols {
		for _, rule := range list(pol, "spec", "ingress") {
			ports := list(rule, "ports")
			if len(ports) == 0 {
				bad("a NetworkPolicy rule without ports opens every port")
			}
			for _, p := range ports {
				if str(p, "port") == "admin" && len(list(rule, "from")) == 0 {
					bad("the NetworkPolicy opens the admin port to every source")
				}
			}
		}
	}
}

// hasPort reports whether ports has one named name (and, when field is
// set, with that number).
func hasPort(ports []any, name, field string, number int) bool {
	for _, p := range ports {
		if str(p, "name") != name {
			continue
		}
		if field == "" || str(p, field) == strconv.Itoa(number) {
			return true
		}
	}
	return false
}
