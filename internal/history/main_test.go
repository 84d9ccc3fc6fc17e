package history

import (
	"testing"

	"go.uber.org/goleak"
)

// The Recorder starts a goroutine; every test stops what it starts.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
