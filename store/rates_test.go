package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
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

func TestTakeTenPerMinute(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 10}
	takeN(t, d, rateKey, r, rateT0, 10)
	ok, retry := take(t, d, rateKey, r, rateT0)
	if ok || retry != 6*time.Second {
		t.Fatalf("11th take: ok=%v retry=%v, want refused with 6s", ok, retry)
	}
	// Part of the wait elapsed: the remainder, rounded up to whole ms.
	if ok, retry := take(t, d, rateKey, r, rateT0.Add(2*time.Second+300*time.Microsecond)); ok || retry != 4*time.Second {
		t.Fatalf("after 2.0003s: ok=%v retry=%v, want refused with 4s (3.9997s rounded up)", ok, retry)
	}
	if ok, retry := take(t, d, rateKey, r, rateT0.Add(2*time.Second+time.Millisecond)); ok || retry != 3999*time.Millisecond {
		t.Fatalf("after 2.001s: ok=%v retry=%v, want refused with 3.999s", ok, retry)
	}
	if ok, _ := take(t, d, rateKey, r, rateT0.Add(6*time.Second-time.Millisecond)); ok {
		t.Fatal("take 1ms before the retry time succeeded")
	}
	t1 := rateT0.Add(6 * time.Second)
	if ok, retry := take(t, d, rateKey, r, t1); !ok {
		t.Fatalf("after +6s: refused (retry %v)", retry)
	}
	if ok, retry := take(t, d, rateKey, r, t1); ok || retry != 6*time.Second {
		t.Fatalf("second take after +6s: ok=%v retry=%v, want refused with 6s", ok, retry)
	}
	// A minute (or an hour) later: a full burst, but no more.
	for _, later := range []time.Duration{time.Minute, time.Hour} {
		now := t1.Add(later)
		if n, retry := drain(t, d, rateKey, r, now); n != 10 || retry != 6*time.Second {
			t.Fatalf("+%v: %d granted then retry %v, want 10 then 6s", later, n, retry)
		}
		t1 = now
	}
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

func TestTakeKeysIndependent(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 10}
	takeN(t, d, "alice\x00ls", r, rateT0, 10)
	if ok, _ := take(t, d, "alice\x00ls", r, rateT0); ok {
		t.Fatal("alice/ls not exhausted")
	}
	for _, k := range []string{"bob\x00ls", "alice\x00cat", "alice", "alice\x00ls\x00"} {
		if n, _ := drain(t, d, k, r, rateT0); n != 10 {
			t.Errorf("key %q: %d granted, want 10", k, n)
		}
	}
}

func TestTakeOnePerSecond(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 60, Burst: 1}
	for i := range 5 {
		now := rateT0.Add(time.Duration(i) * time.Second)
		if ok, retry := take(t, d, rateKey, r, now); !ok {
			t.Fatalf("second %d: refused (retry %v)", i, retry)
		}
		if ok, retry := take(t, d, rateKey, r, now); ok || retry != time.Second {
			t.Fatalf("second %d, again: ok=%v retry=%v, want refused with 1s", i, ok, retry)
		}
		if ok, retry := take(t, d, rateKey, r, now.Add(999*time.Millisecond)); ok || retry != time.Millisecond {
			t.Fatalf("second %d + 999ms: ok=%v retry=%v, want refused with 1ms", i, ok, retry)
		}
	}
	// Idle for a long time: still only one.
	if n, _ := drain(t, d, rateKey, r, rateT0.Add(24*time.Hour)); n != 1 {
		t.Fatalf("after a day: %d granted, want 1", n)
	}
}

