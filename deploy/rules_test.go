package deploy_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	alertsFile    = "prometheus/alerts.yaml"
	alertTests    = "prometheus/alerts_test.yaml"
	alertDayTests = "prometheus/alerts_day_test.yaml" // the rules comparing with the day before
	dashboardFile = "grafana/smsgw.json"
	chartCopy     = "helm/smsgw/dashboards/smsgw.json"
	runbook       = "../docs/operations.md"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T, path string) []rule {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(readFile(t, path), &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", path)
	}
	return out
}

func ruleQueries(t *testing.T) []query {
	var out []query
	for _, r := range loadRules(t, alertsFile) {
		out = append(out, query{where: "alert " + r.Alert + " in " + alertsFile, expr: r.Expr})
	}
	return out
}

type panel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// panelQueries are the dashboard's queries, collapsed rows' panels included.
func panelQueries(t *testing.T) []query {
	var out []query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			for _, tg := range p.Targets {
				out = append(out, query{where: "panel '" + p.Title + "' (" + tg.RefID + ")", expr: tg.Expr})
			}
		}
	}
	walk(loadDashboard(t).Panels)
	return out
}

// TestPromtoolRules: promtool accepts the rule files and their unit tests
// pass (make alerts-check prints the same).
func TestPromtoolRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", alertTests, alertDayTests}} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("SUCCESS")) {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEveryAlertFiresAndStaysQuiet: the unit tests cover every alert both
// ways: at least one evaluation that expects it firing and one that
// expects it quiet. And they name no alert that does not exist.
func TestEveryAlertFiresAndStaysQuiet(t *testing.T) {
	fires, quiet := map[string]int{}, map[string]int{}
	for _, file := range []string{alertTests, alertDayTests} {
		var f struct {
			RuleFiles []string `yaml:"rule_files"`
			Tests     []struct {
				Name  string `yaml:"name"`
				Evals []struct {
					Alert string `yaml:"alertname"`
					Exp   []any  `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(readFile(t, file), &f); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f.RuleFiles, []string{"alerts.yaml"}) {
			t.Errorf("%s tests %v, want alerts.yaml", file, f.RuleFiles)
		}
		for _, tc := range f.Tests {
			for _, e := range tc.Evals {
				if len(e.Exp) > 0 {
					fires[e.Alert]++
				} else {
					quiet[e.Alert]++
				}
			}
		}
	}
	known := map[string]bool{}
	for _, r := range loadRules(t, alertsFile) {
		known[r.Alert] = true
		if fires[r.Alert] == 0 || quiet[r.Alert] == 0 {
			t.Errorf("alert %s: %d evaluations expect it firing, %d quiet; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
		}
	}
	for a := range fires {
		if !known[a] {
			t.Errorf("the unit tests test an alert %s that no rule file defines", a)
		}
	}
}

// githubAnchor is the anchor a Markdown heading gets on the usual hosts:
// lower case, punctuation dropped, spaces to hyphens.
func githubAnchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile(`[^\p{L}\p{N} _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// TestAlertsAreOperable: every alert has a severity, a summary, a
// description and a runbook_url whose anchor is a heading of the runbook.
func TestAlertsAreOperable(t *testing.T) {
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(readFile(t, runbook)), "\n") {
		if h, ok := strings.CutPrefix(l, "#"); ok {
			anchors[githubAnchor(strings.TrimLeft(h, "#"))] = true
		}
	}
	names := map[string]bool{}
	path := alertsFile
	for _, r := range loadRules(t, path) {
		if r.Alert == "" || names[r.Alert] {
			t.Errorf("%s: a rule without an alert name, or %q twice", path, r.Alert)
		}
		names[r.Alert] = true
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: summary or description missing", r.Alert)
		}
		file, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#")
		if file != "docs/operations.md" || anchor != strings.ToLower(r.Alert) || !anchors[anchor] {
			t.Errorf("%s: runbook_url %q: want docs/operations.md#%s, a heading of the runbook",
				r.Alert, r.Annotations["runbook_url"], strings.ToLower(r.Alert))
		}
	}
}

// TestDashboard: the dashboard is well formed (every panel reads the
// datasource variable and fits the 24-column grid, titles are unique) and
// the Helm chart ships exactly this file.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "smsgw" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	titles := map[string]bool{}
	rows := 0
	for _, p := range d.Panels {
		if titles[p.Title] {
			t.Errorf("panel title %q twice", p.Title)
		}
		titles[p.Title] = true
		if p.Type == "row" {
			rows++
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 || p.Description == "" {
			t.Errorf("panel %q: datasource %q, %d targets, description %q", p.Title, p.Datasource.UID, len(p.Targets), p.Description)
		}
		if p.GridPos.X < 0 || p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if strings.Contains(p.Description, "PLANNED") {
			t.Errorf("panel %q is still described as planned: every metric it reads exists", p.Title)
		}
	}
	if rows < 4 {
		t.Errorf("%d rows, want at least 4", rows)
	}
	if !bytes.Equal(readFile(t, dashboardFile), readFile(t, chartCopy)) {
		t.Errorf("%s differs from %s: cp deploy/%s deploy/%s", chartCopy, dashboardFile, dashboardFile, chartCopy)
	}
}
