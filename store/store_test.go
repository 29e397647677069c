package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

func openTemp(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	d, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, path
}

func reopen(t *testing.T, d *DB, path string) *DB {
	t.Helper()
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	d2, err := Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { d2.Close() })
	return d2
}

// putRaw writes bytes directly under bucket/key, bypassing the JSON encoding.
func putRaw(t *testing.T, d *DB, bucket, key, val []byte) {
	t.Helper()
	err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(key, val)
	})
	if err != nil {
		t.Fatalf("putRaw: %v", err)
	}
}

func TestStopsSurviveReopen(t *testing.T) {
	d, path := openTemp(t)
	since := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.FixedZone("x", 3600))
	lock := Stop{Active: true, By: "alice", Reason: "incident 42", Since: since}
	pause := Stop{Active: true, By: "bob", Reason: "maintenance", Since: since.Add(time.Minute)}
	if err := d.SetLockout(lock); err != nil {
		t.Fatalf("SetLockout: %v", err)
	}
	if err := d.SetPause(pause); err != nil {
		t.Fatalf("SetPause: %v", err)
	}
	d = reopen(t, d, path)
	s, err := d.Stops()
	if err != nil {
		t.Fatalf("Stops: %v", err)
	}
	check := func(name string, got, want Stop) {
		t.Helper()
		if got.Active != want.Active || got.By != want.By || got.Reason != want.Reason || !got.Since.Equal(want.Since) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	check("lockout", s.Lockout, lock)
	check("pause", s.Pause, pause)

	// Clearing persists too.
	if err := d.SetLockout(Stop{Since: since}); err != nil {
		t.Fatalf("SetLockout clear: %v", err)
	}
	d = reopen(t, d, path)
	s, err = d.Stops()
	if err != nil {
		t.Fatalf("Stops: %v", err)
	}
	if s.Lockout.Active || !s.Pause.Active {
		t.Fatalf("after clearing lockout: %+v", s)
	}
}

func TestStopsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		val  []byte
	}{
		{"lockout garbage", keyLockout, []byte("\x00\xffnot json{")},
		{"lockout empty", keyLockout, []byte{}},
		{"lockout truncated", keyLockout, []byte(`{"active":tr`)},
		{"lockout wrong type", keyLockout, []byte(`{"active":"yes"}`)},
		{"lockout null", keyLockout, []byte("null")},
		{"pause garbage", keyPause, []byte("garbage")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, path := openTemp(t)
			if err := d.SetLockout(Stop{Active: true, By: "alice", Since: time.Now()}); err != nil {
				t.Fatal(err)
			}
			putRaw(t, d, bucketState, tc.key, tc.val)
			d = reopen(t, d, path)
			s, err := d.Stops()
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Stops = %+v, %v; want ErrCorrupt", s, err)
			}
		})
	}
}

// A corrupt record written by another tool (not through the store) is still
// refused: open the closed file with bbolt directly.
func TestStopsCorruptExternalWrite(t *testing.T) {
	d, path := openTemp(t)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("state")).Put([]byte("lockout"), []byte{0xde, 0xad, 0xbe, 0xef})
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	d2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if _, err := d2.Stops(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Stops err = %v, want ErrCorrupt", err)
	}
}

// A nested bucket where the lockout record belongs must not read as "no
// record" (unlocked).
func TestStopsBucketInPlaceOfRecord(t *testing.T) {
	d, _ := openTemp(t)
	err := d.db.Update(func(tx *bolt.Tx) error {
		_, err := tx.Bucket(bucketState).CreateBucket(keyLockout)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stops(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Stops err = %v, want ErrCorrupt", err)
	}
}

func TestSecondOpenFailsFast(t *testing.T) {
	_, path := openTemp(t) // stays open until cleanup
	start := time.Now()
	d2, err := Open(path)
	elapsed := time.Since(start)
	if err == nil {
		d2.Close()
		t.Fatal("second Open succeeded while the first is open")
	}
	if !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("error %q does not mention the lock", err)
	}
	if !errors.Is(err, berrors.ErrTimeout) {
		t.Errorf("error %v does not wrap berrors.ErrTimeout", err)
	}
	if elapsed >= OpenTimeout+2*time.Second || elapsed < OpenTimeout/2 {
		t.Errorf("second Open took %v, want about %v", elapsed, OpenTimeout)
	}
}

func TestFileModes(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	path := filepath.Join(dir, "state.db")
	d, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer d.Close()

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("state file mode %o, want 600", m)
	}
	for _, p := range []string{filepath.Join(base, "a"), dir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() {
			t.Errorf("%s is not a directory", p)
		}
		if m := fi.Mode().Perm(); m != 0o700 {
			t.Errorf("dir %s mode %o, want 700", p, m)
		}
	}
}

