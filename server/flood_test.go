package server_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
)

// A refusal flood from one caller grows the audit log by kilobytes, not
// megabytes, and every refusal is still counted (one by one, or in a
// refusal.summary).
func TestRefusalFloodIsCountedNotWritten(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	const flood = 3000
	start := time.Now()
	for range flood {
		if r := execArgv(t, in, "/usr/bin/id"); refusal.As(r.err).Code != refusal.PolicyDeny {
			t.Fatalf("want policy-deny, got %v", r.err)
		}
	}
	elapsed := time.Since(start)
	// Still served, still audited one by one once the window turns.
	if r := execArgv(t, in, "/bin/echo", "after"); r.err != nil {
		t.Fatal(r.err)
	}
	in.Stop()
	var size int64
	files, _ := filepath.Glob(filepath.Join(in.StateDir, "audit", "*.jsonl"))
	for _, f := range files {
		fi, _ := os.Stat(f)
		size += fi.Size()
	}
	recs, err := audit.Tail(filepath.Join(in.StateDir, "audit"), 100000)
	if err != nil {
		t.Fatal(err)
	}
	counted, one, summaries := 0, 0, 0
	for _, rec := range recs {
		switch {
		case rec.Event == server.EventRefusalSummary:
			n, _ := strconv.Atoi(rec.Details["count"])
			counted += n
			summaries++
		case rec.Code == string(refusal.PolicyDeny):
			counted++
			one++
		}
	}
	if counted != flood {
		t.Fatalf("%d refusals counted (%d one by one, %d summaries), want %d", counted, one, summaries, flood)
	}
	perSecond := float64(size) / elapsed.Seconds()
	t.Logf("%d refusals in %s: %d records, %d bytes of log (%.0f bytes/s)", flood, elapsed.Round(time.Millisecond), len(recs), size, perSecond)
	if size > 64<<10 {
		t.Fatalf("the flood wrote %d bytes of audit log", size)
	}
}
