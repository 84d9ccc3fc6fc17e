package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/config"
)

// Idempotency works in two layers:
//
//   - the queue maps (producer, Idempotency-Key) to the first message for
//     its idempotency window (24 h), so a retried POST never queues a second
//     message, on any replica;
//   - this file keeps the first answer (status and body) for the same window
//     and a short in-flight lock, so a replay gets the same bytes and a retry
//     that races the first request gets 409 instead of waiting on it.
//
// The answer store is Redis (shared by replicas) or, in embedded mode, this
// process's memory, bounded to localAnswerCap answers; an answer evicted or
// lost with a restart is rebuilt from the stored message (same id, class and
// segments; estimated_send_at recomputed).

const (
	// idemLockTTL bounds how long a crashed request can hold a key; it is
	// longer than any request may run (http.write_timeout defaults to 30 s,
	// but an enqueue answers in milliseconds).
	idemLockTTL = 15 * time.Second
	// MaxIdempotencyKeyLen bounds the Idempotency-Key header.
	MaxIdempotencyKeyLen = 255
	localAnswerCap       = 200_000
)

// answer is a stored first answer.
type answer struct {
	Hash     string `json:"h"`           // request hash of the first request
	Status   int    `json:"s"`           // HTTP status of the first answer
	Body     []byte `json:"b"`           // its JSON body
	Location string `json:"l,omitempty"` // its Location header
}

// idemStore keeps first answers and in-flight locks.
type idemStore interface {
	// Acquire returns the stored answer for key if there is one; otherwise
	// it takes the in-flight lock and returns its token; ("", nil) with a
	// nil answer means another request holds the lock.
	Acquire(ctx context.Context, key string, lockTTL time.Duration) (*answer, string, error)
	// Finish stores a (or nothing, when a is nil) and releases the lock
	// if token still holds it.
	Finish(ctx context.Context, key, token string, a *answer) error
}

// idemKey names one (producer, scope, Idempotency-Key) without letting any
// header text into a Redis key.
func idemKey(producer, scope, key string) string {
	h := sha256.New()
	for _, s := range []string{producer, scope, key} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil)[:20])
}

// validIdempotencyKey: 1..255 printable ASCII characters.
func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// response is what a handler wants written; the idempotency layer may
// store and replay it.
type response struct {
	status   int
	body     any
	location string
	replayed bool // the queue said the message already existed
}

