package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// filledFile is a real state file filled through store's API, as a
// server on one host leaves it, and what it was filled with.
type filledFile struct {
	path    string
	stops   store.Stops
	secrets map[string][]byte
	rate    store.Rate
}

func fillStateFile(t *testing.T, now time.Time) filledFile {
	t.Helper()
	f := filledFile{path: filepath.Join(t.TempDir(), "coily.db"), rate: store.Rate{PerMinute: 1, Burst: 1},
		secrets: map[string][]byte{"sb/1": secret(), "sb 2": secret()}}
	db, err := store.Open(f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock := store.Stop{Active: true, By: "alice@", Reason: "stolen laptop", Since: now.Add(-time.Minute)}
	f.stops = store.Stops{Lockout: lock, Pause: store.Stop{By: "bob@", Since: now.Add(-time.Hour)},
		SelfPauses: map[string]store.Stop{"agent/1": {Active: true, By: "agent/1", Since: now}, "agent 2": {Since: now}}}
	must(t, db.SetLockout(f.stops.Lockout))
	must(t, db.SetPauses(f.stops.Pause, f.stops.SelfPauses))
	for _, b := range []string{"alice@\x00gh", "bob@\x00git/push"} {
		if ok, _, err := db.Take(b, f.rate, now); !ok || err != nil {
			t.Fatalf("Take %q: %v %v", b, ok, err)
		}
	}
	if _, err := db.IssueKey("sb 2", f.secrets["sb 2"], now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ReplaceKeys([]string{"sb/1", "sb 2"}, func(sb string) ([]byte, error) { return f.secrets[sb], nil }, now); err != nil {
		t.Fatal(err)
	}
	relays := []struct {
		r       store.Relay
		nonce   string
		expiry  time.Time
		respond []byte
	}{
		{store.Relay{ID: "r/1", Sandbox: "sb/1", BodyHash: "h1", State: store.RelayAccepted, Boot: "b", Accepted: now}, "n/1", now.Add(time.Minute), nil},
		{store.Relay{ID: "r2", Sandbox: "sb/1", BodyHash: "h2", State: store.RelayAccepted, Boot: "b", Accepted: now}, "n2", now.Add(time.Minute), []byte("answer")},
		{store.Relay{ID: "old", Sandbox: "sb 2", BodyHash: "h3", State: store.RelayAccepted, Boot: "b", Accepted: now.Add(-48 * time.Hour)}, "stale", now.Add(-time.Hour), nil},
	}
	for _, c := range relays {
		if _, found, err := db.AcceptRelay(c.r, c.nonce, c.expiry); found || err != nil {
			t.Fatalf("AcceptRelay %s: %v %v", c.r.ID, found, err)
		}
		if c.respond != nil {
			must(t, db.FinishRelay(c.r.ID, c.respond))
		}
	}
	must(t, db.PutLease(store.Lease{ID: "vault/lease/1", Backend: "vault", RequestID: "q1", Acquired: now}))
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func export(t *testing.T, path string, now time.Time) store.Snapshot {
	t.Helper()
	db, err := store.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	snap, err := db.Export(now)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestImportRoundTrips: what a state file holds of the shared state reads
// back from etcd the same, and decides the same: the lockout is in force,
// a key opens with the seal key (and not without it), a used nonce and a
// relay id are still used, a spent bucket is still spent, a lease is
// still to revoke.
func TestImportRoundTrips(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	f := fillStateFile(t, now)
	snap := export(t, f.path, now)
	s := open(t)
	got, err := s.Import(context.Background(), snap, now, false)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Counts{Lockout: true, SelfPauses: 1, Rates: 2, Keys: 2, Relays: 2, Nonces: 2, Leases: 1}
	if got.Counts != want || got.ExpiredRelays != 1 || got.Transactions != 1 {
		t.Errorf("imported %+v, want %+v, 1 expired relay, 1 transaction", got, want)
	}

	st, err := s.Stops()
	if err != nil || !reflect.DeepEqual(normal(st), normal(f.stops)) {
		t.Errorf("stops in etcd %+v (%v), want %+v", st, err, f.stops)
	}
	for sb, sec := range f.secrets {
		k, err := s.Key(sb)
		if err != nil || !bytes.Equal(k.Secret, sec) || k.Generation != map[string]int{"sb/1": 1, "sb 2": 2}[sb] {
			t.Errorf("key %q: generation %d, same secret %v, %v", sb, k.Generation, bytes.Equal(k.Secret, sec), err)
		}
		if raw := get(t, prefix(t)+"keys/", clientv3.WithPrefix()); bytes.Contains(rawValues(raw), sec) {
			t.Errorf("key %q is in etcd in clear", sb)
		}
	}
	other := make([]byte, 32)
	if _, err := openCfg(t, etcdstore.Config{SealKey: other}).Key("sb/1"); err == nil {
		t.Error("a key imported opened with another seal key")
	}
	if r, err := s.Relay("r2"); err != nil || r.State != store.RelayDone || string(r.Response) != "answer" {
		t.Errorf("relay r2: %+v, %v", r, err)
	}
	if _, err := s.Relay("old"); err == nil {
		t.Error("a relay record past RelayKeep was copied")
	}
	fresh := store.Relay{ID: "r3", Sandbox: "sb/1", BodyHash: "h", State: store.RelayAccepted, Boot: "b2", Accepted: now}
	_, _, err = s.AcceptRelay(fresh, "n/1", now.Add(time.Minute))
	wantErr(t, err, store.ErrNonceSeen)
	if _, found, err := s.AcceptRelay(store.Relay{ID: "r/1", Sandbox: "sb/1", Accepted: now}, "n9", now.Add(time.Minute)); !found || err != nil {
		t.Errorf("relay id r/1 accepted again after the import: found %v, %v", found, err)
	}
	if ok, _, err := s.Take("bob@\x00git/push", f.rate, now); ok || err != nil {
		t.Errorf("a bucket spent in the file has a token in etcd: %v, %v", ok, err)
	}
	if ls, err := s.Leases(); err != nil || len(ls) != 1 || ls[0].ID != "vault/lease/1" {
		t.Errorf("leases: %+v, %v", ls, err)
	}
}

// normal makes inactive self-pause maps comparable after JSON.
func normal(s store.Stops) store.Stops {
	s.Lockout.Since, s.Pause.Since = s.Lockout.Since.UTC(), s.Pause.Since.UTC()
	m := map[string]store.Stop{}
	for k, v := range s.SelfPauses {
		v.Since = v.Since.UTC()
		m[k] = v
	}
	s.SelfPauses = m
	return s
}

func rawValues(r *clientv3.GetResponse) []byte {
	var out []byte
	for _, kv := range r.Kvs {
		out = append(out, kv.Value...)
	}
	return out
}

// TestImportRefusesNonEmpty: a trust point that holds anything (here a
// lockout taken on etcd, or a previous import) is not written over, dry
// or not, and nothing is written.
func TestImportRefusesNonEmpty(t *testing.T) {
	now := time.Now().UTC()
	snap := export(t, fillStateFile(t, now).path, now)
	s := open(t)
	must(t, s.SetSelfPause("someone", store.Stop{Active: true, Since: now}))
	for _, dry := range []bool{true, false} {
		_, err := s.Import(context.Background(), snap, now, dry)
		wantErr(t, err, etcdstore.ErrNotEmpty)
	}
	if n := get(t, prefix(t), clientv3.WithPrefix(), clientv3.WithCountOnly()).Count; n != 1 {
		t.Errorf("%d keys after a refused import, want the 1 there before", n)
	}
	if st, _ := s.Stops(); st.Lockout.Active {
		t.Error("a refused import wrote the lockout")
	}
}

// TestImportDryWritesNothing: a dry run counts and writes nothing (no
// lease granted either), and a real import after it succeeds.
func TestImportDryWritesNothing(t *testing.T) {
	now := time.Now().UTC()
	snap := export(t, fillStateFile(t, now).path, now)
	s := open(t)
	leases := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := raw(t).Leases(ctx)
		must(t, err)
		return len(r.Leases)
	}
	before := leases()
	got, err := s.Import(context.Background(), snap, now, true)
	if err != nil || got.Keys != 2 || got.Transactions != 0 {
		t.Fatalf("dry: %+v, %v", got, err)
	}
	if n := get(t, prefix(t), clientv3.WithPrefix(), clientv3.WithCountOnly()).Count; n != 0 || leases() != before {
		t.Fatalf("a dry run wrote %d keys, granted %d leases", n, leases()-before)
	}
	if _, err := s.Import(context.Background(), snap, now, false); err != nil {
		t.Fatal(err)
	}
}

// TestImportInBatches: more records than one transaction holds go in
// several, the stops in the first; every one arrives.
func TestImportInBatches(t *testing.T) {
	now := time.Now().UTC()
	snap := store.Snapshot{Stops: store.Stops{Lockout: store.Stop{Active: true, Since: now}}}
	for i := range 150 {
		snap.Leases = append(snap.Leases, store.Lease{ID: fmt.Sprintf("l%03d", i), Backend: "vault", Acquired: now})
	}
	s := open(t)
	got, err := s.Import(context.Background(), snap, now, false)
	if err != nil || got.Transactions != 3 {
		t.Fatalf("imported %+v, %v; want 3 transactions", got, err)
	}
	if ls, err := s.Leases(); err != nil || len(ls) != 150 {
		t.Fatalf("%d leases, %v", len(ls), err)
	}
}

// openErr opens a store on the test's prefix and returns Open's error.
func openErr(t *testing.T, cfg etcdstore.Config) error {
	t.Helper()
	cfg.Endpoints, cfg.TLS, cfg.Prefix = cluster.Endpoints(), cluster.ClientTLS(), prefix(t)
	if cfg.SealKey == nil && !cfg.AuditOnly {
		cfg.SealKey = sealKey
	}
	s, err := etcdstore.Open(context.Background(), cfg)
	if err == nil {
		s.Close()
	}
	return err
}

// TestOpenRefusesMidMigration: while an import writes (between its
// transactions), or after one cut off, a host opening the prefix is
// refused ErrMigrating (state-unavailable), told how to go on, instead of
// reading half a state; the audit view may still open it; once the import
// ends, the marker is gone and a host opens it.
func TestOpenRefusesMidMigration(t *testing.T) {
	now := time.Now().UTC()
	snap := store.Snapshot{Stops: store.Stops{Lockout: store.Stop{Active: true, Since: now}}}
	for i := range 150 {
		snap.Leases = append(snap.Leases, store.Lease{ID: fmt.Sprintf("l%03d", i), Backend: "vault", Acquired: now})
	}
	s := open(t)
	early := open(t) // opened before the marker: its claim comes after it
	var midway, claimed error
	s.SetAfterImportTxn(func(i int) error {
		if i == 0 {
			claimed = early.ClaimHost(context.Background(), "web-1", "id-early", discard)
			midway = openErr(t, etcdstore.Config{})
			if err := openErr(t, etcdstore.Config{AuditOnly: true}); err != nil {
				t.Errorf("the audit view refused midway: %v", err)
			}
		}
		return nil
	})
	if _, err := s.Import(context.Background(), snap, now, false); err != nil {
		t.Fatal(err)
	}
	wantErr(t, midway, etcdstore.ErrMigrating)
	wantErr(t, midway, store.ErrUnavailable)
	wantErr(t, claimed, etcdstore.ErrMigrating) // found in review: it claimed, and served half a state
	if !strings.Contains(midway.Error(), "etcdctl del --prefix "+prefix(t)) {
		t.Errorf("the refusal does not say how to go on: %v", midway)
	}
	if err := openErr(t, etcdstore.Config{}); err != nil {
		t.Fatalf("open after the import: %v", err)
	}
}

// TestImportCutOffLeavesTheMarker: an import cut off after its first
// transaction leaves the prefix refused to every host until it is emptied;
// emptied, an import runs again.
func TestImportCutOffLeavesTheMarker(t *testing.T) {
	now := time.Now().UTC()
	snap := store.Snapshot{Stops: store.Stops{Lockout: store.Stop{Active: true, Since: now}}}
	for i := range 100 {
		snap.Leases = append(snap.Leases, store.Lease{ID: fmt.Sprintf("l%03d", i), Backend: "vault", Acquired: now})
	}
	s := open(t)
	cut := errors.New("cut off")
	s.SetAfterImportTxn(func(int) error { return cut })
	if _, err := s.Import(context.Background(), snap, now, false); !errors.Is(err, cut) {
		t.Fatalf("import: %v", err)
	}
	wantErr(t, openErr(t, etcdstore.Config{}), etcdstore.ErrMigrating)
	if _, err := s.Import(context.Background(), snap, now, false); !errors.Is(err, etcdstore.ErrNotEmpty) {
		t.Fatalf("an import over a half one: %v, want ErrNotEmpty", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := raw(t).Delete(ctx, prefix(t), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	s.SetAfterImportTxn(nil)
	if _, err := s.Import(context.Background(), snap, now, false); err != nil {
		t.Fatal(err)
	}
	if err := openErr(t, etcdstore.Config{}); err != nil {
		t.Fatalf("open after the import again: %v", err)
	}
}
