package testserver

import (
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/poll"
)

// Poll checks cond until it holds, failing the test when within passes
// first (what names what it waited for).
func Poll(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, within, what, cond)
}

// WaitAudit waits (up to 5 s) for a record of the server's audit log that
// match accepts, and returns it.
func (in *Instance) WaitAudit(t testing.TB, match func(audit.Record) bool) audit.Record {
	t.Helper()
	var found audit.Record
	Poll(t, 5*time.Second, "audit record", func() bool {
		recs, err := audit.Tail(in.StateDir+"/audit", 1000)
		if err != nil {
			return false
		}
		for _, r := range recs {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}
