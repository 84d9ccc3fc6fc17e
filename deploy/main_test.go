// Package deploy_test checks what deploy/ ships against a real gateway: the
// Prometheus alert rules (deploy/prometheus) and the Grafana dashboard
// (deploy/grafana, and its copy in the Helm chart); and the Helm chart's
// secrets, refusals and admin port (chart_test.go, with helm when found).
package deploy_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start gateways; every one is stopped by its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
