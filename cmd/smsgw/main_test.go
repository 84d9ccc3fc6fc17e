package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check-config", "--config", "../../internal/config/testdata/good/full.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("good config: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ok") {
		t.Fatalf("stdout: %s", out.String())
	}
	if !strings.Contains(out.String(), "segments: at most 5 per message (limits.burst; messages.max_segments 10 is not reached)") {
		t.Errorf("stdout does not say that limits.burst bounds a message's segments: %s", out.String())
	}
	// login names its senders; the other two do not, so a leaked key of
	// theirs could send as any sender id: check-config says which.
	if !strings.Contains(out.String(), "senders: any sender id for notify-worker, cart-batch (no producers[].senders: set them)") {
		t.Errorf("stdout does not name the producers without senders: %s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"check-config", "--config", "../../internal/config/testdata/bad/over_contract.yaml"}, &out, &errb); code != 1 {
		t.Fatalf("bad config: exit %d", code)
	}
	if !strings.Contains(errb.String(), "limits.target_rps") {
		t.Fatalf("stderr does not name the key: %s", errb.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
