// Package layering holds one test: every package of the module imports only
// the packages of ours that the table below allows (docs/design.md
// section 4). Test files are not checked: a test may use any helper.
package layering

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "smsgw"

// allowed lists, for every package of the module, the packages of ours it
// may import, by path inside the module. A package missing from the table
// fails the test: a new package, or a new import between packages, is a
// design decision and gets its line here. Rows for packages that do not
// exist yet describe the layout the team is moving to.
var allowed = map[string][]string{
	// Leaves.
	"api":                  {},
	"internal/sms":         {},
	"internal/keyspace":    {},
	"internal/gcra":        {}, // the GCRA in Lua, shared by the limiter and the enqueue script
	"internal/dashboard":   {},
	"internal/redistest":   {},
	"internal/testclient":  {}, // a test's HTTP request sent, read and closed in one call
	"internal/layering":    {},
	"internal/logsample":   {},
	"internal/logtest":     {},
	"internal/metricdef":   {}, // declares and registers Prometheus metrics, one call each
	"internal/tick":        {}, // the background loops (Loop) and the quiet ticker
	"internal/sms/smstest": {"internal/sms"},

	// Deciders and stores: they know nothing of who calls them.
	"internal/limiter":        {"internal/keyspace", "internal/gcra"},
	"internal/limiter/mutate": {},
	"internal/queue":          {"internal/sms"},
	"internal/queue/embedded": {"internal/metricdef", "internal/queue", "internal/sms"},
	"internal/queue/redisq":   {"internal/metricdef", "internal/queue", "internal/sms", "internal/keyspace", "internal/gcra", "internal/queue/redisq/luasrc", "internal/queue/redisq/persistence", "internal/queue/redisq/lanes"},
	// The Lua fragments the queue's scripts share, and the check that Redis persists the queue.
	"internal/queue/redisq/luasrc":      {},
	"internal/queue/redisq/lanes":       {"internal/queue", "internal/sms", "internal/queue/redisq/luasrc"},
	"internal/queue/redisq/persistence": {},
	"internal/queue/queuetest":          {"internal/queue", "internal/sms", "internal/sms/smstest"},
	"internal/state":                    {"internal/keyspace", "internal/limiter", "internal/sms"},
	"internal/state/statetest":          {"internal/state", "internal/sms"},
	"internal/history":                  {"internal/keyspace", "internal/tick", "internal/sms"},

	// Providers: the seam, its adapters, the simulator, the conformance suite.
	"internal/provider":              {"internal/sms"},
	"internal/provider/httpprov":     {"internal/provider", "internal/sms"},
	"internal/provider/twilio":       {"internal/provider", "internal/provider/httpprov", "internal/sms"},
	"internal/provider/vonage":       {"internal/provider", "internal/provider/httpprov", "internal/sms"},
	"internal/provider/sim":          {"internal/provider", "internal/provider/httpprov", "internal/sms", "internal/tick"},
	"internal/provider/providertest": {"internal/provider", "internal/provider/httpprov", "internal/sms"},

	// The send loop.
	"internal/dispatch": {"internal/limiter", "internal/logsample", "internal/metricdef", "internal/tick", "internal/provider", "internal/queue", "internal/sms"},

	// Admission policy: whether a message may be accepted, and the
	// decorators the send loop is handed (the operator pause, opt-outs).
	// It speaks no HTTP: its refusals are rejections the API maps.
	"internal/admission": {"internal/config", "internal/dispatch", "internal/limiter", "internal/metricdef", "internal/queue", "internal/sms",
		"internal/state", "internal/tick"},

	// What operators read and do: live stats, metrics, the send history
	// recorder, the desk behind the admin API (stats, history, pause).
	"internal/opsview": {"internal/admission", "internal/config", "internal/dispatch", "internal/history", "internal/limiter", "internal/logsample", "internal/metricdef",
		"internal/provider", "internal/queue", "internal/sms", "internal/state", "internal/tick"},

	// The HTTP edge and handlers.
	"internal/httpapi/fastdecode": {},
	// An accepted message's answer: its body, JSON and stored form.
	"internal/httpapi/accepted": {"internal/sms", "internal/state"},
	// The fast-path OTP records written in the background.
	"internal/httpapi/otprecords": {"internal/logsample"},
	"internal/httpapi/usageapi":   {"internal/metricdef", "internal/queue", "internal/sms"},
	// Every signed inbound message to the routing of replies.
	"internal/httpapi/inboundreply": {"internal/admission", "internal/provider"},
	// Failed authentications per client address.
	"internal/httpapi/auththrottle": {},
	// GET and DELETE /v1/batches/{id}: the queue's index of batches.
	"internal/httpapi/batches": {"internal/queue", "internal/sms"},
	"internal/httpapi": {"api", "internal/admission", "internal/config", "internal/dispatch",
		"internal/httpapi/accepted", "internal/httpapi/auththrottle", "internal/httpapi/batches", "internal/httpapi/fastdecode", "internal/httpapi/inboundreply", "internal/httpapi/otprecords", "internal/httpapi/usageapi", "internal/limiter", "internal/logsample", "internal/opsview", "internal/provider",
		"internal/queue", "internal/sms", "internal/state", "internal/webhook"},

	// Status callbacks to producers: the outbox and HTTP, nothing of sending.
	"internal/webhook": {"internal/logsample", "internal/metricdef", "internal/queue"},

	// Configuration: may use the parts it configures for their defaults and
	// checks (each provider adapter validates its own settings).
	"internal/config": {"internal/sms", "internal/keyspace", "internal/limiter", "internal/provider",
		"internal/provider/httpprov", "internal/provider/twilio", "internal/provider/vonage", "internal/queue",
		"internal/dispatch"},

	// The application and what runs it.
	"internal/gateway": {"api", "internal/admission", "internal/httpapi", "internal/httpapi/auththrottle", "internal/httpapi/inboundreply", "internal/httpapi/usageapi", "internal/opsview", "internal/tick", "internal/config", "internal/dispatch", "internal/keyspace", "internal/limiter", "internal/logsample",
		"internal/provider", "internal/provider/httpprov", "internal/provider/twilio", "internal/provider/vonage",
		"internal/queue", "internal/queue/embedded", "internal/queue/redisq", "internal/sms", "internal/state",
		"internal/history", "internal/webhook"},
	"internal/bench": {"internal/limiter", "internal/provider", "internal/provider/httpprov", "internal/provider/sim",
		"internal/sms", "internal/keyspace", "internal/tick"},
	// The bench scenario of sender lanes: real replicas against the simulator.
	"internal/bench/senderlanes": {"internal/bench", "internal/config", "internal/gateway", "internal/provider/sim", "internal/tick"},

	"internal/demo":      {"internal/config", "internal/dashboard", "internal/gateway", "internal/provider/sim"},
	"internal/helmcheck": {},
	"internal/testtimes": {}, // make test's report: results as they end, the slowest at the end
	"cmd/smsgw": {"internal/bench", "internal/bench/senderlanes", "internal/config", "internal/dashboard", "internal/demo", "internal/gateway",
		"internal/provider/sim"},
	"tests":  {},
	"deploy": {},
}

