package notary

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

// A flipped byte in the hash file (bit rot, a crash, root editing it)
// never makes the notary sign a root the lines do not give: the hash file
// is trusted only up to the last checkpoint's size, once its root there is
// that checkpoint's, and every hash after it is derived from the lines
// again. The log has 13 records, the last checkpoint 8: node (3,0) is the
// root at 8 (checked, found wrong: all rebuilt), node (1,1) lies under it
// off its edge (not read by any later root), node (2,2) was stored after
// it (re-derived).
func TestNotaryRederivesTheTreeAtStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		level   int
		node    int64
		trusted bool
	}{
		{"root at the checkpoint", 3, 0, true},
		{"under the checkpoint, off its edge", 1, 1, true},
		{"after the checkpoint", 2, 2, true},
		{"no checkpoint kept", 2, 2, false},
		{"a leaf after the checkpoint", 0, 11, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			skey, vkey, err := audit.GenerateSigner("coily/test")
			if err != nil {
				t.Fatal(err)
			}
			l, err := audit.Open(audit.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, l, 8)
			n, err := Start(Config{Log: l, Key: skey, Every: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			n.Stop()
			old, err := audit.OpenCheckpoint(n.Latest(), vkey)
			if err != nil || old.N != 8 {
				t.Fatalf("checkpoint at 8: %v, %d", err, old.N)
			}
			appendN(t, l, 5)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			flipHash(t, dir, tlog.StoredHashIndex(tc.level, tc.node))

			l, err = audit.Open(audit.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cfg := Config{Log: l, Key: skey, Every: time.Hour}
			if tc.trusted {
				cfg.Trusted = &old.Tree
			}
			n, err = Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			n.Stop()
			c, err := audit.OpenCheckpoint(n.Latest(), vkey)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := audit.VerifyCheckpoint(dir, c)
			if err != nil {
				t.Fatalf("the checkpoint signed at start: %v", err)
			}
			if c.N != 13 || c.Hash != rep.Tree.Hash {
				t.Fatalf("signed %d %s, the lines give %d %s", c.N, c.Hash, rep.Tree.N, rep.Tree.Hash)
			}
			if _, err := audit.VerifyCheckpoint(dir, old); err != nil {
				t.Fatalf("the checkpoint before: %v", err)
			}
		})
	}
}

func appendN(t *testing.T, l *audit.Log, k int) {
	t.Helper()
	for range k {
		if _, err := l.Append(context.Background(), audit.Record{Event: "exec.decision"}); err != nil {
			t.Fatal(err)
		}
	}
}

// flipHash flips a byte of stored hash idx in the log's hash file.
func flipHash(t *testing.T, dir string, idx int64) {
	t.Helper()
	path := filepath.Join(dir, audit.TreeFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[idx*tlog.HashSize+7] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
