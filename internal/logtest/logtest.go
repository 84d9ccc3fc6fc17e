// Package logtest holds what tests share to read what a component logged.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for a logger's goroutines and the test
// that reads it: the sink of a test's slog handler or a command's writers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
