package audit

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// A log with a host names it in every record it writes, inside the
// hashed line (changing it breaks the line); ParseLine reads each line as
// written, and Follower hands over the line with its record.
func TestHostInEveryRecord(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Host: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		if _, err := l.Append(context.Background(), Record{Event: "exec"}); err != nil {
			t.Fatal(err)
		}
	}
	var prev string
	n := 0
	err = NewFollower(dir, 0).ReadNew(func(r Record, line []byte) error {
		n++
		got, h, err := ParseLine(line)
		if err != nil || got.Host != "host-1" || r.Host != "host-1" || got.Seq != r.Seq {
			t.Fatalf("record %d: %+v, %v", r.Seq, got, err)
		}
		if prev != "" && got.Prev != prev {
			t.Fatalf("record %d does not chain", r.Seq)
		}
		prev = h
		forged := bytes.Replace(line, []byte(`"host":"host-1"`), []byte(`"host":"host-2"`), 1)
		if _, _, err := ParseLine(forged); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a line naming another host: %v, want ErrCorrupt", err)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("read %d records: %v", n, err)
	}
	mustVerify(t, dir)
}

// A Follower resumes after a record its fn failed on: that record counts
// as read.
func TestFollowerGoesOnAfterAnError(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	appendN(t, l, 3)
	f := NewFollower(dir, 0)
	stop := errors.New("stop")
	var seen []uint64
	for range 3 {
		err := f.ReadNew(func(r Record, _ []byte) error {
			seen = append(seen, r.Seq)
			return stop
		})
		if !errors.Is(err, stop) {
			t.Fatal(err)
		}
	}
	if len(seen) != 3 || seen[0] != 1 || seen[2] != 3 {
		t.Fatalf("read %v, want 1, 2, 3", seen)
	}
}

// A log opened without a host goes on naming the host its last record
// named (coily audit repair on a fleet's host writes as that host).
func TestHostKeptAcrossOpen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Host: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), Record{Event: "exec"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := l.Append(context.Background(), Record{Event: "exec"})
	if err != nil || r.Host != "host-1" {
		t.Fatalf("record after reopening: host %q, %v", r.Host, err)
	}
}
