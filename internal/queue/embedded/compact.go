package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// CompactResult is what CompactFile did: the file's size before and after,
// and how many keys it carried over.
type CompactResult struct {
	File          string
	Before, After int64
	Keys          int
}

// compactTxBytes bounds one transaction of the copy, so that a large store
// is copied in bounded memory.
const compactTxBytes = 64 << 20

// CompactFile rewrites the store in dir without its free pages. A bbolt
// file never shrinks: pages freed by pruning are reused, never returned to
// the disk, so a store that once held a large backlog (a campaign the
// provider's rate held back for hours) keeps its peak size. The copy is
// written beside the file, fsynced, checked against the original (every
// bucket's key count and sequence), and only then renamed over it, so a
// crash at any point leaves either the old file or the new one whole.
//
// It needs the store to itself: a gateway running on it holds the file's
// lock, and CompactFile gives up after lockTimeout saying so. It needs free
// disk for the copy (at most the bytes in use).
func CompactFile(dir string, lockTimeout time.Duration) (CompactResult, error) {
	file := filepath.Join(dir, FileName)
	res := CompactResult{File: file}
	st, err := os.Stat(file)
	if err != nil {
		return res, fmt.Errorf("queue: embedded: compact: %w", err)
	}
	res.Before = st.Size()
	if lockTimeout <= 0 {
		lockTimeout = defaultLockTimeout
	}
	// Read-only: a shared lock, which a running gateway's exclusive one
	// excludes (and which keeps one from starting until we are done).
	src, err := bolt.Open(file, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: true})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return res, fmt.Errorf("queue: embedded: compact: %s is in use by another process (stop the gateway first): %w", file, err)
	}
	if err != nil {
		return res, fmt.Errorf("queue: embedded: compact: open %s: %w", file, err)
	}
	defer func() { _ = src.Close() }()
	tmp := file + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("queue: embedded: compact: remove a stale %s: %w", tmp, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.Remove(tmp)
		}
	}()
	if res.Keys, err = copyStore(src, tmp, lockTimeout); err != nil {
		return res, err
	}
	if err := os.Rename(tmp, file); err != nil {
		return res, fmt.Errorf("queue: embedded: compact: rename %s: %w", tmp, err)
	}
	keep = true
	if err := syncDir(dir); err != nil {
		return res, fmt.Errorf("queue: embedded: compact: the new file is in place; sync %s: %w", dir, err)
	}
	if st, err := os.Stat(file); err == nil {
		res.After = st.Size()
	}
	return res, nil
}

// copyStore copies src into a new file at tmp, makes it durable and checks
// it against src; it returns the keys copied.
func copyStore(src *bolt.DB, tmp string, lockTimeout time.Duration) (int, error) {
	dst, err := bolt.Open(tmp, 0o600, storeOptions(lockTimeout))
	if err != nil {
		return 0, fmt.Errorf("queue: embedded: compact: create %s: %w", tmp, err)
	}
	if err := bolt.Compact(dst, src, compactTxBytes); err != nil {
		_ = dst.Close()
		return 0, fmt.Errorf("queue: embedded: compact: copy: %w", err)
	}
	want, err := storeShape(src)
	if err != nil {
		_ = dst.Close()
		return 0, err
	}
	got, err := storeShape(dst)
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("queue: embedded: compact: close %s: %w", tmp, cerr)
	}
	if err != nil {
		return 0, err
	}
	if err := sameShape(want, got); err != nil {
		return 0, fmt.Errorf("queue: embedded: compact: the copy differs from the store, left it unchanged: %w", err)
	}
	// Every transaction of the copy was fsynced when it committed; this
	// covers the file itself before it takes the store's name.
	f, err := os.Open(tmp)
	if err != nil {
		return 0, fmt.Errorf("queue: embedded: compact: %w", err)
	}
	serr := f.Sync()
	_ = f.Close()
	if serr != nil {
		return 0, fmt.Errorf("queue: embedded: compact: sync %s: %w", tmp, serr)
	}
	n := 0
	for _, b := range want {
		n += b.keys
	}
	return n, nil
}

// bucketShape is what the check compares per top-level bucket.
type bucketShape struct {
	keys int
	seq  uint64
}

func storeShape(db *bolt.DB) (map[string]bucketShape, error) {
	out := map[string]bucketShape{}
	err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			out[string(name)] = bucketShape{keys: b.Stats().KeyN, seq: b.Sequence()}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("queue: embedded: compact: read: %w", err)
	}
	return out, nil
}

func sameShape(want, got map[string]bucketShape) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d buckets, want %d", len(got), len(want))
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			return fmt.Errorf("bucket %s: %d keys, sequence %d; want %d, %d", name, g.keys, g.seq, w.keys, w.seq)
		}
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
