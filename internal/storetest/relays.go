package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"coily.dev/coily/store"
)

func relays(t *testing.T, expiry Expiry, open func(t *testing.T) store.Shared) {
	t.Run("accepted once", func(t *testing.T) { relayOnce(t, open(t)) })
	t.Run("nonce once per sandbox", func(t *testing.T) { nonceOnce(t, open(t), expiry) })
	if expiry == ByPrune {
		t.Run("pruned", func(t *testing.T) { pruneRelays(t, open(t)) })
	}
}

var relayT0 = time.Unix(1_800_000_000, 0)

func relayOnce(t *testing.T, d store.Shared) {
	if _, err := d.Relay("id-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("absent record: %v", err)
	}
	r := store.Relay{ID: "id-1", Sandbox: "demo", BodyHash: "h1", State: store.RelayAccepted, Boot: "b1", Accepted: relayT0}
	if _, found, err := d.AcceptRelay(r, "nonce-1", relayT0.Add(time.Minute)); err != nil || found {
		t.Fatalf("first accept: found=%v err=%v", found, err)
	}
	// The same id again returns the record, whatever the nonce.
	got, found, err := d.AcceptRelay(store.Relay{ID: "id-1", Sandbox: "demo", BodyHash: "h2"}, "nonce-2", relayT0.Add(time.Minute))
	if err != nil || !found || got.BodyHash != "h1" || got.State != store.RelayAccepted || got.Boot != "b1" {
		t.Fatalf("second accept: %+v found=%v err=%v", got, found, err)
	}
	if got, err := d.Relay("id-1"); err != nil || got.BodyHash != "h1" || !got.Accepted.Equal(relayT0) {
		t.Fatalf("Relay: %+v %v", got, err)
	}
	if err := d.FinishRelay("id-1", []byte(`{"outcome":"exit"}`)); err != nil {
		t.Fatal(err)
	}
	got, found, err = d.AcceptRelay(store.Relay{ID: "id-1", Sandbox: "demo"}, "nonce-9", relayT0)
	if err != nil || !found || got.State != store.RelayDone || !bytes.Equal(got.Response, []byte(`{"outcome":"exit"}`)) {
		t.Fatalf("after finishing: %+v found=%v err=%v", got, found, err)
	}
}

func nonceOnce(t *testing.T, d store.Shared, expiry Expiry) {
	if _, found, err := d.AcceptRelay(store.Relay{ID: "id-1", Sandbox: "demo"}, "nonce-1", relayT0.Add(time.Minute)); err != nil || found {
		t.Fatalf("first accept: found=%v err=%v", found, err)
	}
	// A new id reusing the nonce is a replay, and is not recorded; another
	// sandbox may use it.
	if _, _, err := d.AcceptRelay(store.Relay{ID: "id-2", Sandbox: "demo"}, "nonce-1", relayT0); !errors.Is(err, store.ErrNonceSeen) {
		t.Fatalf("reused nonce: %v", err)
	}
	if _, err := d.Relay("id-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the replay was recorded: %v", err)
	}
	if _, found, err := d.AcceptRelay(store.Relay{ID: "id-3", Sandbox: "other"}, "nonce-1", relayT0.Add(time.Minute)); err != nil || found {
		t.Fatalf("other sandbox, same nonce: found=%v err=%v", found, err)
	}
	if expiry != ByPrune {
		return
	}
	// Not forgotten before it expires, forgotten after.
	if _, n, err := d.PruneRelays(time.Time{}, relayT0.Add(30*time.Second)); err != nil || n != 0 {
		t.Fatalf("prune before expiry: n=%d err=%v", n, err)
	}
	if _, _, err := d.AcceptRelay(store.Relay{ID: "id-4", Sandbox: "demo"}, "nonce-1", relayT0.Add(time.Hour)); !errors.Is(err, store.ErrNonceSeen) {
		t.Fatalf("unexpired nonce forgotten: %v", err)
	}
	if _, n, err := d.PruneRelays(time.Time{}, relayT0.Add(2*time.Minute)); err != nil || n != 2 {
		t.Fatalf("prune after expiry: n=%d err=%v, want 2", n, err)
	}
	if _, found, err := d.AcceptRelay(store.Relay{ID: "id-5", Sandbox: "demo"}, "nonce-1", relayT0.Add(time.Hour)); err != nil || found {
		t.Fatalf("expired nonce still held: found=%v err=%v", found, err)
	}
}

func pruneRelays(t *testing.T, d store.Shared) {
	for i, acc := range []time.Time{relayT0.Add(-48 * time.Hour), relayT0.Add(-time.Hour)} {
		id := []string{"old", "new"}[i]
		if _, _, err := d.AcceptRelay(store.Relay{ID: id, Sandbox: "demo", Accepted: acc}, id, acc.Add(6*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	n, _, err := d.PruneRelays(relayT0.Add(-24*time.Hour), relayT0)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if _, err := d.Relay("old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old record kept: %v", err)
	}
	if _, err := d.Relay("new"); err != nil {
		t.Fatalf("new record gone: %v", err)
	}
	// Both nonces had expired: a reused one is no longer seen.
	if _, _, err := d.AcceptRelay(store.Relay{ID: "x", Sandbox: "demo"}, "new", relayT0); err != nil {
		t.Fatalf("expired nonce still held: %v", err)
	}
}
