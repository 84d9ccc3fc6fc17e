package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"smsgw/internal/config"
	"smsgw/internal/limiter"
	"smsgw/internal/sms"
)

// producer is one configured producer, ready for admission decisions.
type producer struct {
	Name           string
	hash           [32]byte
	classes        [numClasses]bool
	Ingress        limiter.Rate
	MaxOutstanding int64
	// webhook is set when the producer has a default callback url;
	// callbackAllow are the prefixes a message's callback_url may start with.
	webhook       bool
	callbackAllow []string
}

// callbackAllowed reports whether a message of this producer may send its
// events to u.
func (p *producer) callbackAllowed(u string) bool {
	for _, a := range p.callbackAllow {
		if strings.HasPrefix(u, a) {
			return true
		}
	}
	return false
}

func (p *producer) allowed(c sms.Class) bool { return c.Valid() && p.classes[c] }

// authenticator knows every producer key and the admin key, as SHA-256
// digests only.
type authenticator struct {
	producers []*producer
	admin     [32]byte
	adminOn   bool
}

func newAuthenticator(cfg config.Config) *authenticator {
	a := &authenticator{admin: cfg.Admin.KeyHash(), adminOn: cfg.Admin.Enabled()}
	for _, p := range cfg.Producers {
		pr := &producer{
			Name:           p.Name,
			hash:           p.KeyHash(),
			Ingress:        limiter.Rate{PerSecond: p.Rate, Burst: p.Burst},
			MaxOutstanding: p.MaxOutstanding,
			webhook:        p.Webhook.URL != "",
			callbackAllow:  p.Webhook.Allow,
		}
		for _, c := range p.Classes {
			if cl, err := sms.ParseClass(c); err == nil {
				pr.classes[cl] = true
			}
		}
		a.producers = append(a.producers, pr)
	}
	return a
}

// bearer returns the SHA-256 of the request's bearer key, or false.
func bearer(r *http.Request) ([32]byte, bool) {
	h := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return [32]byte{}, false
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return [32]byte{}, false
	}
	return sha256.Sum256([]byte(key)), true
}

// producerFor compares the digest with every producer in constant time and
// without stopping early, so timing reveals neither the key nor its index.
func (a *authenticator) producerFor(h [32]byte) *producer {
	var found *producer
	for _, p := range a.producers {
		if subtle.ConstantTimeCompare(h[:], p.hash[:]) == 1 {
			found = p
		}
	}
	return found
}

func (a *authenticator) isAdmin(h [32]byte) bool {
	return a.adminOn && subtle.ConstantTimeCompare(h[:], a.admin[:]) == 1
}

type producerKey struct{}

func producerFrom(ctx context.Context) *producer {
	p, _ := ctx.Value(producerKey{}).(*producer)
	return p
}

func (s *server) authProducer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := bearer(r)
		if !ok {
			s.writeError(w, r, errorf(KindUnauthorized, "send Authorization: Bearer <key>"))
			return
		}
		p := s.auth.producerFor(h)
		if p == nil {
			s.log.WarnContext(r.Context(), "unknown producer key", "path", r.URL.Path, "client_ip", ClientIP(r.Context()))
			s.writeError(w, r, errorf(KindUnauthorized, "unknown API key"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), producerKey{}, p)))
	})
}

func (s *server) authAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := bearer(r)
		if !ok {
			s.writeError(w, r, errorf(KindUnauthorized, "send Authorization: Bearer <admin key>"))
			return
		}
		if !s.auth.isAdmin(h) {
			if s.auth.producerFor(h) != nil {
				s.writeError(w, r, errorf(KindForbidden, "this endpoint needs the admin key"))
				return
			}
			s.log.WarnContext(r.Context(), "unknown admin key", "path", r.URL.Path, "client_ip", ClientIP(r.Context()))
			s.writeError(w, r, errorf(KindUnauthorized, "unknown API key"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// numClasses sizes per-class arrays: the classes are otp..marketing.
const numClasses = int(sms.ClassMarketing) + 1
