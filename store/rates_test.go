package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var rateT0 = time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)

const rateKey = "agent\x00ls"

// take calls Take and fails the test on error.
func take(t *testing.T, d *DB, key string, r Rate, now time.Time) (bool, time.Duration) {
	t.Helper()
	ok, retry, err := d.Take(key, r, now)
	if err != nil {
		t.Fatalf("Take(%q, %+v, %v): %v", key, r, now, err)
	}
	if ok && retry != 0 {
		t.Fatalf("Take ok with retryAfter %v", retry)
	}
	if !ok && retry < time.Millisecond {
		t.Fatalf("Take refused with retryAfter %v < 1ms", retry)
	}
	return ok, retry
}

// takeN takes n tokens that must all be granted.
func takeN(t *testing.T, d *DB, key string, r Rate, now time.Time, n int) {
	t.Helper()
	for i := range n {
		if ok, retry := take(t, d, key, r, now); !ok {
			t.Fatalf("take %d of %d refused (retry %v)", i+1, n, retry)
		}
	}
}

// drain takes until refused and returns how many were granted.
func drain(t *testing.T, d *DB, key string, r Rate, now time.Time) (int, time.Duration) {
	t.Helper()
	for n := 0; n < 1000; n++ {
		if ok, retry := take(t, d, key, r, now); !ok {
			return n, retry
		}
	}
	t.Fatal("bucket never ran dry")
	return 0, 0
}

func readRate(t *testing.T, d *DB, key string) rateRecord {
	t.Helper()
	var rec rateRecord
	err := d.db.View(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucketRates).Get([]byte(key))
		if data == nil {
			return ErrNotFound
		}
		return json.Unmarshal(data, &rec)
	})
	if err != nil {
		t.Fatalf("readRate: %v", err)
	}
	return rec
}

func TestTakeRecord(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 10}
	now := time.Date(2026, 5, 6, 9, 8, 9, 123456789, time.FixedZone("x", 3600))
	takeN(t, d, rateKey, r, now, 3)
	rec := readRate(t, d, rateKey)
	if rec.Tokens != 7 || !rec.At.Equal(now) {
		t.Fatalf("record %+v, want 7 tokens at %v", rec, now)
	}
	var raw map[string]any
	err := d.db.View(func(tx *bolt.Tx) error {
		return json.Unmarshal(tx.Bucket(bucketRates).Get([]byte(rateKey)), &raw)
	})
	if err != nil {
		t.Fatal(err)
	}
	if raw["at"] != "2026-05-06T08:08:09.123456789Z" || raw["tokens"] != 7.0 || len(raw) != 2 {
		t.Fatalf("stored JSON %v", raw)
	}
}

func TestTakePersists(t *testing.T) {
	d, path := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 10}
	takeN(t, d, rateKey, r, rateT0, 10)
	d = reopen(t, d, path)
	if ok, retry := take(t, d, rateKey, r, rateT0); ok || retry != 6*time.Second {
		t.Fatalf("after reopen: ok=%v retry=%v, want refused with 6s", ok, retry)
	}
	// A partial refill survives too.
	now := rateT0.Add(9 * time.Second) // 1.5 tokens
	takeN(t, d, rateKey, r, now, 1)
	d = reopen(t, d, path)
	if ok, retry := take(t, d, rateKey, r, now); ok || retry != 3*time.Second {
		t.Fatalf("after second reopen: ok=%v retry=%v, want refused with 3s", ok, retry)
	}
}

// A stored value above the burst, written directly, grants the burst
// (a lowered burst through Take: the contract, internal/storetest).
func TestTakeStoredAboveBurst(t *testing.T) {
	d, _ := openTemp(t)
	low := Rate{PerMinute: 10, Burst: 3}
	putRaw(t, d, bucketRates, []byte("k"), []byte(`{"tokens":1e300,"at":"2026-05-06T07:08:09Z"}`))
	if n, _ := drain(t, d, "k", low, rateT0); n != 3 {
		t.Fatalf("huge stored tokens: %d granted, want 3", n)
	}
}