// Rounding: a retryAfter is rounded up to whole milliseconds, and waiting
// exactly that long always yields a token.
func TestTakeRetryRounding(t *testing.T) {
	d, _ := openTemp(t)
	for _, pm := range []int{1, 3, 7, 9, 11, 13, 59, 61, 97, 1000, 7919, 100000} {
		r := Rate{PerMinute: pm, Burst: 1}
		key := fmt.Sprint("k", pm)
		now := rateT0
		takeN(t, d, key, r, now, 1)
		for i := range 20 {
			ok, retry := take(t, d, key, r, now)
			if ok {
				t.Fatalf("%d/min step %d: granted without waiting", pm, i)
			}
			if retry%time.Millisecond != 0 {
				t.Fatalf("%d/min: retry %v not whole ms", pm, retry)
			}
			if want := (time.Minute/time.Duration(pm) + time.Millisecond - 1).Truncate(time.Millisecond); i == 0 && retry != want {
				t.Fatalf("%d/min: retry %v, want %v", pm, retry, want)
			}
			now = now.Add(retry)
			if ok, retry := take(t, d, key, r, now); !ok {
				t.Fatalf("%d/min step %d: refused after waiting (retry %v)", pm, i, retry)
			}
		}
	}
}

func TestTakeClockBackwards(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 10}
	takeN(t, d, rateKey, r, rateT0, 10)
	// Jumping back an hour mints nothing, on either side of the stored time.
	for _, back := range []time.Duration{time.Nanosecond, time.Second, time.Hour, 100 * 365 * 24 * time.Hour} {
		if ok, retry := take(t, d, rateKey, r, rateT0.Add(-back)); ok || retry != 6*time.Second {
			t.Fatalf("-%v: ok=%v retry=%v, want refused with 6s", back, ok, retry)
		}
	}
	// Back, then forward again to the stored time: still nothing (the stored
	// time was kept, not replaced by the earlier one).
	if ok, _ := take(t, d, rateKey, r, rateT0); ok {
		t.Fatal("back to the stored time: granted")
	}
	// A grant while the clock is behind keeps the stored (later) time.
	r2 := Rate{PerMinute: 60, Burst: 2}
	takeN(t, d, "k2", r2, rateT0, 1)
	takeN(t, d, "k2", r2, rateT0.Add(-time.Hour), 1)
	if rec := readRate(t, d, "k2"); !rec.At.Equal(rateT0) || rec.Tokens != 0 {
		t.Fatalf("record after grant with clock behind: %+v, want 0 tokens at %v", rec, rateT0)
	}
	if ok, retry := take(t, d, "k2", r2, rateT0); ok || retry != time.Second {
		t.Fatalf("k2 at t0: ok=%v retry=%v, want refused with 1s", ok, retry)
	}
	if ok, _ := take(t, d, "k2", r2, rateT0.Add(time.Second)); !ok {
		t.Fatal("k2 at t0+1s: refused")
	}
}

func TestTakeLoweredBurst(t *testing.T) {
	d, _ := openTemp(t)
	takeN(t, d, rateKey, Rate{PerMinute: 100, Burst: 100}, rateT0, 1) // 99 stored
	low := Rate{PerMinute: 10, Burst: 3}
	if n, retry := drain(t, d, rateKey, low, rateT0); n != 3 || retry != 6*time.Second {
		t.Fatalf("lowered burst: %d granted then retry %v, want 3 then 6s", n, retry)
	}
	// Also with a stored value above the burst written directly.
	putRaw(t, d, bucketRates, []byte("k"), []byte(`{"tokens":1e300,"at":"2026-05-06T07:08:09Z"}`))
	if n, _ := drain(t, d, "k", low, rateT0); n != 3 {
		t.Fatalf("huge stored tokens: %d granted, want 3", n)
	}
}

