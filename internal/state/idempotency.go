package state

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// Answer is a stored first answer to a request.
type Answer struct {
	Hash     string `json:"h"`           // digest of the first request
	Status   int    `json:"s"`           // HTTP status of the first answer
	Body     []byte `json:"b,omitempty"` // its body (empty with Form)
	Location string `json:"l,omitempty"` // its Location header
	Deflated bool   `json:"z,omitempty"` // Body is DEFLATE-compressed (the caller's choice)
	// Form, when not empty, is a compact form the caller rebuilds the
	// body and Location from, byte for byte (an accepted message's answer:
	// its id and a few fields, not its JSON); Body and Location are then
	// empty.
	Form string `json:"f,omitempty"`
}

// MaxAnswerBytes bounds one stored answer (its Size). Finish stores nothing
// for a larger one, in both implementations, and a replay of its key runs
// the request again (the queue's own idempotency still stores one message
// per key). Together with the producers' ingress quota it bounds what a
// client can make the store keep.
const MaxAnswerBytes = 64 << 10

// Size is what a stores for its key: the bytes of its fields.
func (a *Answer) Size() int { return len(a.Hash) + len(a.Body) + len(a.Location) + len(a.Form) + 16 }

// Idempotency keeps first answers (for the store's window) and in-flight
// locks, both by key: a digest the caller made, so no request text ever
// reaches a key name (ValidKey).
type Idempotency interface {
	// Acquire returns the stored answer for key if there is one; otherwise
	// it takes the in-flight lock for lockTTL and returns its token; a nil
	// answer with an empty token means another request holds the lock.
	Acquire(ctx context.Context, key string, lockTTL time.Duration) (*Answer, string, error)
	// Finish stores a (nothing when a is nil) for the window, and releases
	// the lock if token still holds it.
	Finish(ctx context.Context, key, token string, a *Answer) error
}

// MaxKeyLen bounds an idempotency store key.
const MaxKeyLen = 128

// ErrInvalidKey is returned for a key ValidKey refuses.
var ErrInvalidKey = errors.New("state: invalid idempotency key")

// ValidKey reports whether key is 1..MaxKeyLen ASCII letters, digits, '-' or '_' (a hex or
// base64url digest).
func ValidKey(key string) bool {
	if key == "" || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}

// checkIdem is the argument check both implementations share.
func checkIdem(ctx context.Context, key string, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	return checkDuration("duration", d)
}

// RedisIdempotency keeps answers and locks in Redis under the account's
// hash tag, shared by every replica. Safe for concurrent use.
type RedisIdempotency struct {
	c      redis.UniversalClient
	keys   keys
	window time.Duration
}

var _ Idempotency = (*RedisIdempotency)(nil)

// NewRedisIdempotency returns the store of sp's account on c; answers are
// kept for window.
func NewRedisIdempotency(c redis.UniversalClient, sp keyspace.Space, window time.Duration) (*RedisIdempotency, error) {
	if err := checkRedis(c, sp); err != nil {
		return nil, err
	}
	if err := checkDuration("idempotency window", window); err != nil {
		return nil, err
	}
	return &RedisIdempotency{c: c, keys: newKeys(sp), window: window}, nil
}

// checkRedis is the constructor check of every Redis store.
func checkRedis(c redis.UniversalClient, sp keyspace.Space) error {
	if c == nil {
		return errors.New("state: redis client is nil")
	}
	if sp.Account() == "" {
		return errors.New("state: key space is zero; get one from keyspace.New")
	}
	return nil
}

// onRedis is all a Redis store of one account holds that needs no more:
// the client and the account's keys.
type onRedis struct {
	c redis.UniversalClient
	k keys
}

// newOnRedis returns the store S of sp's account on c, once checkRedis
// accepts them.
func newOnRedis[S ~struct{ onRedis }](c redis.UniversalClient, sp keyspace.Space) (*S, error) {
	if err := checkRedis(c, sp); err != nil {
		return nil, err
	}
	s := S{onRedis{c: c, k: newKeys(sp)}}
	return &s, nil
}

// acquireScript returns the stored answer or takes the in-flight lock.
//
//	KEYS[1]  answer key (STRING, JSON Answer)
//	KEYS[2]  lock key (STRING, token)
//	ARGV[1]  lock token
//	ARGV[2]  lock TTL, ms
//
// Returns {1, answer} when an answer is stored (the lock is not looked at),
// {2} when the lock was free and is now ARGV[1]'s for ARGV[2] ms, {0} when
// another token holds it. Only {2} writes anything.
var acquireScript = redis.NewScript(`
local a = redis.call('GET', KEYS[1])
if a then return {1, a} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
return {0}
`)

