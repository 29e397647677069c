package witness

import (
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

// memLog is a log's tree in memory, and its signing key.
type memLog struct {
	skey, vkey string
	hashes     []tlog.Hash
	n          int64
	tag        string // makes another log's leaves differ
}

func newMemLog(t testing.TB, origin string) *memLog {
	t.Helper()
	skey, vkey, err := audit.GenerateSigner(origin)
	if err != nil {
		t.Fatal(err)
	}
	return &memLog{skey: skey, vkey: vkey}
}

func (l *memLog) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x < 0 || x >= int64(len(l.hashes)) {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = l.hashes[x]
	}
	return out, nil
}

// grow adds records up to n.
func (l *memLog) grow(t testing.TB, n int64) {
	t.Helper()
	for l.n < n {
		hs, err := tlog.StoredHashes(l.n, fmt.Appendf(nil, "record %d%s", l.n, l.tag), l)
		if err != nil {
			t.Fatal(err)
		}
		l.hashes = append(l.hashes, hs...)
		l.n++
	}
}

func (l *memLog) tree(t testing.TB, n int64) audit.Tree {
	t.Helper()
	h, err := tlog.TreeHash(n, l)
	if err != nil {
		t.Fatal(err)
	}
	return audit.Tree{N: n, Hash: h}
}

// sign grows the log to n and signs its checkpoint.
func (l *memLog) sign(t testing.TB, n int64) []byte {
	t.Helper()
	l.grow(t, n)
	msg, err := audit.SignCheckpoint(l.skey, l.tree(t, n))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func (l *memLog) prove(n, old int64) (tlog.TreeProof, error) { return tlog.ProveTree(n, old, l) }

// newWitness starts a witness of logs in dir and returns it and its
// verifier key.
func newWitness(t testing.TB, dir string, logs ...*memLog) (*Server, string) {
	t.Helper()
	skey, err := EnsureKey(dir, "witness.test")
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := VerifierOf(skey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Logs: map[string]string{}, Key: skey, Dir: dir}
	for _, l := range logs {
		cfg.Logs[l.vkey[:indexPlus(l.vkey)]] = l.vkey
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, vkey
}

func indexPlus(vkey string) int {
	for i := range vkey {
		if vkey[i] == '+' {
			return i
		}
	}
	return len(vkey)
}
