package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"smsgw/api"
	"smsgw/internal/config"
	"smsgw/internal/logtest"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
)

func init() {
	// /openapi.yaml is text (type: string), as a client reads it; the
	// validator's own YAML decoder would hand it a map.
	// So is Twilio's TwiML answer to an inbound message (text/xml).
	asText := func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	}
	openapi3filter.RegisterBodyDecoder("application/yaml", asText)
	openapi3filter.RegisterBodyDecoder("text/xml", asText)
}

func TestMain(m *testing.M) {
	// After failed dials (TestOTPWithRedisDown stops its Redis) go-redis
	// keeps one retry goroutine sleeping up to a second past Close.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// keys of the test producers (clear text; the config hashes them).
const (
	keyNotify = "notify-key-0123456789"  // transactional, marketing; generous quota
	keyLogin  = "login-key-01234567890"  // otp only
	keySlow   = "slow-key-012345678901"  // transactional; 2/s, burst 2
	keyCapped = "capped-key-0123456789"  // transactional; max_outstanding 2
	keyAdmin  = "admin-key-01234567890a" // admin
)

type mode string

const (
	embeddedMode mode = "embedded"
	redisMode    mode = "redis"
)

var modes = []mode{embeddedMode, redisMode}

// eachMode runs fn as a parallel subtest for every store mode, named
// after the mode.
func eachMode(t *testing.T, fn func(t *testing.T, m mode)) {
	t.Helper()
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			fn(t, m)
		})
	}
}

// testConfig is a valid configuration for m, listening on a free port,
// sending to the simulator at simURL.
func testConfig(t testing.TB, m mode, simURL string) config.Config {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Store.Path = t.TempDir()
	cfg.Account = redistest.Prefix(t)
	if m == redisMode {
		cfg.Redis.Addr = redistest.Addr(t)
	}
	cfg.Provider.HTTP.URL = simURL + "/send"
	cfg.Provider.Timeout = 2 * time.Second
	cfg.Producers = []config.Producer{
		{Name: "notify", Key: keyNotify, Classes: []string{"transactional", "marketing"}, Rate: 5000, Burst: 5000},
		{Name: "login", Key: keyLogin, Classes: []string{"otp"}, Rate: 50, Burst: 100},
		{Name: "slow", Key: keySlow, Classes: []string{"transactional"}, Rate: 2, Burst: 2},
		{Name: "capped", Key: keyCapped, Classes: []string{"transactional"}, Rate: 100, Burst: 100, MaxOutstanding: 2},
	}
	cfg.Admin.Key = keyAdmin
	cfg.Dispatch.ShutdownTimeout = 5 * time.Second
	// Most tests send many OTPs to one number; the per-number cap (on by
	// default) is tested where a test sets it (TestOTPCapIsPerProducer,
	// TestOTPCapOnByDefault).
	cfg.Protection.OTPPerNumber.Limit = 0
	return cfg
}

// specDoc is api/openapi.yaml, loaded and validated once.
var specDoc = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

// spec routes requests to the spec's operations.
var spec = sync.OnceValues(func() (routers.Router, error) {
	doc, err := specDoc()
	if err != nil {
		return nil, err
	}
	// Route on paths alone: the test server's host and port vary.
	byPath := *doc
	byPath.Servers = nil
	return legacy.NewRouter(&byPath)
})

// harness is one running App with its simulator, reached over real HTTP.
type harness struct {
	t      testing.TB
	app    *App
	sim    *sim.Sim
	base   string
	cfg    config.Config
	client *http.Client
	logs   *logtest.Buffer
}

// newSim starts a provider simulator (unlimited unless cfg says so).
func newSim(t testing.TB, cfg sim.Config) *sim.Sim {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// start runs an App in mode m; edit may change the config first.
func start(t testing.TB, m mode, edit func(*config.Config)) *harness {
	t.Helper()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, m, s.URL())
	if edit != nil {
		edit(&cfg)
	}
	return startWith(t, cfg, s)
}

