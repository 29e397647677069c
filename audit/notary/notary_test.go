package notary

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/audit"
)

// The notary signs at start, after Records records, at once after a
// lockout (before Append returns to the caller), and at stop; each
// checkpoint is kept, written for witnesses, opens with the verifier key
// and verifies against the log.
func TestNotarySigns(t *testing.T) {
	dir, l, skey, vkey := signedLog(t)
	var mu sync.Mutex
	var kept [][]byte
	n, err := Start(Config{Log: l, Key: skey, Every: time.Hour, Records: 5, Keep: func(b []byte, _ time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		kept = append(kept, b)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	latest := func() audit.Checkpoint {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, audit.CheckpointFile))
		if err != nil {
			t.Fatal(err)
		}
		c, err := audit.OpenCheckpoint(b, vkey)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := latest(); c.N != 0 {
		t.Fatalf("first checkpoint at %d", c.N)
	}
	ctx := context.Background()
	for range 12 {
		if _, err := l.Append(ctx, audit.Record{Event: "exec.decision"}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for latest().N < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 12 records with Records 5: latest at %d", latest().N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r, err := l.Append(ctx, audit.Record{Event: audit.EventLockout, Decision: "allow"})
	if err != nil {
		t.Fatal(err)
	}
	if c := latest(); c.N != int64(r.Seq) {
		t.Fatalf("checkpoint after the lockout covers %d records, want %d", c.N, r.Seq)
	}
	if _, err := l.Append(ctx, audit.Record{Event: "exec.decision"}); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	c := latest()
	if c.N != int64(r.Seq)+1 {
		t.Fatalf("checkpoint at stop covers %d", c.N)
	}
	if _, err := audit.VerifyCheckpoint(dir, c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kept) < 4 || string(kept[len(kept)-1]) != string(n.Latest()) {
		t.Fatalf("kept %d checkpoints, the last not the latest", len(kept))
	}
}

// Every record that changes what the trust point admits is signed for at
// once, the loosenings learnt from other hosts too (unlock.remote and
// resume.remote were missing when the two changes met).
func TestNotarySignsEveryStopAtOnce(t *testing.T) {
	_, l, skey, vkey := signedLog(t)
	n, err := Start(Config{Log: l, Key: skey, Every: time.Hour, Records: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	for _, event := range []string{audit.EventLockout, audit.EventLockoutRemote, audit.EventUnlock, audit.EventUnlockRemote,
		audit.EventPause, audit.EventResume, audit.EventResumeRemote, audit.EventStateRestore, audit.EventRepair, "policy.reload"} {
		r, err := l.Append(context.Background(), audit.Record{Event: event, Decision: "allow"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := audit.OpenCheckpoint(n.Latest(), vkey)
		if err != nil || c.N != int64(r.Seq) {
			t.Errorf("after %s (record %d) the latest checkpoint covers %d (%v)", event, r.Seq, c.N, err)
		}
	}
}

// signedLog is a new log in a temporary directory and a checkpoint key.
func signedLog(t *testing.T) (dir string, l *audit.Log, skey, vkey string) {
	t.Helper()
	dir = t.TempDir()
	l, err := audit.Open(audit.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if skey, vkey, err = audit.GenerateSigner("coily/test"); err != nil {
		t.Fatal(err)
	}
	return dir, l, skey, vkey
}
