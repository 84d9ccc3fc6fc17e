package embedded

import (
	"sync"
	"testing"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
)

// TestShelf runs the set-aside cases; the pause is a flag per producer, as
// the gateway's operator pause answers Held in this process.
func TestShelf(t *testing.T) {
	var mu sync.Mutex
	held := map[queue.Queue]map[string]bool{}
	queuetest.RunShelf(t, queuetest.ShelfHarness{
		New: func(t *testing.T) queue.Queue { return open(t, Config{}) },
		Pause: func(t *testing.T, q queue.Queue, producer string, on bool) queue.Shelf {
			mu.Lock()
			defer mu.Unlock()
			if held[q] == nil {
				held[q] = map[string]bool{}
			}
			held[q][producer] = on
			return queue.Shelf{Held: func() bool {
				mu.Lock()
				defer mu.Unlock()
				return held[q][producer]
			}}
		},
	})
}