func startWith(t testing.TB, cfg config.Config, s *sim.Sim) *harness {
	t.Helper()
	return startOpts(t, cfg, s, Options{})
}

// startClock runs an App in mode m whose clock (message times, estimates,
// quiet hours) is now.
func startClock(t testing.TB, m mode, edit func(*config.Config), now func() time.Time) *harness {
	t.Helper()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, m, s.URL())
	if edit != nil {
		edit(&cfg)
	}
	return startOpts(t, cfg, s, Options{Now: now})
}

// startOpts runs an App with opts (the logger is the harness's).
func startOpts(t testing.TB, cfg config.Config, s *sim.Sim, opts Options) *harness {
	t.Helper()
	logs := &logtest.Buffer{}
	level := slog.LevelDebug // every log statement runs, so the phone check below covers them
	if _, bench := t.(*testing.B); bench {
		level = slog.LevelWarn
	}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))
	app, err := New(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := app.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	h := &harness{t: t, app: app, sim: s, base: "http://" + app.Addr(), cfg: cfg,
		client: &http.Client{Transport: tr, Timeout: 20 * time.Second}, logs: logs}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		tr.CloseIdleConnections()
		// Every test sends to +819012345678; logs may only show it masked.
		if strings.Contains(logs.String(), "9012345678") {
			t.Errorf("a phone number in the logs:\n%s", logs.String())
		}
	})
	return h
}

// twoReplicas starts two gateways on one Redis account (each with a store
// directory of its own), sending to one simulator; edit, if not nil,
// changes the configuration of both.
func twoReplicas(t *testing.T, edit func(*config.Config)) (a, b *harness) {
	t.Helper()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	if edit != nil {
		edit(&cfg)
	}
	a = startWith(t, cfg, s)
	cfg.Store.Path = t.TempDir()
	return a, startWith(t, cfg, s)
}

// startApp starts app and stops it when t ends.
func startApp(t testing.TB, app *App) {
	t.Helper()
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// redisToStop is the configuration of a gateway on a Redis server of its
// own (srv, to stop or kill), sending to s, whose Redis calls give up
// after 200ms.
func redisToStop(t testing.TB) (srv *redistest.Server, s *sim.Sim, cfg config.Config) {
	t.Helper()
	srv = redistest.StartServer(t, redistest.ServerOptions{})
	s = newSim(t, sim.Config{})
	cfg = testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = srv.Addr
	cfg.Redis.Timeout = 200 * time.Millisecond
	return srv, s, cfg
}

// statusEvent decodes a callback body and checks it against the spec's
// StatusEvent schema.
func statusEvent(t testing.TB, doc *openapi3.T, id, body string) map[string]any {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatal(err)
	}
	if err := doc.Components.Schemas["StatusEvent"].Value.VisitJSON(ev); err != nil {
		t.Errorf("event %s does not match StatusEvent: %v\n%s", id, err, body)
	}
	return ev
}

// with returns the harness reporting to t (for subtests).
func (h *harness) with(t testing.TB) *harness {
	c := *h
	c.t = t
	return &c
}

// reply is a response read in full and checked against the spec.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem decodes a problem+json reply.
func (r reply) problem(t testing.TB) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p map[string]any
	r.json(t, &p)
	return p
}

// fields lists the field names of a problem's errors.
func (r reply) fields(t testing.TB) []string {
	t.Helper()
	var out []string
	errs, _ := r.problem(t)["errors"].([]any)
	for _, e := range errs {
		out = append(out, e.(map[string]any)["field"].(string))
	}
	return out
}

type req struct {
	method, path, key string
	body              any // string/[]byte sent as is; anything else as JSON
	header            map[string]string
}

