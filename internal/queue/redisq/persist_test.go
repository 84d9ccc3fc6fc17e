package redisq

import (
	"log/slog"
	"strings"
	"testing"

	"smsgw/internal/logtest"
	"smsgw/internal/redistest"
)

func TestCheckPersistence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     redistest.ServerOptions
		want     bool
		wantWarn bool
	}{
		{"aof on", redistest.ServerOptions{AppendOnly: true}, true, false},
		{"aof off", redistest.ServerOptions{}, false, true},
		{"aof on, CONFIG disabled", redistest.ServerOptions{AppendOnly: true, Args: []string{"--rename-command", "CONFIG", ""}}, true, false},
		{"aof off, CONFIG disabled", redistest.ServerOptions{Args: []string{"--rename-command", "CONFIG", ""}}, false, true},
		{"aof on, appendfsync no", redistest.ServerOptions{AppendOnly: true, Args: []string{"--appendfsync", "no"}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t, tc.opts)
			var logs logtest.Buffer
			q := openWith(t, Config{Client: newClient(t, srv.Addr), Account: "a", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			got, err := q.CheckPersistence(t.Context())
			if err != nil || got != tc.want {
				t.Fatalf("CheckPersistence = %v, %v: want %v", got, err, tc.want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.wantWarn {
				t.Fatalf("warned %v, want %v; logs:\n%s", warned, tc.wantWarn, logs.String())
			}
		})
	}
}
