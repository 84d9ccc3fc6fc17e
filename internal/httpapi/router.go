// Package httpapi serves the HTTP API: the router and its middleware,
// authentication, request decoding, the handlers, and problem.go, the one
// place an error becomes an HTTP answer.
package httpapi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"smsgw/internal/httpapi/auththrottle"
	"smsgw/internal/httpapi/batches"
	"smsgw/internal/httpapi/fastdecode"
	"smsgw/internal/httpapi/inboundreply"
	"smsgw/internal/httpapi/usageapi"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"smsgw/api"
	"smsgw/internal/config"
	"smsgw/internal/logsample"
	"smsgw/internal/opsview"
	"smsgw/internal/provider"
	"smsgw/internal/state"
)

// Server holds what the handlers need: the configuration, the log and the
// clock, and a few collaborators, each one job. It is built once and never
// changes after, except the readiness flag.
type Server struct {
	Cfg     config.Config
	Log     *slog.Logger
	Now     func() time.Time
	Metrics *opsview.APIMetrics

	Admit    Admission     // whether a message is accepted: admission.Order on its executor
	Store    Stores        // messages and first answers
	Dispatch Dispatcher    // the send loop: the OTP fast path, and its wake-ups
	Ops      Operations    // what operators read and do
	Served   Served        // what is served as it is: metrics, dashboard, usage, readiness checks
	Edge     Edge          // who may call, and how much body they may send
	Hooks    ProviderHooks // what the provider and producers' callbacks exchange with us

	OTPRecords OTPRecords
	Stopping   atomic.Bool

	unknownLog logsample.Sampler // unmatched receipts
	// webhookBodyLog samples the receipts and inbound messages whose body
	// was over the bound or cut short (readWebhook).
	webhookBodyLog logsample.Sampler
	// readyLog samples the failed readiness checks: /readyz takes no key.
	readyLog logsample.Sampler
}

// Stores are the stores the handlers read and write besides admission's.
type Stores struct {
	Queue MessageStore
	Idem  state.Idempotency // first answers and in-flight locks (idempotency.go)
}

// Served is what the routes serve as it is: the metrics registry, the
// dashboard, the usage routes (usageapi), the readiness checks.
type Served struct {
	Gatherer  prometheus.Gatherer
	Dashboard http.Handler
	Checks    []ReadyCheck
	Usage     *usageapi.Handler // GET /v1/usage and /v1/admin/usage; nil: not served
}

// Edge is the HTTP layer's own gate, not a collaborator: keys, the
// failed-key throttle, the body gate (bodygate.go), the trusted proxies.
type Edge struct {
	Auth         *Authenticator
	AuthThrottle *auththrottle.Table
	BodyGate     *BodyGate
	Trusted      []netip.Prefix
}

// ProviderHooks are the provider's webhooks and what they feed: receipts,
// inbound messages (opt-outs, replies), and producers' status callbacks.
// A nil member is a hook not served.
type ProviderHooks struct {
	Receipts  provider.ReceiptParser // the provider's receipt check; nil: receipts refused
	Inbound   provider.InboundParser // the provider's inbound-message check; nil: inbound messages refused
	OptOuts   OptOutList             // recipients' opt-outs and opt-ins (inbound.go)
	Replies   inboundreply.Replies   // every signed inbound message, to the producer that last messaged its sender; nil: none
	Callbacks CallbackOutbox
	// Said applies what a receipt says beyond its message
	// (provider.Receipt.Said: a sender's or the account's pause).
	Said func(ctx context.Context, pe *provider.Error, sender string) time.Duration
}

// Routes builds the chi router of every route. Every route here must be a
// path of api/openapi.yaml (TestRoutesMatchSpec).
func (s *Server) Routes() http.Handler { return s.Router(true, true) }

// Router builds a chi router with the producer routes (public), the
// operator routes (/metrics, /v1/admin/*, the dashboard: admin), or both;
// /healthz and /readyz are on every router. With admin.listen set the App
// serves them on two listeners.
func (s *Server) Router(public, admin bool) chi.Router {
	r := chi.NewRouter()
	r.Use(s.RequestID, s.instrument, s.Recoverer) // RequestID first: the access log names the id and the client
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, r, errorf(KindNotFound, "no such route"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allow := allowed(r, req.URL.Path)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.WriteError(w, req, errorf(kindMethodNotAllowed, opsview.MethodNamed(req.Method)+" is not allowed here; use "+strings.Join(allow, " or ")))
	})

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	if admin {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.Served.Gatherer, promhttp.HandlerOpts{}))
	}
	r.Get("/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, "application/yaml", http.StatusOK, api.OpenAPI)
	})

	if public {
		// POST /send is POST /v1/messages under the name the producers'
		// contract gives it: the same chain, the same handler.
		r.With(s.limitBody, s.authProducer, s.gateBody).Post("/send", s.postMessage)
	}
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.limitBody)
		if public {
			r.Group(func(r chi.Router) {
				r.Use(s.authProducer)
				r.With(s.gateBody).Post("/messages", s.postMessage)
				r.With(s.gateBody).Post("/messages/batch", s.postBatch)
				r.Get("/messages/{id}", s.getMessage)
				r.Delete("/messages/{id}", s.deleteMessage)
				bt := s.batchAPI()
				r.Get("/batches/{id}", bt.Get)
				r.Delete("/batches/{id}", bt.Delete)
				r.With(s.gateBody).Post("/otp", s.postOTP)
				if s.Served.Usage != nil {
					r.Get("/usage", s.Served.Usage.Own)
				}
			})
			// No bearer key: each adapter checks its vendor's signature.
			r.Post("/receipts/{adapter}", s.postReceipt)
			r.Post("/inbound/{adapter}", s.postInbound)
		}
		if !admin {
			return
		}
		r.Route("/admin", func(r chi.Router) {
			r.Use(s.authAdmin)
			r.Get("/stats", s.adminStats)
			r.Get("/history", s.adminHistory)
			r.Get("/messages/{id}", s.adminGetMessage)
			r.Post("/pause", s.adminPause)
			r.Post("/resume", s.adminResume)
			r.Get("/dead-letters", s.adminDeadLetters)
			r.Post("/dead-letters/{id}/retry", s.adminRetryDead)
			r.Get("/callbacks/dead", s.adminDeadCallbacks)
			r.Post("/callbacks/dead/{id}/retry", s.adminRetryCallback)
			r.Get("/suppressions", s.adminListSuppressions)
			r.Post("/suppressions", s.adminAddSuppression)
			r.Delete("/suppressions/{number}", s.adminRemoveSuppression)
			if s.Served.Usage != nil {
				r.Get("/usage", s.Served.Usage.All)
			}
		})
	})
	if admin && s.Served.Dashboard != nil {
		r.Get("/dashboard", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/dashboard/", http.StatusMovedPermanently)
		})
		r.Handle("/dashboard/*", s.Served.Dashboard) // served with the full path
	}
	return r
}