// never are the design's import rules (docs/design.md section 4): a
// package matching the key never imports one matching any of its values.
// The allowed table must keep them too, so that widening a row cannot
// quietly break one. "p/..." matches p and every package below it; "..."
// matches every package.
var never = map[string][]string{
	"internal/sms":      {"..."},
	"internal/keyspace": {"internal/dispatch/...", "internal/gateway/...", "internal/config/...", "internal/state/..."},
	"internal/limiter/...": {"internal/dispatch/...", "internal/gateway/...", "internal/config/...", "internal/state/...",
		"internal/queue/...", "internal/provider/..."},
	"internal/queue/...": {"internal/dispatch/...", "internal/gateway/...", "internal/config/...", "internal/state/...",
		"internal/limiter/...", "internal/provider/..."},
	"internal/provider/...": {"internal/dispatch/...", "internal/gateway/...", "internal/config/...", "internal/state/...",
		"internal/limiter/...", "internal/queue/..."},
	"internal/state/...": {"internal/dispatch/...", "internal/gateway/..."},
	"internal/dispatch/...": {"internal/gateway/...", "internal/config/...", "internal/httpapi/...", "internal/admission/...",
		"internal/opsview/..."},
	// Admission decides without HTTP; the ops view reads, it serves nothing.
	"internal/admission/...": {"internal/httpapi/...", "internal/gateway/...", "internal/opsview/..."},
	"internal/opsview/...":   {"internal/httpapi/...", "internal/gateway/..."},
	"internal/httpapi/...":   {"internal/gateway/..."},
	"internal/tick":          {"..."},
	// Callbacks never touch the provider's rate or the send loop.
	"internal/webhook/...": {"internal/dispatch/...", "internal/gateway/...", "internal/config/...",
		"internal/limiter/...", "internal/provider/..."},
	"internal/config/...": {"internal/gateway/..."},
	"...":                 {"cmd/..."},
}