// do sends r and validates the answer against api/openapi.yaml.
func (h *harness) do(r req) reply {
	h.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	case io.Reader:
		body = b // length unknown: sent chunked
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		body = bytes.NewReader(raw)
	}
	hr, err := http.NewRequestWithContext(h.t.Context(), r.method, h.base+r.path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		hr.Header.Set("Authorization", "Bearer "+r.key)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	return h.send(hr)
}

// send sends hr and validates the answer against api/openapi.yaml.
func (h *harness) send(hr *http.Request) reply {
	h.t.Helper()
	resp, err := h.client.Do(hr)
	if err != nil {
		h.t.Fatalf("%s %s: %v", hr.Method, hr.URL.RequestURI(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	out := reply{status: resp.StatusCode, header: resp.Header, body: raw}
	checkSpec(h.t, hr, out)
	return out
}

// checkSpec validates a real response against api/openapi.yaml: the
// status must be documented for the route, headers and body must match.
func checkSpec(t testing.TB, hr *http.Request, r reply) {
	t.Helper()
	router, err := spec()
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	if r.status == http.StatusMethodNotAllowed {
		// The method is not in the spec for this path: validate against
		// the 405 its operations document, reached with a method it has.
		allow := strings.Split(r.header.Get("Allow"), ", ")
		if allow[0] == "" {
			t.Fatalf("%s %s: 405 without Allow", hr.Method, hr.URL.Path)
		}
		hr = hr.Clone(hr.Context())
		hr.Method = allow[0]
	}
	route, params, err := router.FindRoute(hr)
	if err != nil {
		if r.status == http.StatusNotFound {
			return // not a route of the API: nothing to validate against
		}
		t.Fatalf("%s %s: no route in the spec: %v", hr.Method, hr.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route},
		Status:                 r.status,
		Header:                 r.header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s → %d does not match api/openapi.yaml: %v\nbody: %s", hr.Method, hr.URL.Path, r.status, err, r.body)
	}
	if undeclared := undeclaredHeaders(route.Operation, r); len(undeclared) > 0 {
		t.Errorf("%s %s → %d sends headers api/openapi.yaml does not declare for it: %v", hr.Method, hr.URL.Path, r.status, undeclared)
	}
}

// plumbing are the headers of HTTP itself, which no answer of the spec
// declares; every other header an answer carries must be declared on it.
var plumbing = []string{"Content-Type", "Content-Length", "Date", "Cache-Control", "Vary", "Transfer-Encoding", "Connection"}

// undeclaredHeaders lists the headers of r that op's answer for r.status
// does not declare.
func undeclaredHeaders(op *openapi3.Operation, r reply) []string {
	resp := op.Responses.Status(r.status)
	if resp == nil {
		resp = op.Responses.Default()
	}
	if resp == nil || resp.Value == nil {
		return nil // an undocumented status: ValidateResponse reports it
	}
	var out []string
	for name := range r.header {
		if slices.Contains(plumbing, name) {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(resp.Value.Headers)), func(d string) bool { return strings.EqualFold(d, name) }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (h *harness) post(path, key string, body any, header ...string) reply {
	h.t.Helper()
	r := req{method: http.MethodPost, path: path, key: key, body: body, header: map[string]string{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.header[header[i]] = header[i+1]
	}
	return h.do(r)
}

func (h *harness) get(path, key string) reply {
	h.t.Helper()
	return h.do(req{method: http.MethodGet, path: path, key: key})
}

// msg is a valid message request.
func msg(class string, extra ...any) map[string]any {
	m := map[string]any{"to": "+819012345678", "body": "Your parcel arrives today", "class": class}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// eventually polls cond until it holds or the (generous) patience runs out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sentRefs counts the simulator's accepted sends per gateway message id.
func sentRefs(s *sim.Sim) map[string]int {
	out := map[string]int{}
	for _, r := range s.Accepted() {
		out[r.Reference]++
	}
	return out
}

func wantStatus(t testing.TB, r reply, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body %s", r.status, want, r.body)
	}
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }
