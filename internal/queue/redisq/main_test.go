package redisq

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger sends the queue's logs to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// open returns a queue of account over c, closed when the test ends.
func open(t testing.TB, c redis.UniversalClient, account string) *Queue {
	t.Helper()
	return openWith(t, Config{Client: c, Account: account})
}

// openWith returns New(cfg), closed when the test ends; a cfg without a
// Logger logs to the test log.
func openWith(t testing.TB, cfg Config) *Queue {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	q, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// freshAccount returns an account on the shared Redis whose keys are
// deleted when the test ends.
func freshAccount(t testing.TB) string {
	account := redistest.Prefix(t)
	t.Cleanup(func() { deleteAccount(t, account) })
	return account
}

// newWith returns a queue of cfg on the shared Redis under a fresh account
// (cfg's Client, if any, is kept), closed and deleted when the test ends.
func newWith(t testing.TB, cfg Config) *Queue {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = redistest.Client(t)
	}
	cfg.Account = freshAccount(t)
	return openWith(t, cfg)
}

// newShared returns a queue on the shared Redis under a fresh account whose
// keys are deleted when the test ends.
func newShared(t testing.TB) *Queue {
	t.Helper()
	return newWith(t, Config{})
}

// deleteAccount removes every key of account from the shared Redis.
func deleteAccount(t testing.TB, account string) { redistest.DeleteTagged(t, newKeys(account).tag) }

// dump returns the whole state of q's account as sorted "key type value"
// lines, so a test can compare a state before and after a call.
func dump(t testing.TB, q *Queue) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, q.k.tag+"*").Result()
		keys = append(keys, ks...)
		return err
	}
	var err error
	if cc, ok := q.c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, q.c.(*redis.Client))
	}
	if err != nil {
		t.Fatalf("dump keys: %v", err)
	}
	var out []string
	for _, k := range keys {
		typ, err := q.c.Type(ctx, k).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
		short := strings.TrimPrefix(k, q.k.tag)
		switch typ {
		case "string":
			v, _ := q.c.Get(ctx, k).Result()
			out = append(out, short+" = "+v)
		case "hash":
			m, _ := q.c.HGetAll(ctx, k).Result()
			for f, v := range m {
				out = append(out, short+"["+f+"] = "+v)
			}
		case "zset":
			zs, _ := q.c.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				out = append(out, short+"{"+z.Member.(string)+"} = "+time.Duration(int64(z.Score)).String())
			}
		case "list":
			vs, _ := q.c.LRange(ctx, k, 0, -1).Result()
			for i, v := range vs {
				out = append(out, fmt.Sprintf("%s[%d] = %s", short, i, v))
			}
		default:
			t.Fatalf("dump %s: unexpected type %s", k, typ)
		}
	}
	sort.Strings(out)
	return out
}

// msg returns a valid message of class c from producer p.
func msg(p string, c sms.Class) *sms.Message { return smstest.Message(p, c) }

func enqueue(t testing.TB, q queue.Queue, ms ...*sms.Message) {
	t.Helper()
	for _, m := range ms {
		if res, err := q.Enqueue(context.Background(), m); err != nil || res.Existed {
			t.Fatalf("Enqueue %s = %+v, %v", m.ID, res, err)
		}
	}
}

func take(t testing.TB, q queue.Queue, lease time.Duration) *queue.Leased {
	t.Helper()
	l, _, err := q.Take(context.Background(), queue.TakeOptions{Owner: "test", Lease: lease})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return l
}
