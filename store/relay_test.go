package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// A request's answer and its nonce survive a reopen of the file (being
// recorded once, and the rest of the relay's contract: internal/storetest).
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
	if err := db.FinishRelay("id-1", []byte(`{"outcome":"exit"}`)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, found, err := db.AcceptRelay(Relay{ID: "id-1", Sandbox: "demo"}, "nonce-9", now)
	if err != nil || !found || got.State != RelayDone || !bytes.Equal(got.Response, []byte(`{"outcome":"exit"}`)) {
		t.Fatalf("after reopen: %+v found=%v err=%v", got, found, err)
	}
	if _, _, err := db.AcceptRelay(Relay{ID: "id-4", Sandbox: "demo"}, "nonce-1", now.Add(time.Hour)); !errors.Is(err, ErrNonceSeen) {
		t.Fatalf("unexpired nonce forgotten across reopen: %v", err)
	}
}
