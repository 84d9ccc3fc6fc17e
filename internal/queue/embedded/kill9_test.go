package embedded

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// childEnv switches the test binary into the enqueueing child of
// TestKill9LosesNothingAcknowledged; its value is the store directory.
const childEnv = "SMSGW_EMBEDDED_KILL9_CHILD"

// runChild enqueues until it is killed and prints each id once Enqueue (or
// EnqueueMany) has returned: a printed id is an acknowledged one. Several
// writers run at once so that the kill lands inside group commits.
func runChild(dir string) int {
	q, err := Open(Config{Path: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				now := time.Now()
				if w == 0 {
					ms := make([]*sms.Message, 10)
					for j := range ms {
						ms[j] = &sms.Message{ID: sms.NewID(now), Producer: "kill9", Class: sms.ClassMarketing, To: "+819012345678", Body: "batch", Segments: 1, CreatedAt: now}
					}
					if _, err := q.EnqueueMany(ctx, ms); err != nil {
						fail(err)
					}
					var buf bytes.Buffer
					for _, m := range ms {
						fmt.Fprintln(&buf, m.ID)
					}
					// One write per line keeps lines whole on the pipe.
					for line := range bytes.Lines(buf.Bytes()) {
						_, _ = os.Stdout.Write(line)
					}
					continue
				}
				m := &sms.Message{ID: sms.NewID(now), Producer: "kill9", Class: sms.Classes[i%3], To: "+819012345678", Body: "one", Segments: 1, CreatedAt: now}
				if _, err := q.Enqueue(ctx, m); err != nil {
					fail(err)
				}
				_, _ = os.Stdout.WriteString(m.ID + "\n")
			}
		}()
	}
	select {} // until SIGKILL
}

// TestKill9LosesNothingAcknowledged SIGKILLs a process in the middle of
// enqueueing and checks that every id it acknowledged is in the store.
func TestKill9LosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A child that never gets going must not hang the test.
	guard := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer guard.Stop()

	const killAfter = 3000
	var acked []string
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		id := sc.Text()
		if !sms.ValidID(id) {
			t.Errorf("child printed %q", id)
			continue
		}
		acked = append(acked, id)
		if len(acked) == killAfter && !killed {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// Ids printed between the kill and the child's death are acknowledged
	// too; the scan above read them until the pipe closed.
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child ended before the kill after %d ids: %v\n%s", len(acked), err, stderr.String())
	}
	t.Logf("child acknowledged %d ids before SIGKILL", len(acked))

	q := open(t, Config{Path: dir})
	for _, id := range acked {
		m, err := q.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("acknowledged %s lost after kill -9: %v", id, err)
		}
		if m.Status != sms.StatusQueued {
			t.Fatalf("%s: status %q after restart", id, m.Status)
		}
	}
	n, err := q.Outstanding(t.Context(), "kill9")
	if err != nil {
		t.Fatal(err)
	}
	if n < int64(len(acked)) {
		t.Fatalf("Outstanding = %d, fewer than the %d acknowledged", n, len(acked))
	}
	checkInvariants(t, q)
}