// TestImportsFollowTheLayers reads the imports of every package of the
// module (build constraints of this platform, test files excluded) and
// checks each against the allowed table and the rules.
func TestImportsFollowTheLayers(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	imports := moduleImports(t, root)
	if len(imports) < 10 {
		t.Fatalf("found only %d packages under %s", len(imports), root)
	}
	for _, pkg := range sortedKeys(imports) {
		ok, known := allowed[pkg]
		if !known {
			t.Errorf("%s is not in the allowed table: add a row saying which of our packages it may import", pkg)
			continue
		}
		for _, imp := range imports[pkg] {
			if !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s, which the allowed table does not allow", pkg, imp)
			}
			if r, broken := breaks(pkg, imp); broken {
				t.Errorf("%s imports %s: the design says %s never imports %s", pkg, imp, r.from, r.to)
			}
		}
	}
}

// TestAllowedTableKeepsTheRules: no row of the allowed table permits an
// import the design forbids.
func TestAllowedTableKeepsTheRules(t *testing.T) {
	t.Parallel()
	for _, pkg := range sortedKeys(allowed) {
		for _, imp := range allowed[pkg] {
			if r, broken := breaks(pkg, imp); broken {
				t.Errorf("the allowed table lets %s import %s, but %s never imports %s", pkg, imp, r.from, r.to)
			}
			if _, known := allowed[imp]; !known {
				t.Errorf("the allowed table lets %s import %s, which has no row of its own", pkg, imp)
			}
		}
	}
}

// TestRulesMatch pins down the pattern language of never, so that a typo in
// a rule cannot make it match nothing.
func TestRulesMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to string
		broken   bool
	}{
		{"internal/sms", "internal/queue", true},
		{"internal/queue/redisq", "internal/dispatch", true},
		{"internal/queue/redisq", "internal/state", true},
		{"internal/provider/sim", "internal/gateway", true},
		{"internal/dispatch", "internal/config", true},
		{"internal/state", "internal/dispatch", true},
		{"internal/gateway", "cmd/smsgw", true},
		{"internal/gateway", "internal/dispatch", false},
		{"internal/dispatch", "internal/queue", false},
		{"internal/queuex", "internal/dispatch", false}, // a prefix is a whole path element
		{"internal/state", "internal/keyspace", false},
		{"internal/admission", "internal/httpapi", true},
		{"internal/dispatch", "internal/httpapi", true},
		{"internal/dispatch", "internal/admission", true},
		{"internal/opsview", "internal/httpapi", true},
		{"internal/httpapi/fastdecode", "internal/gateway", true},
		{"internal/httpapi", "internal/admission", false},
	} {
		if _, got := breaks(tc.from, tc.to); got != tc.broken {
			t.Errorf("%s → %s: broken=%v, want %v", tc.from, tc.to, got, tc.broken)
		}
	}
}

// breaks returns the rule (key and value of never) that forbids from
// importing to.
func breaks(from, to string) (rule, bool) {
	for _, f := range sortedKeys(never) {
		if !matches(f, from) {
			continue
		}
		for _, t := range never[f] {
			if matches(t, to) {
				return rule{f, t}, true
			}
		}
	}
	return rule{}, false
}

type rule struct{ from, to string }

// matches: "*" and "..." match any package; "p/..." matches p and every
// package below it; anything else matches itself.
func matches(pattern, pkg string) bool {
	if pattern == "*" || pattern == "..." {
		return true
	}
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == p || strings.HasPrefix(pkg, p+"/")
	}
	return pattern == pkg
}

// moduleImports maps every package directory of the module (path inside
// the module) to the packages of ours its non-test files import.
func moduleImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, none := err.(*build.NoGoError); none {
				return nil // no Go files at all (a package of test files alone gets a row with no imports)
			}
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		var ours []string
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				ours = append(ours, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		out[filepath.ToSlash(rel)] = ours
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