// Acquire runs acquireScript with a new random token.
func (s *RedisIdempotency) Acquire(ctx context.Context, key string, lockTTL time.Duration) (*Answer, string, error) {
	if err := checkIdem(ctx, key, lockTTL); err != nil {
		return nil, "", fmt.Errorf("state: acquire: %w", err)
	}
	token := rand.Text()
	res, err := acquireScript.Run(ctx, s.c, []string{s.keys.idemAnswer(key), s.keys.idemLock(key)},
		token, lockTTL.Milliseconds()).Slice()
	if err != nil {
		return nil, "", fmt.Errorf("state: acquire on redis: %w", err)
	}
	if len(res) == 0 {
		return nil, "", errors.New("state: acquire on redis: empty answer")
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		raw, _ := res[1].(string)
		a, err := DecodeAnswer(raw)
		if err != nil {
			return nil, "", err
		}
		return a, "", nil
	case 2:
		return nil, token, nil
	}
	return nil, "", nil
}

// finishScript stores the answer (if any) and releases the lock if the
// caller still holds it.
//
//	KEYS[1]  answer key   KEYS[2] lock key
//	ARGV[1]  lock token
//	ARGV[2]  answer JSON ('' to store nothing)
//	ARGV[3]  answer window, ms
//
// Returns 1 when the lock was ARGV[1]'s and is now released, 0 when it had
// expired or passed to another token (left as it is). A non-empty ARGV[2]
// is stored for ARGV[3] ms either way, replacing an answer already there.
var finishScript = redis.NewScript(`
if ARGV[2] ~= '' then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) return 1 end
return 0
`)

// Finish runs finishScript.
func (s *RedisIdempotency) Finish(ctx context.Context, key, token string, a *Answer) error {
	if err := checkIdem(ctx, key, s.window); err != nil {
		return fmt.Errorf("state: finish: %w", err)
	}
	raw, err := EncodeAnswer(a)
	if err != nil {
		return fmt.Errorf("state: finish: %w", err)
	}
	if err := finishScript.Run(ctx, s.c, []string{s.keys.idemAnswer(key), s.keys.idemLock(key)},
		token, string(raw), s.window.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("state: finish on redis: %w", err)
	}
	return nil
}

