package embedded

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// TestCompactFile: a store that held a backlog keeps its file size after
// the backlog is gone (bbolt never gives pages back); CompactFile returns
// the space and keeps every message: the queued ones are taken in their
// order, a new one after them (the bucket sequences carried over), and
// the canceled ones still read as canceled.
func TestCompactFile(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	const n, kept = 5000, 200
	ms := make([]*sms.Message, n)
	for i := range ms {
		ms[i] = sizeMsg(i)
	}
	for i := 0; i < n; i += 500 {
		if _, err := q.EnqueueMany(t.Context(), ms[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	// The backlog goes: all but the last kept are canceled (concurrently,
	// so that they share commits).
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n-kept; i += 16 {
				if _, err := q.Cancel(t.Context(), ms[i].ID, ms[i].Producer); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	res, err := CompactFile(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d → %d bytes, %d keys", filepath.Base(res.File), res.Before, res.After, res.Keys)
	if res.After <= 0 || res.After > res.Before/2 {
		t.Errorf("compacted %d → %d bytes; want less than half once %d of %d messages are gone", res.Before, res.After, n-kept, n)
	}
	if st, err := os.Stat(filepath.Join(dir, FileName)); err != nil || st.Size() != res.After {
		t.Errorf("the store file after compaction: %v, %v; want %d bytes", st, err, res.After)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".compact")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy is left beside the store: %v", err)
	}

	q, err = Open(Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	extra := sizeMsg(n)
	if _, err := q.Enqueue(t.Context(), extra); err != nil {
		t.Fatal(err)
	}
	want := append([]*sms.Message{}, ms[n-kept:]...)
	want = append(want, extra)
	for i, w := range want {
		l, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "t", Lease: time.Hour})
		if err != nil {
			t.Fatalf("take %d of %d after compaction: %v", i, len(want), err)
		}
		if l.Message.ID != w.ID || l.Message.Body != w.Body {
			t.Fatalf("take %d after compaction: %s, want %s (queue order or body lost)", i, l.Message.ID, w.ID)
		}
	}
	if _, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "t", Lease: time.Hour}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("after the %d queued messages: %v, want ErrEmpty", len(want), err)
	}
	for _, i := range []int{0, n / 2, n - kept - 1} {
		m, err := q.Get(t.Context(), ms[i].ID)
		if err != nil || m.Status != sms.StatusCanceled {
			t.Errorf("canceled message %d after compaction: %+v, %v", i, m, err)
		}
	}
}

// TestCompactFileRefusesAStoreInUse: a running gateway's store is left
// alone, with an answer that says why.
func TestCompactFileRefusesAStoreInUse(t *testing.T) {
	dir := t.TempDir()
	q := open(t, Config{Path: dir})
	if _, err := q.Enqueue(t.Context(), sizeMsg(0)); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	_, err = CompactFile(dir, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("compacting a store in use: %v, want it refused as in use", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the store in use changed (%v)", err)
	}
	if _, err := CompactFile(t.TempDir(), 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("compacting a directory without a store: %v, want not exist", err)
	}
}
