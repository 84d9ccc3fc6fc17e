package tick

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Sleep waits the whole duration while ctx is live, and ends when ctx
// does, reporting which happened; zero and negative durations only look at
// ctx.
func TestSleep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		if !Sleep(ctx, 3*time.Second) {
			t.Fatal("Sleep on a live context reported an interruption")
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("slept %v, want 3s", got)
		}
		if !Sleep(ctx, 0) || !Sleep(ctx, -time.Second) {
			t.Error("a zero or negative Sleep on a live context reported an interruption")
		}

		done := make(chan bool)
		start = time.Now()
		go func() { done <- Sleep(ctx, time.Hour) }()
		synctest.Wait()
		cancel()
		if <-done {
			t.Error("Sleep cut short by its context reported that the hour passed")
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("Sleep ended %v after the cancel, want at once", got)
		}
		if Sleep(ctx, 0) || Sleep(ctx, time.Second) {
			t.Error("Sleep on an ended context reported that the time passed")
		}
	})
}