// EncodeAnswer is a as the Redis store keeps it, or nil when a is nil or
// larger than MaxAnswerBytes (then nothing is stored).
func EncodeAnswer(a *Answer) ([]byte, error) {
	if a == nil || a.Size() > MaxAnswerBytes {
		return nil, nil
	}
	if !PlainJSON(a.Hash) || !PlainJSON(a.Location) || !PlainJSON(a.Form) {
		return json.Marshal(a)
	}
	// json.Marshal(a) without reflection, byte for byte
	// (TestEncodeAnswerAgrees): every keyed accept stores one.
	b := make([]byte, 0, 56+len(a.Hash)+base64.StdEncoding.EncodedLen(len(a.Body))+len(a.Location)+len(a.Form))
	b = append(b, `{"h":"`...)
	b = append(b, a.Hash...)
	b = append(b, `","s":`...)
	b = strconv.AppendInt(b, int64(a.Status), 10)
	if len(a.Body) > 0 {
		b = append(b, `,"b":"`...)
		b = base64.StdEncoding.AppendEncode(b, a.Body)
		b = append(b, '"')
	}
	if a.Location != "" {
		b = append(b, `,"l":"`...)
		b = append(b, a.Location...)
		b = append(b, '"')
	}
	if a.Deflated {
		b = append(b, `,"z":true`...)
	}
	if a.Form != "" {
		b = append(b, `,"f":"`...)
		b = append(b, a.Form...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// PlainJSON reports whether encoding/json writes s as is inside a JSON
// string (printable ASCII but for the quote, the backslash and its HTML
// escapes): the hand-written encoders (here and the gateway's 202 body)
// write such a string themselves and leave any other to encoding/json.
func PlainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// DecodeAnswer reads an answer EncodeAnswer made.
func DecodeAnswer(raw string) (*Answer, error) {
	var a Answer
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return nil, fmt.Errorf("state: decode stored answer: %w", err)
	}
	return &a, nil
}

// AnswerKey is the Redis key that holds the first answer for key, for a
// script that stores an answer with what it answers for (the queue's
// accept script); it keeps EncodeAnswer's form for Window.
func (s *RedisIdempotency) AnswerKey(key string) (string, error) {
	if !ValidKey(key) {
		return "", ErrInvalidKey
	}
	return s.keys.idemAnswer(key), nil
}

// Answer reads the stored answer for key (nil when there is none) and
// takes no lock.
func (s *RedisIdempotency) Answer(ctx context.Context, key string) (*Answer, error) {
	if err := checkIdem(ctx, key, s.window); err != nil {
		return nil, fmt.Errorf("state: answer: %w", err)
	}
	raw, err := s.c.Get(ctx, s.keys.idemAnswer(key)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: answer on redis: %w", err)
	}
	return DecodeAnswer(raw)
}

// Window is how long answers are kept.
func (s *RedisIdempotency) Window() time.Duration { return s.window }

// DefaultLocalAnswers is the count cap of a LocalIdempotency made with cap 0.
const DefaultLocalAnswers = 200_000

// DefaultLocalAnswerBytes is the byte cap of a LocalIdempotency: the sum of
// its answers' Size and keys. Past it the oldest answers go, as past the
// count cap.
const DefaultLocalAnswerBytes = 64 << 20

// LocalIdempotency is the embedded-mode store: this process's memory. It
// keeps at most its cap of answers (the oldest go first; a replay whose
// answer went is rebuilt by the caller from the queue) and, past the cap of
// locks, drops expired locks first and then arbitrary ones: a dropped lock
// only lets a racing retry through to the queue, whose own idempotency
// still stores one message. Safe for concurrent use.
type LocalIdempotency struct {
	now    func() time.Time
	window time.Duration
	cap    int
	bytes  int64 // the byte cap

	mu      sync.Mutex
	size    int64 // bytes held by answers
	answers map[string]localAnswer
	order   []string // answer keys in insertion order, for expiry and the cap
	locks   map[string]localLock
}

var _ Idempotency = (*LocalIdempotency)(nil)

type localAnswer struct {
	a       Answer
	expires time.Time
}

type localLock struct {
	token   string
	expires time.Time
}

// NewLocalIdempotency returns an in-memory store keeping answers for window
// and at most cap answers and cap locks (0: DefaultLocalAnswers).
func NewLocalIdempotency(window time.Duration, cap int) (*LocalIdempotency, error) {
	if err := checkDuration("idempotency window", window); err != nil {
		return nil, err
	}
	if cap < 0 {
		return nil, fmt.Errorf("state: idempotency cap %d must be >= 0", cap)
	}
	if cap == 0 {
		cap = DefaultLocalAnswers
	}
	return &LocalIdempotency{now: time.Now, window: window, cap: cap, bytes: DefaultLocalAnswerBytes,
		answers: map[string]localAnswer{}, locks: map[string]localLock{}}, nil
}

// Acquire returns the answer or takes the lock, as acquireScript does.
func (s *LocalIdempotency) Acquire(ctx context.Context, key string, lockTTL time.Duration) (*Answer, string, error) {
	if err := checkIdem(ctx, key, lockTTL); err != nil {
		return nil, "", fmt.Errorf("state: acquire: %w", err)
	}
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
	s.pruneLocks(now, key)
	s.locks[key] = localLock{token: token, expires: now.Add(lockTTL)}
	return nil, token, nil
}

// Finish stores a and releases the lock, as finishScript does.
func (s *LocalIdempotency) Finish(ctx context.Context, key, token string, a *Answer) error {
	if err := checkIdem(ctx, key, s.window); err != nil {
		return fmt.Errorf("state: finish: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if a != nil && a.Size() <= MaxAnswerBytes {
		if old, exists := s.answers[key]; exists {
			s.size -= entrySize(key, &old.a)
		} else {
			s.order = append(s.order, key)
		}
		s.answers[key] = localAnswer{a: *a, expires: now.Add(s.window)}
		s.size += entrySize(key, a)
		s.pruneAnswers(now)
	}
	if l, ok := s.locks[key]; ok && l.token == token {
		delete(s.locks, key)
	}
	return nil
}

// pruneAnswers drops expired answers and the oldest past the cap. Answers
// expire in insertion order (one window for all), so the head is always
// the oldest. Callers hold mu.
func (s *LocalIdempotency) pruneAnswers(now time.Time) {
	n := 0
	for n < len(s.order) {
		e, ok := s.answers[s.order[n]]
		if ok && now.Before(e.expires) && len(s.answers) <= s.cap && s.size <= s.bytes {
			break
		}
		if ok {
			s.size -= entrySize(s.order[n], &e.a)
		}
		delete(s.answers, s.order[n])
		n++
	}
	s.order = s.order[n:]
}

// entrySize is what one answer costs the byte cap.
func entrySize(key string, a *Answer) int64 { return int64(len(key) + a.Size()) }

// SetMaxBytes sets the byte cap (at least MaxAnswerBytes); for tests and
// small deployments. Call it before the store is used.
func (s *LocalIdempotency) SetMaxBytes(n int64) {
	s.bytes = max(n, MaxAnswerBytes)
}

// Size returns how many answers the store holds and their bytes.
func (s *LocalIdempotency) Size() (answers int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.answers), s.size
}

// pruneLocks makes room for one more lock within the cap: expired locks go
// first, then any but next's, down to 7/8 of the cap so that the scan is
// paid once per cap/8 new locks, not on every one. Callers hold mu.
func (s *LocalIdempotency) pruneLocks(now time.Time, next string) {
	if len(s.locks) < s.cap {
		return
	}
	for k, l := range s.locks {
		if !now.Before(l.expires) {
			delete(s.locks, k)
		}
	}
	target := min(s.cap-1, s.cap-s.cap/8)
	for k := range s.locks {
		if len(s.locks) <= target {
			return
		}
		if k != next {
			delete(s.locks, k)
		}
	}
}
