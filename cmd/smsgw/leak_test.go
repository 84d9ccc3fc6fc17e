package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The commands start servers and loops (demo, sim); each must stop all of
// them when its context ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