// idempotent runs run at most once per Idempotency-Key (when the request
// has one) and writes its answer, replaying the first answer to repeats.
// hash is the digest of the whole request; scope separates endpoints.
func (s *server) idempotent(w http.ResponseWriter, r *http.Request, p *producer, scope, hash string,
	run func(ctx context.Context, idemKey string) (*response, error)) {
	ctx := r.Context()
	key := r.Header.Get("Idempotency-Key")
	if _, present := r.Header["Idempotency-Key"]; !present {
		res, err := run(ctx, "")
		s.writeResponse(w, r, res, err)
		return
	}
	if !validIdempotencyKey(key) {
		s.writeError(w, r, fieldError("Idempotency-Key", fmt.Sprintf("must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)))
		return
	}
	k := idemKey(p.Name, scope, key)
	first, token, err := s.idem.Acquire(ctx, k, idemLockTTL)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("idempotency: acquire: %w", err))
		return
	}
	if first != nil {
		s.replay(w, r, first, hash)
		return
	}
	if token == "" {
		s.writeError(w, r, &Error{Kind: KindInFlight, Detail: "retry after the first request has been answered", RetryAfter: time.Second})
		return
	}
	var stored *answer
	defer func() {
		// The lock is released even when the client has gone away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := s.idem.Finish(ctx, k, token, stored); err != nil {
			s.log.WarnContext(ctx, "idempotency: store answer", "err", err)
		}
	}()
	res, err := run(ctx, key)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := json.Marshal(res.body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.status >= 200 && res.status < 300 {
		stored = &answer{Hash: hash, Status: res.status, Body: body, Location: res.location}
	}
	if res.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if res.location != "" {
		w.Header().Set("Location", res.location)
	}
	writeRaw(w, "application/json", res.status, append(body, '\n'))
}

func (s *server) replay(w http.ResponseWriter, r *http.Request, a *answer, hash string) {
	if a.Hash != hash {
		s.writeError(w, r, errorf(KindKeyReused, "this Idempotency-Key was first used with a different request; use a new key for a new request"))
		return
	}
	s.metrics.replays.Inc()
	w.Header().Set("Idempotent-Replayed", "true")
	if a.Location != "" {
		w.Header().Set("Location", a.Location)
	}
	writeRaw(w, "application/json", a.Status, append(a.Body, '\n'))
}

func (s *server) writeResponse(w http.ResponseWriter, r *http.Request, res *response, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if res.location != "" {
		w.Header().Set("Location", res.location)
	}
	writeJSON(w, s.log, "application/json", res.status, res.body)
}

// redisIdem keeps answers and locks in Redis under the account's hash tag.
type redisIdem struct {
	c    redis.UniversalClient
	keys apiKeys
}

// acquireScript returns the stored answer or takes the in-flight lock.
//
//	KEYS[1] answer key (STRING, JSON answer)   KEYS[2] lock key (STRING, token)
//	ARGV[1] lock token                          ARGV[2] lock TTL ms
//
// Returns {1, answer} when an answer is stored, {2} when the lock was taken,
// {0} when another request holds it.
var acquireScript = redis.NewScript(`
local a = redis.call('GET', KEYS[1])
if a then return {1, a} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
return {0}
`)

// finishScript stores the answer (if any) and releases the lock if the
// caller still holds it.
//
//	KEYS[1] answer key   KEYS[2] lock key
//	ARGV[1] lock token   ARGV[2] answer JSON ("" to store nothing)   ARGV[3] window ms
//
// Returns 1 when the lock was released, 0 when it had passed to another.
var finishScript = redis.NewScript(`
if ARGV[2] ~= '' then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) return 1 end
return 0
`)

func (s *redisIdem) Acquire(ctx context.Context, key string, lockTTL time.Duration) (*answer, string, error) {
	token := rand.Text()
	res, err := acquireScript.Run(ctx, s.c, []string{s.keys.idemAnswer(key), s.keys.idemLock(key)},
		token, lockTTL.Milliseconds()).Slice()
	if err != nil {
		return nil, "", fmt.Errorf("redis: %w", err)
	}
	if len(res) == 0 {
		return nil, "", errors.New("redis: empty answer from acquire script")
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		raw, _ := res[1].(string)
		var a answer
		if err := json.Unmarshal([]byte(raw), &a); err != nil {
			return nil, "", fmt.Errorf("decode stored answer: %w", err)
		}
		return &a, "", nil
	case 2:
		return nil, token, nil
	}
	return nil, "", nil
}

func (s *redisIdem) Finish(ctx context.Context, key, token string, a *answer) error {
	var raw []byte
	if a != nil {
		var err error
		if raw, err = json.Marshal(a); err != nil {
			return err
		}
	}
	return finishScript.Run(ctx, s.c, []string{s.keys.idemAnswer(key), s.keys.idemLock(key)},
		token, string(raw), config.IdempotencyWindow.Milliseconds()).Err()
}

// localIdem is the embedded-mode store: this process's memory.
type localIdem struct {
	now func() time.Time

	mu      sync.Mutex
	answers map[string]localAnswer
	order   []string // keys in insertion order, for expiry and the cap
	locks   map[string]localLock
}

type localAnswer struct {
	a       answer
	expires time.Time
}

type localLock struct {
	token   string
	expires time.Time
}

func newLocalIdem(now func() time.Time) *localIdem {
	return &localIdem{now: now, answers: map[string]localAnswer{}, locks: map[string]localLock{}}
}

func (s *localIdem) Acquire(_ context.Context, key string, lockTTL time.Duration) (*answer, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if e, ok := s.answers[key]; ok && now.Before(e.expires) {
		a := e.a
		return &a, "", nil
	}
	if l, ok := s.locks[key]; ok && now.Before(l.expires) {
		return nil, "", nil
	}
	token := rand.Text()
	s.locks[key] = localLock{token: token, expires: now.Add(lockTTL)}
	return nil, token, nil
}

func (s *localIdem) Finish(_ context.Context, key, token string, a *answer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if a != nil {
		if _, exists := s.answers[key]; !exists {
			s.order = append(s.order, key)
		}
		s.answers[key] = localAnswer{a: *a, expires: now.Add(config.IdempotencyWindow)}
		s.prune(now)
	}
	if l, ok := s.locks[key]; ok && l.token == token {
		delete(s.locks, key)
	}
	return nil
}

// prune drops expired answers and the oldest past the cap. Answers expire
// in insertion order (one window for all), so the head is always oldest.
func (s *localIdem) prune(now time.Time) {
	n := 0
	for n < len(s.order) {
		e, ok := s.answers[s.order[n]]
		if ok && now.Before(e.expires) && len(s.answers) <= localAnswerCap {
			break
		}
		delete(s.answers, s.order[n])
		n++
	}
	s.order = s.order[n:]
	if len(s.locks) > localAnswerCap {
		for k, l := range s.locks {
			if !now.Before(l.expires) {
				delete(s.locks, k)
			}
		}
	}
}
