package etcdstore_test

import (
	"encoding/hex"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/store"
)

// TestTakeAsBbolt: the same Takes give the same answers as the one-host
// store's, refill, clock going backwards and a lowered burst included.
func TestTakeAsBbolt(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := open(t)
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	steps := []struct {
		key string
		r   store.Rate
		at  time.Duration
	}{
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 2}, 0},
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 2}, 0},
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 2}, time.Second},
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 2}, 31 * time.Second},
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 2}, 29 * time.Second}, // clock backwards
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 2}, 61 * time.Second},
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 1}, 10 * time.Minute}, // burst lowered
		{"alice\x00gh", store.Rate{PerMinute: 2, Burst: 1}, 10 * time.Minute},
		{"bob/x", store.Rate{PerMinute: 60000, Burst: 1}, 0},
		{"bob/x", store.Rate{PerMinute: 60000, Burst: 1}, 0},
		{"bob/x", store.Rate{PerMinute: 60000, Burst: 1}, time.Millisecond},
	}
	for i, st := range steps {
		wantOK, wantWait, wantErr := db.Take(st.key, st.r, t0.Add(st.at))
		ok, wait, err := s.Take(st.key, st.r, t0.Add(st.at))
		if ok != wantOK || wait != wantWait || (err == nil) != (wantErr == nil) {
			t.Fatalf("step %d: etcd %v %v %v, bbolt %v %v %v", i, ok, wait, err, wantOK, wantWait, wantErr)
		}
	}
	for _, bad := range []struct {
		key string
		r   store.Rate
	}{{"", store.Rate{PerMinute: 1, Burst: 1}}, {"k", store.Rate{PerMinute: 0, Burst: 1}}, {"k", store.Rate{PerMinute: 1, Burst: -1}}} {
		if _, _, err := s.Take(bad.key, bad.r, t0); err == nil {
			t.Errorf("Take(%q, %+v) took", bad.key, bad.r)
		}
	}
}

// TestTakeCorrupt: an unreadable bucket refuses (ErrCorrupt), never
// reads as a full one.
func TestTakeCorrupt(t *testing.T) {
	for name, v := range map[string]string{
		"null":      "null",
		"empty":     "",
		"garbage":   "{",
		"no tokens": `{"at":"2026-11-29T09:00:00Z"}`,
		"no time":   `{"tokens":3}`,
		"negative":  `{"tokens":-1,"at":"2026-11-29T09:00:00Z"}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			put(t, prefix(t)+"rates/"+hex.EncodeToString([]byte("k")), v)
			_, _, err := s.Take("k", store.Rate{PerMinute: 1, Burst: 1}, time.Now())
			wantErr(t, err, store.ErrCorrupt)
		})
	}
}

// TestRateHoldsAcrossHosts: a rate of 10 with 20 concurrent Takes from
// each of 3 hosts, each on a different member, admits exactly 10.
func TestRateHoldsAcrossHosts(t *testing.T) {
	h := threeHosts(t)
	now := time.Now()
	r := store.Rate{PerMinute: 10, Burst: 10}
	var took, refused atomic.Int32
	var wg sync.WaitGroup
	for _, s := range h {
		for range 20 {
			wg.Go(func() {
				ok, wait, err := s.Take("alice\x00gh", r, now)
				switch {
				case err != nil:
					t.Error(err)
				case ok:
					took.Add(1)
				case wait > 0:
					refused.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if took.Load() != 10 || refused.Load() != 50 {
		t.Fatalf("%d took, %d refused of 60: want exactly 10 and 50", took.Load(), refused.Load())
	}
	// Ten writes, none for the refusals.
	kv := get(t, prefix(t)+"rates/"+hex.EncodeToString([]byte("alice\x00gh"))).Kvs
	if len(kv) != 1 || kv[0].Version != 10 {
		t.Fatalf("the bucket was written %d times, want 10", kv[0].Version)
	}
}
