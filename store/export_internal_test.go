package store

import (
	"errors"
	"testing"
	"time"
)

// TestExportRefusesCorrupt: a record Export cannot read fails the whole
// export (a migration copies all or nothing), never skipped or read as
// zero: a null lockout would arrive in etcd as no lockout.
func TestExportRefusesCorrupt(t *testing.T) {
	for _, c := range []struct {
		name             string
		bucket, key, val []byte
	}{
		{"null lockout", bucketState, keyLockout, []byte("null")},
		{"self-pauses not JSON", bucketState, keySelfPauses, []byte("{")},
		{"rate bucket without time", bucketRates, []byte("a\x00r"), []byte(`{"tokens":1}`)},
		{"key of another sandbox", bucketKeys, []byte("sb1"), []byte(`{"sandbox":"sb2","secret":"AA==","generation":1}`)},
		{"relay of another id", bucketRelays, []byte("r1"), []byte(`{"id":"r2","state":"accepted"}`)},
		{"nonce without sandbox", bucketNonces, []byte("n1"), []byte("12345678")},
		{"nonce expiry short", bucketNonces, []byte("sb\x00n1"), []byte("1234")},
		{"lease of another id", bucketLeases, []byte("l1"), []byte(`{"id":"l2"}`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, _ := openTemp(t)
			putRaw(t, d, c.bucket, c.key, c.val)
			if _, err := d.Export(time.Now()); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Export: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestExportLeavesExpiredNonces: a nonce expired at the export's time is
// not copied (it is refused as stale before it is looked at); one not
// yet expired is, with its expiry.
func TestExportLeavesExpiredNonces(t *testing.T) {
	d, _ := openTemp(t)
	now := time.Now()
	for i, exp := range []time.Time{now.Add(-time.Second), now.Add(time.Minute)} {
		r := Relay{ID: string(rune('a' + i)), Sandbox: "sb", State: RelayAccepted, Accepted: now}
		if _, _, err := d.AcceptRelay(r, "n"+r.ID, exp); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := d.Export(now)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Nonces) != 1 || snap.Nonces[0] != (Nonce{Sandbox: "sb", Nonce: "nb", Expiry: time.Unix(0, now.Add(time.Minute).UnixNano())}) {
		t.Fatalf("nonces %+v", snap.Nonces)
	}
	if len(snap.Relays) != 2 {
		t.Fatalf("relays %d, want both (their age is the importer's to judge)", len(snap.Relays))
	}
}
