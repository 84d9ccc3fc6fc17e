package config

import (
	"strings"
	"testing"
)

// Two configured senders whose masked labels are one are refused (their
// metrics and stats rows would merge), naming the key without either
// number in clear; numbers whose masks differ, and alphanumeric ids, load.
func TestSenderLabelsDistinct(t *testing.T) {
	load := func(senders string) error {
		_, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
limits: {senders: {`+senders+`}}
producers: [{name: app, key: "app-key-0123456789ab", rate: 1, burst: 1, classes: [marketing]}]
`), nil)
		return err
	}
	if err := load(`"+15551234567": {max_rps: 1}, "+15551230000": {max_rps: 1}, Mkt1: {max_rps: 3}`); err != nil {
		t.Fatalf("distinct senders refused: %v", err)
	}
	err := load(`"+15551234567": {max_rps: 1}, "+15558884567": {max_rps: 1}`)
	if err == nil || !strings.Contains(err.Error(), "limits.senders.+155****4567: two senders show as +155****4567") {
		t.Fatalf("senders of one label: got %v", err)
	}
	if strings.Contains(err.Error(), "1234567") || strings.Contains(err.Error(), "8884567") {
		t.Errorf("a number in clear in the error: %v", err)
	}
}
