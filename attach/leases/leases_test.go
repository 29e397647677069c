package leases

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/keystore"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// backend is a lease backend that remembers what it was asked (the
// seam; the server's tests run the real Vault).
type backend struct {
	mu      sync.Mutex
	revoked []string
	renewed int
	fail    map[string]bool // lease ids it cannot revoke
}

func (b *backend) Fetch(context.Context, keystore.Ref) (string, error) {
	return "", keystore.ErrNotFound
}

func (b *backend) RenewLease(_ context.Context, id string, increment time.Duration) (keystore.Lease, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.renewed++
	return keystore.Lease{ID: id, TTL: 150 * time.Millisecond, Renewable: true}, nil
}

func (b *backend) RevokeLease(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail[id] {
		return errors.New("backend unreachable")
	}
	b.revoked = append(b.revoked, id)
	return nil
}

func config(t *testing.T, b *backend) Config {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ks := keystore.New(keystore.Config{Backends: map[string]keystore.Backend{"test": b}})
	return Config{Keystore: ks, Store: db, Log: slog.New(slog.DiscardHandler), Now: time.Now}
}

func recorded(t *testing.T, cfg Config) []string {
	t.Helper()
	ls, err := cfg.Store.Leases()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.ID)
	}
	return ids
}

// Held leases are recorded before anything uses them and named in every
// audit record; closing revokes each once and forgets it; one that
// cannot be revoked stays recorded for the next start, and the end's
// record says so.
func TestHoldAndClose(t *testing.T) {
	b := &backend{fail: map[string]bool{"b": true}}
	cfg := config(t, b)
	l := New(cfg, "req-1", "aws")
	if err := l.Hold([]keystore.Lease{{Backend: "test", ID: "a", TTL: time.Hour}, {Backend: "test", ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	if got := recorded(t, cfg); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("recorded %v", got)
	}
	var rec audit.Record
	l.Describe(&rec)
	if !slices.Equal(rec.Leases, []string{"a", "b"}) {
		t.Errorf("audit leases %v", rec.Leases)
	}
	end := attach.End{Record: &audit.Record{}}
	l.Close(context.Background(), &end)
	l.Close(context.Background(), &end) // once
	if !slices.Equal(b.revoked, []string{"a"}) {
		t.Errorf("revoked %v", b.revoked)
	}
	if got := recorded(t, cfg); !slices.Equal(got, []string{"b"}) {
		t.Errorf("still recorded %v, want the one not revoked", got)
	}
	if d, f := end.Record.Details, end.Record.Lists["lease_revoke_failed"]; d["leases_revoked"] != "1" || len(f) != 1 || f[0][:3] != "b: " {
		t.Errorf("end details %v, failed %q", d, f)
	}
}

// A lease that cannot be recorded refuses the execution (internal); what
// it holds is revoked on Close. Without leases nothing is written.
func TestHoldUnrecorded(t *testing.T) {
	b := &backend{}
	cfg := config(t, b)
	l := New(cfg, "req-1", "aws")
	if err := l.Hold([]keystore.Lease{{Backend: "test", ID: ""}}); refusal.As(err).Code != refusal.Internal {
		t.Fatalf("a lease the store refuses: %v", err)
	}
	l.Close(context.Background(), &attach.End{})
	if len(b.revoked) != 1 {
		t.Errorf("revoked %v", b.revoked)
	}
	none := New(cfg, "req-2", "aws")
	end := attach.End{Record: &audit.Record{}}
	none.Close(context.Background(), &end)
	var rec audit.Record
	none.Describe(&rec)
	if end.Record.Details != nil || rec.Leases != nil {
		t.Errorf("no leases, yet details %v and leases %v", end.Record.Details, rec.Leases)
	}
}

// A renewable lease that would end before the command's deadline is
// renewed while it runs, and no longer once stopped; the end's record
// counts the renewals.
func TestKeepRenews(t *testing.T) {
	b := &backend{}
	cfg := config(t, b)
	l := New(cfg, "req-1", "aws")
	if err := l.Hold([]keystore.Lease{{Backend: "test", ID: "a", TTL: 150 * time.Millisecond, Renewable: true},
		{Backend: "test", ID: "long", TTL: time.Hour, Renewable: true}}); err != nil {
		t.Fatal(err)
	}
	stop := l.Keep(time.Now().Add(time.Minute))
	for deadline := time.Now().Add(10 * time.Second); l.renewals.Load() < 2; {
		if time.Now().After(deadline) {
			t.Fatal("not renewed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	b.mu.Lock()
	n := b.renewed
	b.mu.Unlock()
	end := attach.End{Record: &audit.Record{}}
	l.Close(context.Background(), &end)
	if end.Record.Details["lease_renewals"] != strconv.Itoa(n) || n < 2 {
		t.Errorf("renewals %d, details %v", n, end.Record.Details)
	}
}

// The leases an earlier run left recorded are revoked and forgotten, each
// audited as a lease.revoke by the server; one that cannot be revoked
// stays recorded for the next start, and its record says why.
func TestRevokeLeftovers(t *testing.T) {
	b := &backend{fail: map[string]bool{"b": true}}
	cfg := config(t, b)
	acquired := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var left []store.Lease
	for _, id := range []string{"a", "b"} {
		l := store.Lease{ID: id, Backend: "test", RequestID: "req-" + id, Rule: "aws", Acquired: acquired}
		if err := cfg.Store.PutLease(l); err != nil {
			t.Fatal(err)
		}
		left = append(left, l)
	}
	var recs []audit.Record
	RevokeLeftovers(context.Background(), cfg, left, func(_ context.Context, r audit.Record) (audit.Record, error) {
		recs = append(recs, r)
		return r, nil
	})
	if got := recorded(t, cfg); !slices.Equal(got, []string{"b"}) {
		t.Errorf("still recorded %v", got)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	for i, want := range []string{"revoked", "failed: "} {
		r := recs[i]
		if r.Event != EventRevoke || r.RequestID != left[i].RequestID || r.Rule != "aws" || !slices.Equal(r.Leases, []string{left[i].ID}) ||
			!strings.HasPrefix(r.Details["result"], want) || !strings.Contains(r.Reason, "2026-01-02T03:04:05Z") {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}

// In a fleet the store holds the leases of every host's running commands:
// a host starting revokes only what its own earlier run left (and a lease
// naming no host: one migrated from a stopped one-host server), never a
// lease another host's command holds now (before, every lease recorded).
func TestLeftoversAreThisHostsOwn(t *testing.T) {
	all := []store.Lease{{ID: "a1", Host: "a"}, {ID: "b1", Host: "b"}, {ID: "one"}, {ID: "a2", Host: "a"}}
	for _, tc := range []struct {
		host string
		want []string
	}{{"a", []string{"a1", "one", "a2"}}, {"b", []string{"b1", "one"}}, {"", []string{"one"}}, {"c", []string{"one"}}} {
		var got []string
		for _, l := range Leftovers(all, tc.host) {
			got = append(got, l.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("host %q: leftovers %v, want %v", tc.host, got, tc.want)
		}
	}
}