func TestRequestRoundTrip(t *testing.T) {
	d, path := openTemp(t)
	started := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	want := Request{
		ID: "req-1", Principal: "agent", Rule: "ls", Argv: []string{"ls", "-l"},
		State: RequestFinished, Started: started, Finished: started.Add(time.Second),
		ExitCode: 3, Signal: 9, Code: "command-timeout",
	}
	if err := d.PutRequest(want); err != nil {
		t.Fatalf("PutRequest: %v", err)
	}
	d = reopen(t, d, path)
	got, err := d.Request("req-1")
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if !requestEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}

	// Replace.
	want.State, want.ExitCode = RequestFailed, 1
	if err := d.PutRequest(want); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Request("req-1"); err != nil || !requestEqual(got, want) {
		t.Fatalf("after replace: %+v, %v", got, err)
	}
}

func TestRequestNotFound(t *testing.T) {
	d, _ := openTemp(t)
	_, err := d.Request("nope")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if errors.Is(err, ErrCorrupt) {
		t.Fatalf("not-found reported as corrupt: %v", err)
	}
}

func TestRequestCorrupt(t *testing.T) {
	d, _ := openTemp(t)
	putRaw(t, d, bucketRequests, []byte("bad"), []byte("{"))
	if _, err := d.Request("bad"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func TestPutRequestEmptyID(t *testing.T) {
	d, _ := openTemp(t)
	if err := d.PutRequest(Request{State: RequestFinished}); err == nil {
		t.Fatal("PutRequest with empty ID succeeded")
	}
}
func requestEqual(a, b Request) bool {
	if len(a.Argv) != len(b.Argv) {
		return false
	}
	for i := range a.Argv {
		if a.Argv[i] != b.Argv[i] {
			return false
		}
	}
	return a.ID == b.ID && a.Principal == b.Principal && a.Rule == b.Rule &&
		a.State == b.State && a.Started.Equal(b.Started) && a.Finished.Equal(b.Finished) &&
		a.ExitCode == b.ExitCode && a.Signal == b.Signal && a.Code == b.Code
}

// Leases survive a reopen; a record that does not decode, or names
// another lease, is ErrCorrupt rather than skipped (listing and deleting:
// the contract, internal/storetest).
func TestLeases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coily.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	a := Lease{ID: "aws/sts/coily/AAA", Backend: "vault", RequestID: "r1", Rule: "aws", Acquired: now, Expires: now.Add(time.Hour)}
	b := Lease{ID: "aws/sts/coily/BBB", Backend: "vault", RequestID: "r2", Acquired: now}
	for _, l := range []Lease{b, a} {
		if err := db.PutLease(l); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if db, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.Leases()
	if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Leases = %+v, %v; want %+v, %+v", got, err, a, b)
	}
	for name, raw := range map[string]string{"garbage": "{", "null": "null", "other id": `{"id":"x"}`} {
		if err := db.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketLeases).Put([]byte("bad"), []byte(raw)) }); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Leases(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bad") {
			t.Errorf("%s record: %v, want ErrCorrupt naming it", name, err)
		}
	}
}

// Principals' pauses of themselves survive a restart (what SetSelfPause
// and SetPauses do: the contract, internal/storetest).
func TestSelfPausesPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coily.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(1700000000, 0).UTC()
	if err := db.SetSelfPause("tag:agent", Stop{Active: true, By: "tag:agent", Reason: "stop me", Since: since}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetSelfPause("tag:other", Stop{Active: true, By: "tag:other", Since: since}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := db.Stops()
	if p := st.SelfPauses["tag:agent"]; err != nil || !p.Active || p.Reason != "stop me" || !p.Since.Equal(since) || st.Pause.Active || !st.SelfPauses["tag:other"].Active {
		t.Fatalf("after reopening: %+v %v", st, err)
	}
}
