package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/store"
)

var rateT0 = time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)

const rateKey = "agent\x00ls"

func rates(t *testing.T, open func(t *testing.T) store.Shared) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, store.Shared)
	}{
		{"ten per minute", takeTenPerMinute},
		{"keys independent", takeKeysIndependent},
		{"one per second", takeOnePerSecond},
		{"retry rounding", takeRetryRounding},
		{"clock backwards mints nothing", takeClockBackwards},
		{"lowered burst", takeLoweredBurst},
		{"raised burst refills", takeRaisedBurstRefills},
		{"concurrent takes never over-spend", takeConcurrent},
		{"invalid", takeInvalid},
		{"a refused take writes nothing", takeRefusalDoesNotWrite},
		{"randomized", takeRandomized},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, open(t)) })
	}
}

// take calls Take and fails the test on error.
func take(t *testing.T, d store.Shared, key string, r store.Rate, now time.Time) (bool, time.Duration) {
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
func takeN(t *testing.T, d store.Shared, key string, r store.Rate, now time.Time, n int) {
	t.Helper()
	for i := range n {
		if ok, retry := take(t, d, key, r, now); !ok {
			t.Fatalf("take %d of %d refused (retry %v)", i+1, n, retry)
		}
	}
}

// drain takes until refused and returns how many were granted.
func drain(t *testing.T, d store.Shared, key string, r store.Rate, now time.Time) (int, time.Duration) {
	t.Helper()
	for n := 0; n < 1000; n++ {
		if ok, retry := take(t, d, key, r, now); !ok {
			return n, retry
		}
	}
	t.Fatal("bucket never ran dry")
	return 0, 0
}

func takeTenPerMinute(t *testing.T, d store.Shared) {
	r := store.Rate{PerMinute: 10, Burst: 10}
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

func takeKeysIndependent(t *testing.T, d store.Shared) {
	r := store.Rate{PerMinute: 10, Burst: 10}
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

func takeOnePerSecond(t *testing.T, d store.Shared) {
	r := store.Rate{PerMinute: 60, Burst: 1}
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

// A retryAfter is rounded up to whole milliseconds, and waiting exactly
// that long always yields a token.
func takeRetryRounding(t *testing.T, d store.Shared) {
	for _, pm := range []int{1, 3, 7, 9, 11, 13, 59, 61, 97, 1000, 7919, 100000} {
		r := store.Rate{PerMinute: pm, Burst: 1}
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

func takeClockBackwards(t *testing.T, d store.Shared) {
	r := store.Rate{PerMinute: 10, Burst: 10}
	takeN(t, d, rateKey, r, rateT0, 10)
	// Jumping back mints nothing, on either side of the stored time.
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
	// A grant while the clock is behind keeps the stored (later) time: no
	// token at t0, one a second after it.
	r2 := store.Rate{PerMinute: 60, Burst: 2}
	takeN(t, d, "k2", r2, rateT0, 1)
	takeN(t, d, "k2", r2, rateT0.Add(-time.Hour), 1)
	if ok, retry := take(t, d, "k2", r2, rateT0); ok || retry != time.Second {
		t.Fatalf("k2 at t0: ok=%v retry=%v, want refused with 1s", ok, retry)
	}
	if ok, _ := take(t, d, "k2", r2, rateT0.Add(time.Second)); !ok {
		t.Fatal("k2 at t0+1s: refused")
	}
}

func takeLoweredBurst(t *testing.T, d store.Shared) {
	takeN(t, d, rateKey, store.Rate{PerMinute: 100, Burst: 100}, rateT0, 1) // 99 stored
	low := store.Rate{PerMinute: 10, Burst: 3}
	if n, retry := drain(t, d, rateKey, low, rateT0); n != 3 || retry != 6*time.Second {
		t.Fatalf("lowered burst: %d granted then retry %v, want 3 then 6s", n, retry)
	}
}

func takeRaisedBurstRefills(t *testing.T, d store.Shared) {
	takeN(t, d, rateKey, store.Rate{PerMinute: 10, Burst: 2}, rateT0, 2)
	// A raised burst does not grant the difference at once; it refills.
	hi := store.Rate{PerMinute: 10, Burst: 20}
	if ok, _ := take(t, d, rateKey, hi, rateT0); ok {
		t.Fatal("raised burst granted at once")
	}
	if n, _ := drain(t, d, rateKey, hi, rateT0.Add(2*time.Minute)); n != 20 {
		t.Fatalf("raised burst after 2 min: %d granted, want 20", n)
	}
}

func takeConcurrent(t *testing.T, d store.Shared) {
	r := store.Rate{PerMinute: 10, Burst: 10}
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

// An invalid key or rate is an error (not ErrCorrupt) and records
// nothing.
func takeInvalid(t *testing.T, d store.Shared) {
	good := store.Rate{PerMinute: 10, Burst: 10}
	w0 := writes(t, d)
	for _, tc := range []struct {
		name string
		key  string
		r    store.Rate
	}{
		{"empty key", "", good},
		{"zero rate", rateKey, store.Rate{}},
		{"zero per minute", rateKey, store.Rate{Burst: 10}},
		{"zero burst", rateKey, store.Rate{PerMinute: 10}},
		{"negative per minute", rateKey, store.Rate{PerMinute: -1, Burst: 10}},
		{"negative burst", rateKey, store.Rate{PerMinute: 10, Burst: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, retry, err := d.Take(tc.key, tc.r, rateT0)
			if err == nil || ok || retry != 0 {
				t.Fatalf("Take = %v, %v, %v; want an error", ok, retry, err)
			}
			if errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("invalid input reported as corrupt: %v", err)
			}
		})
	}
	if w := writes(t, d); w != w0 {
		t.Fatalf("invalid takes wrote (%d writes)", w-w0)
	}
	// Nothing was recorded under the key: a full burst is there.
	if n, _ := drain(t, d, rateKey, good, rateT0); n != 10 {
		t.Fatalf("after invalid takes: %d granted, want 10", n)
	}
}

func takeRefusalDoesNotWrite(t *testing.T, d store.Shared) {
	r := store.Rate{PerMinute: 10, Burst: 1}
	w0 := writes(t, d)
	takeN(t, d, rateKey, r, rateT0, 1)
	w1 := writes(t, d)
	if w1 == w0 {
		t.Fatal("a granted Take wrote nothing")
	}
	for i := range 5 {
		if ok, _ := take(t, d, rateKey, r, rateT0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatal("granted")
		}
	}
	if w2 := writes(t, d); w2 != w1 {
		t.Fatalf("refused Takes wrote (%d writes)", w2-w1)
	}
}

// Random rates and steps: never more grants than the burst plus the refill
// since the first Take, and waiting the returned retryAfter always yields a
// token.
func takeRandomized(t *testing.T, d store.Shared) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		r := store.Rate{PerMinute: 1 + rng.IntN(120000), Burst: 1 + rng.IntN(20)}
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