func TestTakeRaisedBurstRefills(t *testing.T) {
	d, _ := openTemp(t)
	takeN(t, d, rateKey, Rate{PerMinute: 10, Burst: 2}, rateT0, 2)
	// A raised burst does not grant the difference at once; it refills.
	hi := Rate{PerMinute: 10, Burst: 20}
	if ok, _ := take(t, d, rateKey, hi, rateT0); ok {
		t.Fatal("raised burst granted at once")
	}
	if n, _ := drain(t, d, rateKey, hi, rateT0.Add(2*time.Minute)); n != 20 {
		t.Fatalf("raised burst after 2 min: %d granted, want 20", n)
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

func TestTakeConcurrent(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 10}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted int
		errs    []error
	)
	start := make(chan struct{})
	for range 20 {
		wg.Go(func() {
			<-start
			ok, _, err := d.Take(rateKey, r, rateT0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				granted++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	if granted != 10 {
		t.Fatalf("%d of 20 concurrent takes granted, want 10", granted)
	}
}

func TestTakeInvalid(t *testing.T) {
	d, _ := openTemp(t)
	good := Rate{PerMinute: 10, Burst: 10}
	for _, tc := range []struct {
		name string
		key  string
		r    Rate
	}{
		{"empty key", "", good},
		{"key too long", strings.Repeat("k", bolt.MaxKeySize+1), good},
		{"zero rate", rateKey, Rate{}},
		{"zero per minute", rateKey, Rate{Burst: 10}},
		{"zero burst", rateKey, Rate{PerMinute: 10}},
		{"negative per minute", rateKey, Rate{PerMinute: -1, Burst: 10}},
		{"negative burst", rateKey, Rate{PerMinute: 10, Burst: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, retry, err := d.Take(tc.key, tc.r, rateT0)
			if err == nil || ok || retry != 0 {
				t.Fatalf("Take = %v, %v, %v; want an error", ok, retry, err)
			}
			if errors.Is(err, ErrCorrupt) {
				t.Fatalf("invalid input reported as corrupt: %v", err)
			}
		})
	}
	// Nothing was recorded.
	err := d.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketRates).Cursor().First(); k != nil {
			return fmt.Errorf("rates bucket has key %q", k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A refusal writes nothing: bbolt counts page writes (including the meta
// page, which even an unmodified commit writes and fsyncs).
func TestTakeRefusalDoesNotWrite(t *testing.T) {
	d, _ := openTemp(t)
	r := Rate{PerMinute: 10, Burst: 1}
	writes := func() int64 { s := d.db.Stats(); return s.TxStats.GetWrite() }

	w0 := writes()
	takeN(t, d, rateKey, r, rateT0, 1)
	w1 := writes()
	if w1 == w0 {
		t.Fatal("a granted Take wrote nothing")
	}
	for i := range 5 {
		if ok, _ := take(t, d, rateKey, r, rateT0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatal("granted")
		}
	}
	if w2 := writes(); w2 != w1 {
		t.Fatalf("refused Takes wrote %d pages", w2-w1)
	}
	// For contrast: committing an unmodified transaction does write.
	if err := d.db.Update(func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if w3 := writes(); w3 == w1 {
		t.Log("note: an empty bbolt commit wrote nothing with this bbolt version")
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

// Random rates and steps: never more grants than the burst plus the refill
// since the first Take, and waiting the returned retryAfter always yields a
// token.
func TestTakeRandomized(t *testing.T) {
	d, _ := openTemp(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		r := Rate{PerMinute: 1 + rng.IntN(120000), Burst: 1 + rng.IntN(20)}
		if trial%2 == 0 {
			r.PerMinute = 1 + rng.IntN(100)
		}
		key := fmt.Sprint("trial", trial)
		now := rateT0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		start, granted := now, 0
		for range 60 {
			ok, retry := take(t, d, key, r, now)
			if ok {
				granted++
			} else {
				now = now.Add(retry)
				if ok, retry2 := take(t, d, key, r, now); !ok {
					t.Fatalf("%+v: refused after waiting %v (retry %v)", r, retry, retry2)
				}
				granted++
			}
			limit := float64(r.Burst) + now.Sub(start).Seconds()*float64(r.PerMinute)/60
			if float64(granted) > limit+1e-6 {
				t.Fatalf("%+v: %d granted in %v, limit %.3f", r, granted, now.Sub(start), limit)
			}
			now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
	}
}
