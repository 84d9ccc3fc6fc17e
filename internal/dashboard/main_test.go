package dashboard_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it starts: the gateway, the simulator and the
// browser (the allocator's cancel waits for the process to exit).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
