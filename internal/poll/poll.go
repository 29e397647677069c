// Package poll waits, in tests, for what a test cannot be told of (a line
// in a process's log, a file, a server's state): it asks again, more
// slowly as the wait goes on, until a deadline. Tests wait this way or on
// an event, never with a bare sleep. Tests only.
package poll

import (
	"testing"
	"time"
)

// The pause between two asks starts at minPause and doubles up to
// maxPause: a condition that holds soon is seen soon, and a slow one
// (a call to Vault, a process started) is not asked in a busy loop.
const (
	minPause = 5 * time.Millisecond
	maxPause = 50 * time.Millisecond
)

// Within calls cond until it returns true or within has passed, and
// reports whether it returned true.
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	pause := minPause
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
	return true
}

// Until is Within that fails t, naming what it waited for, when within
// passes before cond holds.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}
