package state_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
	"smsgw/internal/state"
)

// TestScopedPauses: both kinds keep each scope apart (set, replace, clear
// one without touching another), end a timed scope on time, refuse a bad
// scope, and (Redis) every handle reads what another set.
func TestScopedPauses(t *testing.T) {
	for name, p := range scopedPauseKinds(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			set, read := p[0], p[1]
			if err := set.Set(ctx, "class:marketing", 0, "review"); err != nil {
				t.Fatal(err)
			}
			if err := set.Set(ctx, "class:otp", 200*time.Millisecond, ""); err != nil {
				t.Fatal(err)
			}
			all, err := read.All(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st := all["class:marketing"]; !st.On || st.Remaining != 0 || st.Reason != "review" {
				t.Fatalf("marketing %+v", st)
			}
			if st := all["class:otp"]; !st.On || st.Remaining <= 0 || st.Remaining > 200*time.Millisecond {
				t.Fatalf("otp %+v", st)
			}
			if err := set.Set(ctx, "class:marketing", time.Hour, "later"); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); ; {
				all, err = read.All(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, on := all["class:otp"]; !on {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a timed scope did not end")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if st := all["class:marketing"]; !st.On || st.Remaining < 59*time.Minute || st.Reason != "later" {
				t.Fatalf("marketing after its replacement %+v", st)
			}
			if err := read.Clear(ctx, "class:marketing"); err != nil {
				t.Fatal(err)
			}
			if all, err = set.All(ctx); err != nil || len(all) != 0 {
				t.Fatalf("after clear: %v %v", all, err)
			}
			for _, bad := range []string{"", "a|b", string(make([]byte, state.MaxPauseScope+1))} {
				if err := set.Set(ctx, bad, 0, ""); err == nil {
					t.Errorf("scope %q accepted", bad)
				}
			}
		})
	}
}

// TestScopedPausesBounded: no more than state.MaxScopedPauses scopes at once; a
// scope already paused may still be replaced.
func TestScopedPausesBounded(t *testing.T) {
	for name, kind := range scopedPauseKinds(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p := kind[0]
			for i := range state.MaxScopedPauses {
				if err := p.Set(ctx, "s"+strconv.Itoa(i), 0, ""); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Set(ctx, "one-more", 0, ""); err == nil {
				t.Fatal("a scope past the bound was accepted")
			}
			if err := p.Set(ctx, "s0", time.Minute, "again"); err != nil {
				t.Fatalf("replacing a paused scope: %v", err)
			}
		})
	}
}

// scopedPauseKinds returns both kinds of scoped pauses, each as two handles
// of one store: the local store twice, and two Redis handles, each on its
// own client, of one fresh account deleted when the test ends.
func scopedPauseKinds(t *testing.T) map[string][2]state.ScopedPauses {
	t.Helper()
	redistest.Addr(t)
	sp, err := keyspace.New(redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { redistest.DeleteTagged(t, sp.Tag()) })
	var r [2]state.ScopedPauses
	for i := range r {
		if r[i], err = state.NewRedisScopedPauses(redistest.Client(t), sp); err != nil {
			t.Fatal(err)
		}
	}
	local := state.NewLocalScopedPauses()
	return map[string][2]state.ScopedPauses{"local": {local, local}, "redis": r}
}
