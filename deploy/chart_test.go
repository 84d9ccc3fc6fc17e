package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	chartDir       = "helm/smsgw"
	chartValues    = chartDir + "/values.yaml"
	chartSecret    = chartDir + "/templates/secret.yaml"
	chartHelpers   = chartDir + "/templates/_helpers.tpl"
	chartReadme    = chartDir + "/README.md"
	chartEmbedded  = chartDir + "/ci/embedded-values.yaml"
	helmVersion    = "v3.22.0" // scripts/ensure-deps.sh's HELM_VERSION
	helmCacheShape = "smsgw-helm-" + helmVersion + "/helm"
)

// chartSecretKeys are the keys of the chart's secrets value other than
// producers, in values.yaml's order.
func chartSecretKeys(t *testing.T) []string {
	t.Helper()
	var v struct {
		Secrets yaml.Node `yaml:"secrets"`
	}
	if err := yaml.Unmarshal(readFile(t, chartValues), &v); err != nil {
		t.Fatalf("%s: %v", chartValues, err)
	}
	var keys []string
	for i := 0; i+1 < len(v.Secrets.Content); i += 2 {
		if k := v.Secrets.Content[i].Value; k != "producers" {
			keys = append(keys, k)
		}
	}
	if len(keys) < 5 {
		t.Fatalf("%s: secrets has only %q", chartValues, keys)
	}
	return keys
}

// TestChartSecretsCovered: every secrets.* value of the chart is rendered
// into its Secret, is checked to be a string, and its variable is listed
// by the runbook and the chart's README.
func TestChartSecretsCovered(t *testing.T) {
	secretTpl := string(readFile(t, chartSecret))
	rendered := map[string]string{} // values key -> SMSGW_ variable
	for _, m := range regexp.MustCompile(`\{\{- with \$s\.(\w+) \}\}\s*\n\s*(SMSGW_\w+):`).FindAllStringSubmatch(secretTpl, -1) {
		rendered[m[1]] = m[2]
	}
	helpers := string(readFile(t, chartHelpers))
	quoted := regexp.MustCompile(`range \$k := list ((?:"\w+" ?)+)-\}\}\s*\n\s*\{\{- \$v := get \$\.Values\.secrets \$k`).FindStringSubmatch(helpers)
	if quoted == nil {
		t.Fatalf("%s: no check that the secrets are strings", chartHelpers)
	}
	docs := map[string]string{runbook: string(readFile(t, runbook)), chartReadme: string(readFile(t, chartReadme))}
	vars := []string{"SMSGW_PRODUCERS"}
	for _, k := range chartSecretKeys(t) {
		env, ok := rendered[k]
		if !ok {
			t.Errorf("secrets.%s (%s) is not rendered by %s", k, chartValues, chartSecret)
			continue
		}
		vars = append(vars, env)
		if !strings.Contains(quoted[1], `"`+k+`"`) {
			t.Errorf("secrets.%s: %s does not check that it is a string", k, chartHelpers)
		}
	}
	for path, text := range docs {
		for _, env := range vars {
			if !strings.Contains(text, "`"+env+"`") {
				t.Errorf("%s does not list %s, which the chart's Secret renders", path, env)
			}
		}
	}
}

// helm finds a helm binary: $HELM, helm on PATH, or the one
// scripts/ensure-deps.sh builds, which make test does before the tests.
// Without one (go test run alone on a fresh machine) the render tests are
// skipped.
func helm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if p := filepath.Join(os.TempDir(), helmCacheShape); fileExists(p) {
		return p
	}
	t.Skip("helm not found (set HELM, or run make test or bash scripts/ensure-deps.sh helm once, which builds it into " + filepath.Join(os.TempDir(), helmCacheShape) + ")")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// renderChart runs helm template on the embedded example values and args.
