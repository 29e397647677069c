package server_test

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/recorder"
	"coily.dev/coily/refusal"
)

// A refusal flood from one caller grows the audit log by kilobytes, not
// megabytes, a second, and every refusal is still counted (one by one, or
// in a refusal.summary written before the refusal is answered).
func TestRefusalFloodIsCountedNotWritten(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	const workers, each = 32, 40
	const flood = workers * each
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, flood)
	for range workers {
		wg.Go(func() {
			for range each {
				if r := execArgv(t, in, "/usr/bin/id"); refusal.As(r.err).Code != refusal.PolicyDeny {
					errs <- r.err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("want policy-deny, got %v", err)
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
		case rec.Event == recorder.EventRefusalSummary:
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
	if perSecond > 16<<10 || size > 256<<10 {
		t.Fatalf("the flood wrote %d bytes of audit log (%.0f bytes/s)", size, perSecond)
	}
}
