package state

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"smsgw/internal/keyspace"
)

// Suppression is one number on the suppression list, as stored: never the
// number itself, only its keyed hash (ID) and its masked form.
type Suppression struct {
	ID        string    `json:"id"`     // keyed hash of the number (ValidKey)
	Masked    string    `json:"masked"` // the number masked, for people
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	// Source is who put the number on the list. Entries stored before
	// sources existed have none and read as SourceOperator (List); Add
	// stores "" as it is, the same bytes as such an entry.
	Source SuppressionSource `json:"source,omitempty"`
}

// SuppressionSource says who put a number on the suppression list, which
// decides who may take it off: an operator's entry only an operator (the
// admin API); the recipient's own opt-out, or the provider's report of
// one, also the recipient's opt-in keyword (Suppressions.Lift).
type SuppressionSource string

// The sources of an entry.
const (
	SourceOperator  SuppressionSource = "operator"  // the admin API
	SourceRecipient SuppressionSource = "recipient" // the recipient texted an opt-out keyword (POST /v1/inbound)
	SourceProvider  SuppressionSource = "provider"  // the provider refused a send: the recipient opted out there
)

// SuppressionSources lists every source, for validation and metric labels.
var SuppressionSources = []SuppressionSource{SourceOperator, SourceRecipient, SourceProvider}

// Valid reports whether s is a source ("" too: an operator's, as stored
// before sources existed).
func (s SuppressionSource) Valid() bool {
	return s == "" || slices.Contains(SuppressionSources, s)
}

// OrOperator is s, or SourceOperator for an entry stored without one.
func (s SuppressionSource) OrOperator() SuppressionSource {
	if s == "" {
		return SourceOperator
	}
	return s
}

// LiftResult is what Lift did.
type LiftResult int

// The results of Lift.
const (
	LiftAbsent  LiftResult = iota // the number was not on the list
	LiftRemoved                   // its entry had one of the sources asked for and is gone
	LiftKept                      // its entry has another source (an operator's): nothing changed
)

// Suppressions is the suppression list of an account: numbers that must
// not be sent to, shared by every replica and kept across restarts. It also
// keeps the account's number key, the secret the IDs are hashed with: the
// list is meaningless without it, so the two live and die together.
type Suppressions interface {
	// Add puts s on the list; added is false when its ID is already
	// there, and then nothing changes, but that an operator's Add
	// (Source SourceOperator) takes over an entry of another source: it
	// replaces it with s, so that only an operator may take it off from
	// then on. ErrSuppressionsFull when the list holds the bound for s's
	// source (boundFor): an operator's entry its configured bound, an
	// opt-out (SourceRecipient, SourceProvider) MaxSuppressions only.
	Add(ctx context.Context, s Suppression) (added bool, err error)
	// Remove takes id off the list; false when it was not there.
	Remove(ctx context.Context, id string) (bool, error)
	// Lift takes id off the list only when its entry's source (an entry
	// without one reads as SourceOperator) is one of sources, in one
	// atomic step: a recipient's opt-in never lifts an operator's entry,
	// even one an operator adds while the opt-in is under way.
	Lift(ctx context.Context, id string, sources ...SuppressionSource) (LiftResult, error)
	// Contains reports, for each id, whether it is on the list.
	Contains(ctx context.Context, ids []string) ([]bool, error)
	// List returns up to limit entries (1..MaxSuppressionPage) whose ID
	// sorts after after ("" from the start), in ID order, each with its
	// Source (SourceOperator for one stored without).
	List(ctx context.Context, after string, limit int) ([]Suppression, error)
	// Count is how many entries the list holds.
	Count(ctx context.Context) (int, error)
	// Key returns the account's number key (32 random bytes), created by
	// the first caller and the same for every handle from then on.
	Key(ctx context.Context) ([]byte, error)
	// Applied, RememberApplied and LiftOlder keep a recipient's keyword
	// from being applied twice (inbound.go).
	appliedStore
}

// Bounds of the list.
const (
	MaxSuppressions      = 1_000_000
	MaxSuppressionPage   = 1000
	MaxSuppressionReason = 200
	numberKeyLen         = 32
)

// ErrSuppressionsFull is returned by Add when the list holds MaxSuppressions
// (or, for an operator's entry, its store's lower bound).
var ErrSuppressionsFull = errors.New("state: the suppression list is full")