// routeMethods are the methods a route of the API may have.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed lists the methods path has in routes, for a 405's Allow (RFC
// 9110 section 15.5.6: the server must send it). chi knows them but keeps
// them to its own 405 handler, which we replace to answer a problem.
func allowed(routes chi.Routes, path string) []string {
	var out []string
	for _, m := range routeMethods {
		if routes.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	return out
}

// RequestID takes the caller's X-Request-Id when it is short and plain (it
// ends up in logs), otherwise makes one, and echoes it on the answer; it
// also records the client address (ResolveClientIP). Both go into the
// request's context as one value, so a request pays for one context and
// one copy of the request, not two. chi's RequestID would accept any
// header value.
func (s *Server) RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(middleware.RequestIDHeader)
		if !fastdecode.PlainToken(id, 64) {
			id = rand.Text()[:20]
		}
		w.Header().Set(middleware.RequestIDHeader, id)
		ctx := &edgeContext{Context: r.Context(), id: id, ip: s.ResolveClientIP(r)}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// edgeContext carries the request id (under chi's key, for
// middleware.GetReqID) and the client address (clientIP).
type edgeContext struct {
	context.Context
	id, ip string
}

func (c *edgeContext) Value(key any) any {
	switch key {
	case middleware.RequestIDKey:
		return c.id
	case clientIPKey{}:
		return c.ip
	}
	return c.Context.Value(key)
}

// Recoverer turns a handler panic into a logged 500 instead of a dropped
// connection. http.ErrAbortHandler keeps its meaning.
func (s *Server) Recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.WriteError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type clientIPKey struct{}

// ResolveClientIP is the client address of r: the peer, or the right-most
// untrusted X-Forwarded-For hop behind a trusted proxy.
func (s *Server) ResolveClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.isTrusted(peer) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // garbage from here leftwards cannot be trusted
		}
		if !s.isTrusted(a.Unmap()) {
			return a.Unmap().String()
		}
		peer = a.Unmap()
	}
	return peer.String()
}

func (s *Server) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.Edge.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP returns the client address the request was attributed to: the
// peer, or, when the peer is a trusted proxy, the right-most
// X-Forwarded-For entry that is not itself a trusted proxy (everything
// left of that could be written by the client).
func clientIP(ctx context.Context) string {
	ip, _ := ctx.Value(clientIPKey{}).(string)
	return ip
}

// limitBody refuses bodies over http.max_body_bytes: up front from
// Content-Length, and while reading for chunked bodies.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := s.Cfg.HTTP.MaxBodyBytes
		if r.ContentLength > limit {
			s.WriteError(w, r, errorf(kindTooLarge, "the request body is larger than "+strconv.FormatInt(limit, 10)+" bytes"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

// statusWriter remembers the status for metrics and logs.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts and times every request by route pattern (a closed
// set), never by raw path.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.Metrics.Observe(route, r.Method, sw.status, time.Since(start))
		if s.Log.Enabled(r.Context(), slog.LevelDebug) {
			s.Log.DebugContext(r.Context(), "http request", "method", opsview.MethodLabel(r.Method), "route", route, "status", sw.status,
				"duration", time.Since(start), "client_ip", clientIP(r.Context()),
				"request_id", middleware.GetReqID(r.Context()))
		}
	})
}

// batchAPI is GET and DELETE /v1/batches/{id} (internal/httpapi/batches).
func (s *Server) batchAPI() *batches.API {
	return &batches.API{Queue: s.Store.Queue, Now: s.Now, CanceledBy: func(n int) { s.Metrics.BatchCanceled.Add(float64(n)) },
		Producer: func(r *http.Request) string { return producerFrom(r.Context()).Name },
		OK:       func(w http.ResponseWriter, v any) { writeJSON(w, s.Log, "application/json", http.StatusOK, v) },
		Fail: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, batches.ErrNotFound) {
				err = errorf(KindNotFound, "no such batch")
			}
			s.WriteError(w, r, err)
		}}
}
