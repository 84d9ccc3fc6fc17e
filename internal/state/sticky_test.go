package state

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// The local store holds at most its bound: expired entries go first, then
// the eighth that expire soonest.
func TestLocalStickySendersBounded(t *testing.T) {
	t.Parallel()
	s := NewLocalStickySenders(16)
	ctx := context.Background()
	for i := range 40 {
		if _, err := s.Stick(ctx, []string{"k" + strconv.Itoa(i)}, []string{"S"}, time.Duration(i+1)*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	held, evicted := s.Len()
	if held > 16 || evicted == 0 {
		t.Fatalf("held %d (bound 16), evicted %d", held, evicted)
	}
	if got, _ := s.Stick(ctx, []string{"k39"}, []string{"X"}, time.Minute); got[0] != "S" {
		t.Fatalf("the entry expiring last was forgotten: %q", got[0])
	}
}
