package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestRelayExactlyOnceAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coily.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	r := Relay{ID: "id-1", Sandbox: "demo", BodyHash: "h1", State: RelayAccepted, Boot: "b1", Accepted: now}
	if _, found, err := db.AcceptRelay(r, "nonce-1", now.Add(time.Minute)); err != nil || found {
		t.Fatalf("first accept: found=%v err=%v", found, err)
	}
	// The same id again returns the record, whatever the nonce.
	got, found, err := db.AcceptRelay(Relay{ID: "id-1", Sandbox: "demo", BodyHash: "h2"}, "nonce-2", now.Add(time.Minute))
	if err != nil || !found || got.BodyHash != "h1" || got.State != RelayAccepted {
		t.Fatalf("second accept: %+v found=%v err=%v", got, found, err)
	}
	// A new id reusing the nonce is a replay; another sandbox may use it.
	if _, _, err := db.AcceptRelay(Relay{ID: "id-2", Sandbox: "demo"}, "nonce-1", now); !errors.Is(err, ErrNonceSeen) {
		t.Fatalf("reused nonce: %v", err)
	}
	if _, found, err := db.AcceptRelay(Relay{ID: "id-3", Sandbox: "other"}, "nonce-1", now.Add(time.Minute)); err != nil || found {
		t.Fatalf("other sandbox, same nonce: %v", err)
	}
	if err := db.FinishRelay("id-1", []byte(`{"outcome":"exit"}`)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, found, err = db.AcceptRelay(Relay{ID: "id-1", Sandbox: "demo"}, "nonce-9", now)
	if err != nil || !found || got.State != RelayDone || !bytes.Equal(got.Response, []byte(`{"outcome":"exit"}`)) {
		t.Fatalf("after reopen: %+v found=%v err=%v", got, found, err)
	}
	if _, n, err := db.PruneRelays(time.Time{}, now.Add(30*time.Second)); err != nil || n != 0 {
		t.Fatalf("prune before expiry: n=%d err=%v", n, err)
	}
	if _, _, err := db.AcceptRelay(Relay{ID: "id-4", Sandbox: "demo"}, "nonce-1", now.Add(time.Hour)); !errors.Is(err, ErrNonceSeen) {
		t.Fatalf("unexpired nonce forgotten: %v", err)
	}
	if _, n, err := db.PruneRelays(time.Time{}, now.Add(2*time.Minute)); err != nil || n != 2 {
		t.Fatalf("prune after expiry: n=%d err=%v, want 2", n, err)
	}
}

func TestKeysReplaceAdvancesGeneration(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Key("demo"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent key: %v", err)
	}
	n := byte(0)
	secret := func(string) ([]byte, error) { n++; return bytes.Repeat([]byte{n}, 32), nil }
	if _, err := db.ReplaceKeys([]string{"demo", "ci"}, secret, time.Now()); err != nil {
		t.Fatal(err)
	}
	k, err := db.ReplaceKeys([]string{"demo"}, secret, time.Now())
	if err != nil || k[0].Generation != 2 || k[0].Secret[0] != 3 {
		t.Fatalf("rotate: %+v %v", k, err)
	}
	keys, err := db.Keys()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys: %+v %v", keys, err)
	}
	if _, err := db.ReplaceKeys([]string{"x"}, func(string) ([]byte, error) { return nil, errors.New("no entropy") }, time.Now()); err == nil {
		t.Fatal("a failing key source must fail the replacement")
	}
}

func TestPruneRelays(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Unix(1_800_000_000, 0)
	for i, acc := range []time.Time{now.Add(-48 * time.Hour), now.Add(-time.Hour)} {
		id := []string{"old", "new"}[i]
		if _, _, err := db.AcceptRelay(Relay{ID: id, Sandbox: "demo", Accepted: acc}, id, acc.Add(6*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	n, _, err := db.PruneRelays(now.Add(-24*time.Hour), now)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if _, err := db.Relay("old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old record kept: %v", err)
	}
	if _, err := db.Relay("new"); err != nil {
		t.Fatalf("new record gone: %v", err)
	}
	// Both nonces had expired: a reused one is no longer seen.
	if _, _, err := db.AcceptRelay(Relay{ID: "x", Sandbox: "demo"}, "new", now); err != nil {
		t.Fatalf("expired nonce still held: %v", err)
	}
}

func TestIssueKeyOnce(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := db.IssueKey("demo", bytes.Repeat([]byte{1}, 32), time.Now())
	if err != nil || k.Generation != 1 {
		t.Fatalf("first issue: %+v %v", k, err)
	}
	if _, err := db.IssueKey("demo", bytes.Repeat([]byte{2}, 32), time.Now()); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("second issue: %v", err)
	}
	if got, _ := db.Key("demo"); got.Secret[0] != 1 {
		t.Fatal("the second issue replaced the key")
	}
}
