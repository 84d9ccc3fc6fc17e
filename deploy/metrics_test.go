package deploy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"smsgw/internal/config"
	"smsgw/internal/gateway"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
)

// exposition is one /metrics answer: the label sets of every sample name
// (histograms expanded into _bucket, _count and _sum as PromQL sees them).
type exposition map[string][]map[string]string

func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := exposition{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				for _, b := range h.GetBucket() {
					bl := maps(ls, "le", fmt.Sprint(b.GetUpperBound()))
					out[name+"_bucket"] = append(out[name+"_bucket"], bl)
				}
				out[name+"_bucket"] = append(out[name+"_bucket"], maps(ls, "le", "+Inf"))
				out[name+"_count"] = append(out[name+"_count"], ls)
				out[name+"_sum"] = append(out[name+"_sum"], ls)
				continue
			}
			out[name] = append(out[name], ls)
		}
	}
	return out
}

func maps(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// gatewayMetrics starts a real gateway in the given mode (Redis: the
// shared Redis and a random account, where the limiter's metrics exist),
// whose producer's and admin's keys are being rotated (so the previous
// keys' series exist), sends one message through it, and returns its
// /metrics text.
func gatewayMetrics(t *testing.T, redisMode bool) string {
	t.Helper()
	s, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	simURL, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	redisLine := ""
	if redisMode {
		redisLine = "redis: {addr: " + redistest.Addr(t) + "}"
	}
	cfg, err := config.Load(fmt.Appendf(nil, `
listen: "127.0.0.1:0"
store: {path: %q}
account: %s
%s
provider: {kind: http, url: %q, timeout: 2s}
dispatch: {shutdown_timeout: 5s}
limits: {senders: {Mkt1: {max_rps: 1}}}
producers:
  - {name: notify, key: notify-key-0123456789, previous_key: notify-old-key-0123456789, classes: [transactional, marketing, otp], rate: 100, burst: 100,
     budget: {daily_units: 1000, monthly_units: 20000}}
admin: {key: admin-key-0123456789abcdef, previous_key: admin-old-key-0123456789}
`, t.TempDir(), redistest.Prefix(t), redisLine, simURL+"/send"), nil)
	if err != nil {
		t.Fatal(err)
	}
	app, err := gateway.New(t.Context(), cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	base := "http://" + app.Addr()
	req, err := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/messages",
		strings.NewReader(`{"to":"+819012345678","body":"metrics check","class":"transactional"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer notify-key-0123456789")
	req.Header.Set("Content-Type", "application/json")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/messages: %v %v", res, err)
	} else {
		_ = res.Body.Close()
	}
	req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// query is one PromQL expression of a rule or a panel.
type query struct {
	where string // "alert SmsgwX in alerts.yaml", "panel 'Y'"
	expr  string
}

// problems parses q and lists every selector that the exposition cannot
// answer: an unknown metric name, an unknown label, or an equality or
// regexp matcher that no exposed series matches (a typo in a label value
// is as silent in Prometheus as a typo in a name).
func problems(exp exposition, q query) []string {
	e, err := parser.ParseExpr(q.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: PromQL does not parse: %v\n%s", q.where, err, q.expr)}
	}
	var out []string
	bad := func(f string, a ...any) { out = append(out, q.where+": "+fmt.Sprintf(f, a...)) }
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		series, exposed := exp[name]
		switch {
		case name == "":
			bad("a selector without a metric name: %s", vs)
		case !exposed:
			bad("uses %s, which the gateway does not expose", name)
		default:
			for _, m := range vs.LabelMatchers {
				if m.Name != labels.MetricName && !matchesSome(series, m) {
					bad("no exposed %s series has %s", name, m)
				}
			}
		}
		return nil
	})
	return out
}

func matchesSome(series []map[string]string, m *labels.Matcher) bool {
	for _, ls := range series {
		v, has := ls[m.Name]
		if !has {
			continue
		}
		switch m.Type {
		case labels.MatchEqual, labels.MatchRegexp:
			if m.Matches(v) {
				return true
			}
		default: // != and !~: the label must exist at all
			return true
		}
	}
	return false
}

// TestRulesAndPanelsUseExposedMetrics: every metric an alert rule or a
// dashboard panel reads is on a running gateway's /metrics (Redis mode,
// where the limiter's metrics exist too), with the labels and label values
// the expression selects.
func TestRulesAndPanelsUseExposedMetrics(t *testing.T) {
	exp := parseExposition(t, gatewayMetrics(t, true))
	queries := append(ruleQueries(t), panelQueries(t)...)
	if len(queries) < 20 {
		t.Fatalf("only %d queries found in the rules and the dashboard", len(queries))
	}
	for _, q := range queries {
		for _, p := range problems(exp, q) {
			t.Error(p)
		}
	}
}

// TestCheckCanFail: the check sees a wrong name, a wrong label name or
// value, a receipt metric the exposition lacks and bad syntax.
func TestCheckCanFail(t *testing.T) {
	exp := exposition{"smsgw_dispatch_messages_total": {{"class": "otp", "outcome": "sent"}}}
	for _, q := range []query{
		{where: "typo", expr: `sum(rate(smsgw_dispatch_message_total[5m]))`},
		{where: "label value", expr: `sum(rate(smsgw_dispatch_messages_total{outcome="delivered"}[5m]))`},
		{where: "label name", expr: `sum(rate(smsgw_dispatch_messages_total{result!="ok"}[5m]))`},
		{where: "regexp", expr: `smsgw_dispatch_messages_total{class=~"mkt|txn"}`},
		{where: "not exposed", expr: `smsgw_delivery_ratio < 0.5`},
		{where: "syntax", expr: `sum(rate(smsgw_dispatch_messages_total[5m])`},
	} {
		if len(problems(exp, q)) == 0 {
			t.Errorf("%s: %s passed the check", q.where, q.expr)
		}
	}
	good := query{where: "good", expr: `sum by (class) (rate(smsgw_dispatch_messages_total{outcome=~"sent|dead"}[5m]))`}
	if p := problems(exp, good); len(p) > 0 {
		t.Errorf("a correct query failed the check: %q", p)
	}
}

// promtool finds Prometheus's promtool. A missing one fails: `make test`
// installs it (Debian package prometheus).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: install it (apt-get install -y prometheus), or run make test, which does")
	}
	return p
}

// TestPromtoolCheckMetrics: promtool's linter finds nothing to say about
// our /metrics, in either mode.
func TestPromtoolCheckMetrics(t *testing.T) {
	bin := promtool(t)
	for _, redisMode := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded", true: "redis"}[redisMode], func(t *testing.T) {
			text := gatewayMetrics(t, redisMode)
			cmd := exec.CommandContext(t.Context(), bin, "check", "metrics")
			cmd.Stdin = strings.NewReader(text)
			out, err := cmd.CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("promtool check metrics: %v\n%s", err, out)
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