func TestTakeCorrupt(t *testing.T) {
	for _, tc := range []struct{ name, val string }{
		{"garbage", "\x00\xffnot json{"},
		{"empty", ""},
		{"truncated", `{"tokens":3,"at":"2026-05-06T07:08:09Z"`},
		{"trailing", `{"tokens":3,"at":"2026-05-06T07:08:09Z"}x`},
		{"null", "null"},
		{"array", "[]"},
		{"empty object", "{}"},
		{"missing at", `{"tokens":3}`},
		{"missing tokens", `{"at":"2026-05-06T07:08:09Z"}`},
		{"null tokens", `{"tokens":null,"at":"2026-05-06T07:08:09Z"}`},
		{"null at", `{"tokens":3,"at":null}`},
		{"tokens string", `{"tokens":"3","at":"2026-05-06T07:08:09Z"}`},
		{"tokens negative", `{"tokens":-1,"at":"2026-05-06T07:08:09Z"}`},
		{"tokens overflow", `{"tokens":1e999,"at":"2026-05-06T07:08:09Z"}`},
		{"at garbage", `{"tokens":3,"at":"yesterday"}`},
		{"at number", `{"tokens":3,"at":12345}`},
		{"at zero", `{"tokens":3,"at":"0001-01-01T00:00:00Z"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, path := openTemp(t)
			putRaw(t, d, bucketRates, []byte(rateKey), []byte(tc.val))
			d = reopen(t, d, path)
			ok, retry, err := d.Take(rateKey, Rate{PerMinute: 10, Burst: 10}, rateT0)
			if !errors.Is(err, ErrCorrupt) || ok || retry != 0 {
				t.Fatalf("Take = %v, %v, %v; want ErrCorrupt", ok, retry, err)
			}
			if strings.ContainsRune(err.Error(), 0) {
				t.Errorf("error contains a raw NUL: %q", err)
			}
			// Still corrupt: the failed Take did not overwrite the record.
			if _, _, err := d.Take(rateKey, Rate{PerMinute: 10, Burst: 10}, rateT0.Add(time.Hour)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("second Take err = %v; want ErrCorrupt", err)
			}
			// Other keys are unaffected.
			if ok, _ := take(t, d, "other", Rate{PerMinute: 10, Burst: 10}, rateT0); !ok {
				t.Fatal("other key refused")
			}
		})
	}
}

func TestTakeBucketInPlaceOfRecord(t *testing.T) {
	d, _ := openTemp(t)
	err := d.db.Update(func(tx *bolt.Tx) error {
		_, err := tx.Bucket(bucketRates).CreateBucket([]byte(rateKey))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Take(rateKey, Rate{PerMinute: 10, Burst: 10}, rateT0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Take err = %v, want ErrCorrupt", err)
	}
}

// A key bbolt cannot hold is an error, and records nothing (invalid
// rates and keys: the contract, internal/storetest).
func TestTakeKeyTooLong(t *testing.T) {
	d, _ := openTemp(t)
	ok, retry, err := d.Take(strings.Repeat("k", bolt.MaxKeySize+1), Rate{PerMinute: 10, Burst: 10}, rateT0)
	if err == nil || ok || retry != 0 || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Take = %v, %v, %v; want an error, not ErrCorrupt", ok, retry, err)
	}
	err = d.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketRates).Cursor().First(); k != nil {
			return fmt.Errorf("rates bucket has key %q", k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func BenchmarkTake(b *testing.B) {
	d, err := Open(b.TempDir() + "/state.db")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	// Refills faster than the benchmark can spend, so every Take is granted
	// and commits.
	r := Rate{PerMinute: 60, Burst: 1}
	now := rateT0
	for b.Loop() {
		now = now.Add(time.Second)
		ok, _, err := d.Take(rateKey, r, now)
		if err != nil || !ok {
			b.Fatalf("Take = %v, %v", ok, err)
		}
	}
}
