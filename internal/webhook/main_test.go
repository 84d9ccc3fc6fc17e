package webhook

import (
	"testing"

	"go.uber.org/goleak"
)

// Deliverers and HTTP clients start goroutines; every test stops them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}
