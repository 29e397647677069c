package audit

import (
	"context"
	"sync"
	"testing"
)

// TestLogTailWhileAppending reads the log's tail while other goroutines
// append (and a small size limit rolls files over): every read is whole,
// in sequence, and ends at a record the log had written.
func TestLogTailWhileAppending(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if recs, err := l.Tail(5); err != nil || len(recs) != 0 {
		t.Fatalf("empty log: %v, %v", recs, err)
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				r := sampleRecord(i)
				appendFn := l.Append
				if (i+w)%2 == 0 {
					appendFn = l.AppendPending
				}
				if _, err := appendFn(context.Background(), r); err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for reads := 0; ; reads++ {
		before := l.Records()
		recs, err := l.Tail(50)
		if err != nil {
			t.Fatalf("tail while appending (read %d): %v", reads, err)
		}
		for i := 1; i < len(recs); i++ {
			if recs[i].Seq != recs[i-1].Seq+1 {
				t.Fatalf("tail out of sequence: %d after %d", recs[i].Seq, recs[i-1].Seq)
			}
		}
		if n := len(recs); n > 0 && recs[n-1].Seq < before {
			t.Fatalf("tail ends at %d, the log had %d before the read", recs[n-1].Seq, before)
		}
		select {
		case <-done:
			recs, err := l.Tail(10)
			if err != nil || len(recs) != 10 || recs[9].Seq != l.Records() {
				t.Fatalf("final tail: %d records, %v", len(recs), err)
			}
			return
		default:
		}
	}
}
