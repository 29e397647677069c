package audit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestFollowAcrossRotation follows a log while it is written and rolls
// over to new files: every record after the start arrives once, in order,
// and Follow returns nil when its context ends.
func TestFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	before := appendN(t, l, 3)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Record, 100)
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, dir, before[len(before)-1].Seq, 5*time.Millisecond, func(r Record) error {
			got <- r
			return nil
		})
	}()
	var want []uint64
	for i := range 30 { // several files of 2 KiB, each begun with a checkpoint
		r, err := l.Append(context.Background(), sampleRecord(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.Seq)
	}
	last := want[len(want)-1]
	deadline := time.After(20 * time.Second)
	var seqs []uint64
	for len(seqs) == 0 || seqs[len(seqs)-1] < last {
		select {
		case r := <-got:
			seqs = append(seqs, r.Seq)
		case err := <-done:
			t.Fatalf("Follow ended early: %v", err)
		case <-deadline:
			t.Fatalf("followed %v, want up to %d", seqs, last)
		}
	}
	for i, s := range seqs {
		if s != before[len(before)-1].Seq+uint64(i)+1 {
			t.Fatalf("followed %v: not every record after %d once in order", seqs, before[len(before)-1].Seq)
		}
	}
	if files, _ := logFiles(dir); len(files) < 3 {
		t.Fatalf("the log did not roll over (%d files): the test proves nothing", len(files))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return when its context ended")
	}
}

// A follow that begins after the log rolled over starts in the file
// holding the record after its start, the oldest included: it began in
// the newest file, skipping every record before it, whenever the record
// it follows from was in the first file.
func TestFollowStartsInTheOldestFile(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	recs := appendN(t, l, 30)
	if files, _ := logFiles(dir); len(files) < 3 {
		t.Fatalf("the log did not roll over (%d files): the test proves nothing", len(files))
	}
	from := recs[2].Seq
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seqs []uint64
	err = Follow(ctx, dir, from, time.Millisecond, func(r Record) error {
		seqs = append(seqs, r.Seq)
		if r.Seq == recs[len(recs)-1].Seq {
			cancel()
		}
		return nil
	})
	if err != nil || len(seqs) != len(recs)-3 || seqs[0] != from+1 {
		t.Fatalf("followed %v (%v), want every record after %d", seqs, err, from)
	}
}

// TestFollowFromEmptyAndFnError: a follow of an empty log sees the first
// record; fn's error ends it with that error.
func TestFollowFromEmptyAndFnError(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	stop := errors.New("enough")
	done := make(chan error, 1)
	go func() {
		done <- Follow(context.Background(), dir, 0, 5*time.Millisecond, func(r Record) error {
			if r.Seq != 1 {
				return fmt.Errorf("first record followed is %d", r.Seq)
			}
			return stop
		})
	}()
	appendN(t, l, 2)
	select {
	case err := <-done:
		if !errors.Is(err, stop) {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Follow did not see the first record")
	}
}

func TestFilterAndTailMatching(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	for _, r := range []Record{
		{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "allow"},
		{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "refuse", Code: "policy-deny"},
		{Event: "exec.decision", Principal: "tag:agent", Rule: "git", Decision: "refuse", Code: "policy-deny"},
		{Event: "exec.decision", Principal: "tag:owner", Rule: "gh", Decision: "refuse", Code: "policy-deny"},
		{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "refuse", Code: "policy-deny"},
	} {
		if _, err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		f    Filter
		n    int
		want []uint64
	}{
		{Filter{}, 2, []uint64{4, 5}},
		{Filter{Principal: "tag:agent"}, 10, []uint64{1, 2, 3, 5}},
		{Filter{Principal: "tag:agent", Rule: "gh", Code: "policy-deny"}, 10, []uint64{2, 5}},
		{Filter{Principal: "tag:agent", Rule: "gh", Code: "policy-deny"}, 1, []uint64{5}},
		{Filter{Rule: "gh", Code: "policy-deny", Principal: "tag:owner"}, 10, []uint64{4}},
		{Filter{Code: "rate-limit"}, 10, nil},
	} {
		recs, err := TailMatching(dir, tc.n, tc.f.Match)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, r := range recs {
			got = append(got, r.Seq)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%+v, %d: %v, want %v", tc.f, tc.n, got, tc.want)
		}
	}
}