// boundFor is how many entries the list may hold before an Add of an entry
// of src is refused: the store's configured bound (max) for an operator's
// entry, MaxSuppressions for a recipient's opt-out or the provider's report
// of one. The configured bound keeps what operators add in check; an
// opt-out refused for lack of room would be lost (a vendor retries a 503
// for minutes at most, Twilio not at all) and the recipient would go on
// getting messages after asking to stop, so opt-outs go past it.
func boundFor(maxEntries int, src SuppressionSource) int {
	if src.OrOperator() == SourceOperator {
		return maxEntries
	}
	return MaxSuppressions
}

func checkSuppression(s Suppression) error {
	switch {
	case !ValidKey(s.ID):
		return ErrInvalidKey
	case len(s.Reason) > MaxSuppressionReason || len(s.Masked) > 32:
		return fmt.Errorf("state: suppression reason over %d bytes or masked number over 32", MaxSuppressionReason)
	case !s.Source.Valid():
		return fmt.Errorf("state: suppression source %q is not one of %v", s.Source, SuppressionSources)
	}
	return nil
}

// checkLift checks Lift's arguments.
func checkLift(id string, sources []SuppressionSource) error {
	if !ValidKey(id) {
		return ErrInvalidKey
	}
	for _, s := range sources {
		if s == "" || !s.Valid() {
			return fmt.Errorf("state: lift: source %q is not one of %v", s, SuppressionSources)
		}
	}
	return nil
}

// readEntry decodes a stored entry; an entry stored without a source is an
// operator's.
func readEntry(b []byte) (Suppression, bool) {
	var s Suppression
	if json.Unmarshal(b, &s) != nil {
		return s, false
	}
	s.Source = s.Source.OrOperator()
	return s, true
}

func checkPage(after string, limit int) error {
	if limit < 1 || limit > MaxSuppressionPage {
		return fmt.Errorf("state: page limit %d not in 1..%d", limit, MaxSuppressionPage)
	}
	if after != "" && !ValidKey(after) {
		return ErrInvalidKey
	}
	return nil
}

func checkIDs(ids []string) error {
	if len(ids) > MaxSuppressionPage {
		return fmt.Errorf("state: at most %d ids at once", MaxSuppressionPage)
	}
	for _, id := range ids {
		if !ValidKey(id) {
			return ErrInvalidKey
		}
	}
	return nil
}

// RedisSuppressions keep the list in a HASH (ID → JSON entry) with a ZSET
// of the IDs at score 0 for paging in ID order, and the number key in a
// STRING; none of them expires.
type RedisSuppressions struct {
	c          redis.UniversalClient
	k          keys
	max        int
	appliedMax int // 0: MaxApplied

	mu  sync.Mutex
	key []byte // cached once read
}

var _ Suppressions = (*RedisSuppressions)(nil)

// NewRedisSuppressions returns the list of sp's account on c, bounded by
// maxEntries (0: MaxSuppressions) for operators' entries (boundFor).
func NewRedisSuppressions(c redis.UniversalClient, sp keyspace.Space, maxEntries int) (*RedisSuppressions, error) {
	if err := checkRedis(c, sp); err != nil {
		return nil, err
	}
	if maxEntries <= 0 || maxEntries > MaxSuppressions {
		maxEntries = MaxSuppressions
	}
	return &RedisSuppressions{c: c, k: newKeys(sp), max: maxEntries}, nil
}

// suppressAddScript adds one entry.
//
//	KEYS[1]  HASH id → JSON entry
//	KEYS[2]  ZSET of ids, score 0
//	ARGV[1]  id
//	ARGV[2]  JSON entry
//	ARGV[3]  bound (boundFor the entry's source)
//	ARGV[4]  "1" when the entry is an operator's: it replaces an entry of
//	         another source (one without a source is an operator's)
//
// Returns 1 when added, 0 when already there, -1 when full.
var suppressAddScript = redis.NewScript(`
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  if ARGV[4] == '1' then
    local ok, e = pcall(cjson.decode, raw)
    if ok and type(e) == 'table' and type(e.source) == 'string' and e.source ~= '' and e.source ~= 'operator' then
      redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    end
  end
  return 0
end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
`)

