package witness

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWitnessCosignsOnlyConsistentGrowth(t *testing.T) {
	dir := t.TempDir()
	l := newMemLog(t, "coily/a")
	s, wkey := newWitness(t, dir, l)
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := &Client{URL: srv.URL, Key: wkey, LogKey: l.vkey, Prove: l.prove}
	ctx := context.Background()
	for _, n := range []int64{0, 3, 7, 7, 20, 1000} {
		msg := l.sign(t, n)
		sig, err := c.Add(ctx, msg)
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if _, err := CheckCosignature(msg, sig, wkey); err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if c.Size() != n {
			t.Fatalf("client acknowledged %d, want %d", c.Size(), n)
		}
	}
	// A restarted witness holds what it cosigned; a new client (a
	// restarted server) learns its size from the 409 and proves from it.
	srv.Close()
	_ = s.Close()
	s2, _ := newWitness(t, dir, l)
	srv2 := httptest.NewServer(s2)
	defer srv2.Close()
	c2 := &Client{URL: srv2.URL, Key: wkey, LogKey: l.vkey, Prove: l.prove}
	if _, err := c2.Add(ctx, l.sign(t, 1500)); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	latest, err := Fetch(ctx, nil, srv2.URL, "coily/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Cosigned(latest, wkey); err != nil {
		t.Fatalf("the latest checkpoint served is not cosigned: %v", err)
	}
	if !bytes.Contains(latest, []byte("\n1500\n")) {
		t.Fatalf("latest checkpoint is not of 1500 records:\n%s", latest)
	}
	// A shorter log (records lost) is refused, as AheadError.
	var ahead *AheadError
	if _, err := (&Client{URL: srv2.URL, Key: wkey, LogKey: l.vkey, Prove: l.prove}).Add(ctx, l.sign(t, 1499)); !errors.As(err, &ahead) || ahead.Witness != 1500 {
		t.Fatalf("a smaller tree: got %v, want AheadError at 1500", err)
	}
	// A rewritten log of the same length or longer is refused.
	forked := &memLog{skey: l.skey, vkey: l.vkey, tag: "x"}
	for _, n := range []int64{1500, 1600} {
		var inc *InconsistentError
		if _, err := (&Client{URL: srv2.URL, Key: wkey, LogKey: forked.vkey, Prove: forked.prove}).Add(ctx, forked.sign(t, n)); !errors.As(err, &inc) {
			t.Fatalf("a rewritten log of %d: got %v, want InconsistentError", n, err)
		}
	}
	if got := s2.Latest("coily/a"); !bytes.Contains(got, []byte("\n1500\n")) {
		t.Fatalf("the witness moved off 1500:\n%s", got)
	}
}

func TestWitnessRefusals(t *testing.T) {
	dir := t.TempDir()
	l := newMemLog(t, "coily/a")
	other := newMemLog(t, "coily/b")
	impostor := newMemLog(t, "coily/a") // another key, the same name
	s, _ := newWitness(t, dir, l)
	if _, err := s.Add(AddRequest{Checkpoint: l.sign(t, 10)}.Format()); err != nil {
		t.Fatal(err)
	}
	l.grow(t, 12)
	p, _ := l.prove(12, 10)
	bad := append(p[:0:0], p...)
	bad[0][0] ^= 1
	cases := []struct {
		name   string
		body   []byte
		status int
	}{
		{"garbage", []byte("hello"), 400},
		{"unknown log", AddRequest{Checkpoint: other.sign(t, 3)}.Format(), 404},
		{"signed by another key", AddRequest{Old: 10, Proof: p, Checkpoint: impostor.sign(t, 12)}.Format(), 403},
		{"old larger than size", AddRequest{Old: 13, Checkpoint: l.sign(t, 12)}.Format(), 400},
		{"stale old", AddRequest{Old: 5, Checkpoint: l.sign(t, 12)}.Format(), 409},
		{"bad proof", AddRequest{Old: 10, Proof: bad, Checkpoint: l.sign(t, 12)}.Format(), 422},
		{"no proof", AddRequest{Old: 10, Checkpoint: l.sign(t, 12)}.Format(), 422},
		{"proof at the same size", AddRequest{Old: 10, Proof: p, Checkpoint: l.sign(t, 10)}.Format(), 422},
		{"smaller tree", AddRequest{Old: 10, Checkpoint: l.sign(t, 9)}.Format(), 400},
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, tc := range cases {
		resp, err := http.Post(srv.URL+"/add-checkpoint", "text/plain", bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		if tc.status == 409 && resp.Header.Get("Content-Type") != SizeType {
			t.Errorf("%s: content type %q", tc.name, resp.Header.Get("Content-Type"))
		}
	}
	huge := bytes.Repeat([]byte("A"), MaxBody+1)
	resp, err := http.Post(srv.URL+"/add-checkpoint", "text/plain", bytes.NewReader(huge))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the cap: status %d", resp.StatusCode)
	}
	if got := s.Latest("coily/a"); !bytes.Contains(got, []byte("\n10\n")) {
		t.Fatalf("a refusal moved the witness:\n%s", got)
	}
}

func TestWitnessStateFailsClosed(t *testing.T) {
	dir := t.TempDir()
	l := newMemLog(t, "coily/a")
	s0, _ := newWitness(t, dir, l)
	_ = s0.Close()
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"logs":{"coily/a":"not a note"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	skey, _ := EnsureKey(dir, "witness.test")
	if _, err := New(Config{Logs: map[string]string{"coily/a": l.vkey}, Key: skey, Dir: dir}); err == nil {
		t.Fatal("a state file that does not read was taken for no state")
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	if _, err := New(Config{Logs: map[string]string{"coily/b": l.vkey}, Key: skey, Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "named") {
		t.Fatalf("a log whose key names another origin: %v", err)
	}
}