func renderChart(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"template", "smsgw", chartDir, "-f", chartEmbedded}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestChartRefusesSecretsInConfig: a secret written into config (the
// ConfigMap) fails the render naming the secrets value to use instead, and
// a secret YAML reads as a number fails it asking for quotes.
func TestChartRefusesSecretsInConfig(t *testing.T) {
	bin := helm(t)
	if out, err := renderChart(t, bin); err != nil {
		t.Fatalf("the embedded example does not render: %v\n%s", err, out)
	}
	for _, tc := range []struct{ set, want string }{
		{"config.redis.password=p", "config.redis.password must not be set: use secrets.redisPassword"},
		{"config.redis.sentinel_password=p", "config.redis.sentinel_password must not be set: use secrets.redisSentinelPassword"},
		{"config.provider.token=p", "config.provider.token must not be set: use secrets.providerToken"},
		{"config.provider.receipt_secret=p", "config.provider.receipt_secret must not be set: use secrets.receiptSecret"},
		{"config.provider.twilio.auth_token=p", "config.provider.twilio.auth_token / webhook_auth_token must not be set"},
		{"config.provider.twilio.webhook_auth_token=p", "config.provider.twilio.auth_token / webhook_auth_token must not be set"},
		{"config.provider.vonage.api_key=p", "config.provider.vonage.api_key / api_secret / signature_secret must not be set"},
		{"config.provider.vonage.api_secret=p", "config.provider.vonage.api_key / api_secret / signature_secret must not be set"},
		{"config.provider.vonage.signature_secret=p", "config.provider.vonage.api_key / api_secret / signature_secret must not be set"},
		{"config.admin.key=admin-key-0123456789abcdef", "config.admin.key / key_sha256 must not be set"},
		{"config.admin.key_sha256=ab", "config.admin.key / key_sha256 must not be set"},
		{"config.admin.previous_key=admin-key-0123456789abcdef", "config.admin.previous_key / previous_key_sha256 must not be set: use secrets.adminPreviousKey"},
		{"config.admin.previous_key_sha256=ab", "config.admin.previous_key / previous_key_sha256 must not be set"},
		{"config.provider.previous_receipt_secret=p", "config.provider.previous_receipt_secret must not be set: use secrets.previousReceiptSecret"},
		{"config.producers[0].name=a", "config.producers must not be set"},
	} {
		out, err := renderChart(t, bin, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err %v, want the render refused with %q:\n%s", tc.set, err, tc.want, out)
		}
	}
	for _, k := range chartSecretKeys(t) {
		out, err := renderChart(t, bin, "--set", "secrets."+k+"=1234")
		if want := "secrets." + k + " must be a string: quote it"; err == nil || !strings.Contains(out, want) {
			t.Errorf("--set secrets.%s=1234: err %v, want the render refused with %q:\n%s", k, err, want, out)
		}
	}
}

// notesTemplate shows the notes in helm template's output (helm install
// --dry-run still asks a cluster): a ConfigMap that holds them.
const notesTemplate = `apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
data:
  notes: |
{{ include "smsgw/templates/NOTES.txt" . | indent 4 }}
`

// TestChartAdminPort: with config.admin.listen set (the default) the Service always has
// the admin port (service.adminPort only sets its number), and the notes
// send the stats call there, where the admin routes are.
func TestChartAdminPort(t *testing.T) {
	bin := helm(t)
	chart := filepath.Join(t.TempDir(), "smsgw")
	if err := os.CopyFS(chart, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chart, "templates", "zz-notes.yaml"), []byte(notesTemplate), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		set       []string
		port      string // the Service's admin port; "": none
		statsPort string
	}{
		{name: "the default (admin.listen :9091)", port: "9091", statsPort: "9091"},
		{name: "no admin.listen", set: []string{"config.admin.listen="}, port: "", statsPort: "8080"},
		{name: "admin.listen", set: []string{"config.admin.listen=:9091"}, port: "9091", statsPort: "9091"},
		{name: "admin.listen, adminPort 9100", set: []string{"config.admin.listen=:9091", "service.adminPort=9100"}, port: "9100", statsPort: "9100"},
		{name: `admin.listen, adminPort ""`, set: []string{"config.admin.listen=:9091", "service.adminPort="}, port: "9091", statsPort: "9091"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "smsgw", chart, "-f", chartEmbedded,
				"--show-only", "templates/service.yaml", "--show-only", "templates/zz-notes.yaml"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			b, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
			out := string(b)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			m := regexp.MustCompile(`- name: admin\s+port: (\d+)`).FindStringSubmatch(out)
			switch {
			case tc.port == "" && m != nil:
				t.Errorf("the Service has an admin port %s:\n%s", m[1], out)
			case tc.port != "" && (m == nil || m[1] != tc.port):
				t.Errorf("the Service's admin port: %q, want %s:\n%s", m, tc.port, out)
			}
			if want := "localhost:" + tc.statsPort + "/v1/admin/stats"; !strings.Contains(out, want) {
				t.Errorf("the notes do not say %q:\n%s", want, out)
			}
			if want := "port-forward svc/smsgw 8080 " + tc.port + "\n"; tc.port != "" && !strings.Contains(out, want) {
				t.Errorf("the notes do not say %q:\n%s", want, out)
			}
		})
	}
}

// diaryWords is how a text speaks of the work that made the product
// instead of the product: a numbered stop, issue, helper, session or
// finding; a figure said to be re-run at some commit's hash; "this",
// "last" or "next" before the word stop or session; a review called the
// last one; a day, week or month before now. Code, comments, tests, docs
// and the chart name the behaviour instead.
var diaryWords = regexp.MustCompile(`(?i)\b(?:(?:stop|issue|helper|session|finding)s? #?[0-9]+\b|re-?run at [0-9a-f]{7,40}\b|(?:this|last|previous|next) (?:stop|session)\b|the last\s+review\b|an? (?:week|day|month) ago\b)`)

// TestNoDiaryWords: no tracked file speaks of how the product was made.
func TestNoDiaryWords(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found: the tracked files cannot be listed")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the tracked files cannot be listed", err)
	}
	checked := 0
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range diaryWords.FindAllString(line, -1) {
				t.Errorf("%s:%d: %q speaks of how the product was made; name the behaviour instead", name, i+1, m)
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d tracked text files checked: is the listing still right?", checked)
	}
}