// suppressLiftScript removes one entry if its source is one of ARGV[3..]:
// KEYS as for add, ARGV[1] the id. An entry without a source is an
// operator's. With ARGV[2] (stamp, LiftOlder's opt-in time) not empty, an
// entry whose created_at (RFC 3339 in UTC, to the second) is after it is
// kept (3). Returns 1 when removed, 0 when absent, 2 when kept for its
// source.
var suppressLiftScript = redis.NewScript(`
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local ok, e = pcall(cjson.decode, raw)
local source = 'operator'
if ok and type(e) == 'table' and type(e.source) == 'string' and e.source ~= '' then source = e.source end
for i = 3, #ARGV do
  if ARGV[i] == source then
    local c = ok and type(e) == 'table' and e.created_at
    if ARGV[2] ~= '' and type(c) == 'string' and string.len(c) >= 20 and string.sub(c, -1) == 'Z' and string.sub(c, 1, 19) > string.sub(ARGV[2], 1, 19) then
      return 3
    end
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 1
  end
end
return 2
`)

// numberKeyScript returns the number key, setting it to ARGV[1] first if
// there is none. KEYS[1] is the STRING.
var numberKeyScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`)

func redisErr(what string, err error) error {
	return fmt.Errorf("state: suppressions %s on redis: %w", what, err)
}

// Add puts s on the list.
func (r *RedisSuppressions) Add(ctx context.Context, s Suppression) (bool, error) {
	if err := checkSuppression(s); err != nil {
		return false, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return false, err
	}
	operator := 0
	if s.Source.OrOperator() == SourceOperator {
		operator = 1
	}
	n, err := suppressAddScript.Run(ctx, r.c, []string{r.k.suppressions(), r.k.suppressionIndex()}, s.ID, b,
		boundFor(r.max, s.Source), operator).Int()
	switch {
	case err != nil:
		return false, redisErr("add", err)
	case n < 0:
		return false, ErrSuppressionsFull
	}
	return n == 1, nil
}

// Remove takes id off the list, whatever its source: Lift with every
// source.
func (r *RedisSuppressions) Remove(ctx context.Context, id string) (bool, error) {
	res, err := r.lift(ctx, "remove", id, SuppressionSources)
	return res == LiftRemoved, err
}

// Lift takes id off the list if its entry has one of sources.
func (r *RedisSuppressions) Lift(ctx context.Context, id string, sources ...SuppressionSource) (LiftResult, error) {
	return r.lift(ctx, "lift", id, sources)
}

// lift is Lift; what names the operation in its errors.
func (r *RedisSuppressions) lift(ctx context.Context, what, id string, sources []SuppressionSource) (LiftResult, error) {
	if err := checkLift(id, sources); err != nil {
		return LiftAbsent, err
	}
	return r.runLift(ctx, what, id, "", sources)
}

// runLift runs suppressLiftScript for id and sources, keeping an entry
// created after stamp unless it is empty; what names the operation in its
// errors.
func (r *RedisSuppressions) runLift(ctx context.Context, what, id, stamp string, sources []SuppressionSource) (LiftResult, error) {
	args := make([]any, 0, 2+len(sources))
	args = append(args, id, stamp)
	for _, s := range sources {
		args = append(args, string(s))
	}
	n, err := suppressLiftScript.Run(ctx, r.c, []string{r.k.suppressions(), r.k.suppressionIndex()}, args...).Int()
	if err != nil {
		return LiftAbsent, redisErr(what, err)
	}
	return LiftResult(n), nil
}

// IndexKey is the Redis HASH whose fields are the suppressed ids, for a
// script that checks the list with other work in one round trip (the
// queue's accept script): a number is suppressed when HEXISTS is 1.
func (r *RedisSuppressions) IndexKey() string { return r.k.suppressions() }

// Contains asks Redis once for all ids.
func (r *RedisSuppressions) Contains(ctx context.Context, ids []string) ([]bool, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	out := make([]bool, len(ids))
	if len(ids) == 0 {
		return out, ctx.Err()
	}
	vals, err := r.c.HMGet(ctx, r.k.suppressions(), ids...).Result()
	if err != nil {
		return nil, redisErr("lookup", err)
	}
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}

// List pages through the index in ID order.
func (r *RedisSuppressions) List(ctx context.Context, after string, limit int) ([]Suppression, error) {
	if err := checkPage(after, limit); err != nil {
		return nil, err
	}
	lo := "-"
	if after != "" {
		lo = "(" + after
	}
	ids, err := r.c.ZRangeByLex(ctx, r.k.suppressionIndex(), &redis.ZRangeBy{Min: lo, Max: "+", Count: int64(limit)}).Result()
	if err != nil {
		return nil, redisErr("list", err)
	}
	out := []Suppression{}
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := r.c.HMGet(ctx, r.k.suppressions(), ids...).Result()
	if err != nil {
		return nil, redisErr("list", err)
	}
	for _, v := range vals {
		if str, ok := v.(string); ok {
			if s, ok := readEntry([]byte(str)); ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// Count is the HASH's length.
func (r *RedisSuppressions) Count(ctx context.Context) (int, error) {
	n, err := r.c.HLen(ctx, r.k.suppressions()).Result()
	if err != nil {
		return 0, redisErr("count", err)
	}
	return int(n), nil
}

// Key reads (or creates) the number key once and keeps it.
func (r *RedisSuppressions) Key(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, redisErr("number key", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.key != nil {
		return r.key, nil
	}
	fresh := make([]byte, numberKeyLen)
	_, _ = rand.Read(fresh)
	s, err := numberKeyScript.Run(ctx, r.c, []string{r.k.numberKey()}, fresh).Text()
	if err != nil {
		return nil, redisErr("number key", err)
	}
	if len(s) != numberKeyLen {
		return nil, fmt.Errorf("state: the number key in redis has %d bytes, want %d", len(s), numberKeyLen)
	}
	r.key = []byte(s)
	return r.key, nil
}

// SuppressionsFile is the file of LocalSuppressions in the store directory.
const SuppressionsFile = "protection.db"

var (
	bSuppressed = []byte("suppressed") // id → JSON entry
	bMeta       = []byte("meta")       // "number_key" → 32 bytes
	metaKey     = []byte("number_key")
	metaCount   = []byte("count") // entries in bSuppressed, 8 bytes big-endian
)

func readCount(tx *bolt.Tx) int {
	b := tx.Bucket(bMeta).Get(metaCount)
	if len(b) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(b))
}

func writeCount(tx *bolt.Tx, n int) error {
	return tx.Bucket(bMeta).Put(metaCount, binary.BigEndian.AppendUint64(nil, uint64(max(n, 0))))
}

// LocalSuppressions keep the list in a bbolt file of its own beside the
// embedded queue's (embedded mode, one replica): every change is fsynced
// before it returns, so the list survives a restart. Safe for concurrent
// use.
type LocalSuppressions struct {
	db         *bolt.DB
	max        int
	appliedMax int              // 0: MaxApplied
	clock      func() time.Time // the memory of applied messages' clock
}

var _ Suppressions = (*LocalSuppressions)(nil)

// OpenLocalSuppressions opens (or creates) SuppressionsFile in dir, bounded
// by maxEntries (0: MaxSuppressions) for operators' entries (boundFor).
// Close it when done.
func OpenLocalSuppressions(dir string, maxEntries int) (*LocalSuppressions, error) {
	if maxEntries <= 0 || maxEntries > MaxSuppressions {
		maxEntries = MaxSuppressions
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("state: suppressions: create %s: %w", dir, err)
	}
	file := filepath.Join(dir, SuppressionsFile)
	db, err := bolt.Open(file, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("state: suppressions: %s is locked by another process: %w", file, err)
	}
	if err != nil {
		return nil, fmt.Errorf("state: suppressions: open %s: %w", file, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bSuppressed); err != nil {
			return err
		}
		if err := initApplied(tx); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(bMeta)
		if err != nil {
			return err
		}
		if m.Get(metaKey) == nil {
			k := make([]byte, numberKeyLen)
			_, _ = rand.Read(k)
			return m.Put(metaKey, k)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("state: suppressions: init %s: %w", file, err)
	}
	return &LocalSuppressions{db: db, max: maxEntries, clock: time.Now}, nil
}

// Close closes the file.
func (l *LocalSuppressions) Close() error { return l.db.Close() }

func localErr(what string, err error) error {
	return fmt.Errorf("state: suppressions %s: %w", what, err)
}

// Add puts s on the list.
func (l *LocalSuppressions) Add(ctx context.Context, s Suppression) (bool, error) {
	if err := checkSuppression(s); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, localErr("add", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return false, err
	}
	added := false
	err = l.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bSuppressed)
		if v := bk.Get([]byte(s.ID)); v != nil {
			if old, ok := readEntry(v); ok && old.Source != SourceOperator && s.Source.OrOperator() == SourceOperator {
				return bk.Put([]byte(s.ID), b) // the operator takes it over
			}
			return nil
		}
		n := readCount(tx)
		if n >= boundFor(l.max, s.Source) {
			return ErrSuppressionsFull
		}
		added = true
		if err := writeCount(tx, n+1); err != nil {
			return err
		}
		return bk.Put([]byte(s.ID), b)
	})
	if errors.Is(err, ErrSuppressionsFull) {
		return false, err
	}
	if err != nil {
		return false, localErr("add", err)
	}
	return added, nil
}

// Remove takes id off the list, whatever its source: Lift with every
// source.
func (l *LocalSuppressions) Remove(ctx context.Context, id string) (bool, error) {
	res, err := l.lift(ctx, "remove", id, SuppressionSources)
	return res == LiftRemoved, err
}

// Lift takes id off the list if its entry has one of sources, in one
// transaction.
func (l *LocalSuppressions) Lift(ctx context.Context, id string, sources ...SuppressionSource) (LiftResult, error) {
	return l.lift(ctx, "lift", id, sources)
}

// lift is Lift; what names the operation in its errors.
func (l *LocalSuppressions) lift(ctx context.Context, what, id string, sources []SuppressionSource) (LiftResult, error) {
	return l.liftAt(ctx, what, id, nil, sources)
}

// liftAt is lift that, with at (LiftOlder's opt-in time), keeps an
// entry created after at, to the second (LiftNewer).
func (l *LocalSuppressions) liftAt(ctx context.Context, what, id string, at *time.Time, sources []SuppressionSource) (LiftResult, error) {
	if err := checkLift(id, sources); err != nil {
		return LiftAbsent, err
	}
	if err := ctx.Err(); err != nil {
		return LiftAbsent, localErr(what, err)
	}
	res := LiftAbsent
	err := l.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bSuppressed)
		v := bk.Get([]byte(id))
		if v == nil {
			return nil
		}
		e, _ := readEntry(v) // unreadable: an operator's, as the script reads it
		switch {
		case !slices.Contains(sources, e.Source.OrOperator()):
			res = LiftKept
			return nil
		case at != nil && !e.CreatedAt.IsZero() && stamp(e.CreatedAt) > stamp(*at):
			res = LiftNewer
			return nil
		}
		res = LiftRemoved
		if err := writeCount(tx, readCount(tx)-1); err != nil {
			return err
		}
		return bk.Delete([]byte(id))
	})
	if err != nil {
		return LiftAbsent, localErr(what, err)
	}
	return res, nil
}

// Contains reads all ids in one transaction.
func (l *LocalSuppressions) Contains(ctx context.Context, ids []string) ([]bool, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, localErr("lookup", err)
	}
	out := make([]bool, len(ids))
	err := l.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bSuppressed)
		for i, id := range ids {
			out[i] = bk.Get([]byte(id)) != nil
		}
		return nil
	})
	if err != nil {
		return nil, localErr("lookup", err)
	}
	return out, nil
}

// List pages through the bucket in ID (byte) order.
func (l *LocalSuppressions) List(ctx context.Context, after string, limit int) ([]Suppression, error) {
	if err := checkPage(after, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, localErr("list", err)
	}
	out := []Suppression{}
	err := l.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bSuppressed).Cursor()
		k, v := c.First()
		if after != "" {
			k, v = c.Seek([]byte(after))
			if k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil && len(out) < limit; k, v = c.Next() {
			if s, ok := readEntry(v); ok {
				out = append(out, s)
			}
		}
		return nil
	})
	if err != nil {
		return nil, localErr("list", err)
	}
	return out, nil
}

// Count is the bucket's number of keys.
func (l *LocalSuppressions) Count(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, localErr("count", err)
	}
	n := 0
	err := l.db.View(func(tx *bolt.Tx) error { n = readCount(tx); return nil })
	if err != nil {
		return 0, localErr("count", err)
	}
	return n, nil
}

// Key returns the number key the file was created with.
func (l *LocalSuppressions) Key(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, localErr("number key", err)
	}
	var k []byte
	err := l.db.View(func(tx *bolt.Tx) error {
		k = append([]byte(nil), tx.Bucket(bMeta).Get(metaKey)...)
		return nil
	})
	if err != nil || len(k) != numberKeyLen {
		return nil, localErr("number key", errors.Join(err, errors.New("missing or short")))
	}
	return k, nil
}
