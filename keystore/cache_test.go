package keystore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// cacheBackend is a fake backend: values by reference, counting calls;
// with hook set, Fetch calls it first (to block, or to fail).
type cacheBackend struct {
	mu     sync.Mutex
	values map[Ref]string
	calls  map[Ref]int
	hook   func(ctx context.Context, ref Ref) error

	lockouts   int
	lockoutErr error
	closed     int
}

func newCacheBackend(values map[Ref]string) *cacheBackend {
	return &cacheBackend{values: values, calls: map[Ref]int{}}
}

func (b *cacheBackend) Fetch(ctx context.Context, ref Ref) (string, error) {
	b.mu.Lock()
	b.calls[ref]++
	hook := b.hook
	b.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, ref); err != nil {
			return "", err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.values[ref]
	if !ok {
		return "", &Error{Ref: ref, Err: ErrNotFound}
	}
	return v, nil
}

func (b *cacheBackend) set(ref Ref, v string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.values[ref] = v
}

func (b *cacheBackend) count(ref Ref) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[ref]
}

// hookedBackend adds LockoutHook and io.Closer.
type hookedBackend struct{ *cacheBackend }

func (b hookedBackend) Lockout(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lockouts++
	return b.lockoutErr
}

func (b hookedBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}

// fakeClock is an injected Config.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var (
	cacheRefA = Ref{Backend: BackendFile, Path: "a"}
	cacheRefB = Ref{Backend: BackendVault, Path: "secret/b", Field: "token"}
)

// fetchOne fetches ref through ks.
func fetchOne(t *testing.T, ks *Keystore, ref Ref) (string, error) {
	t.Helper()
	got, err := ks.Fetch(context.Background(), map[string]Ref{"X": ref})
	if err != nil {
		if got != nil {
			t.Errorf("values returned with an error")
		}
		return "", err
	}
	return got.Values["X"], nil
}

func wantFetch(t *testing.T, ks *Keystore, ref Ref, want string) {
	t.Helper()
	v, err := fetchOne(t, ks, ref)
	if err != nil || v != want {
		t.Fatalf("Fetch %s = %q, %v; want %q", ref, v, err, want)
	}
}

func TestCacheTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl, hit, miss time.Duration
	}{
		{ttl: 10 * time.Second, hit: 9*time.Second + 999*time.Millisecond, miss: 10 * time.Second},
		{ttl: 0, hit: DefaultCacheTTL - time.Nanosecond, miss: DefaultCacheTTL}, // 0: the default
	} {
		b := newCacheBackend(map[Ref]string{cacheRefA: "v1"})
		clock := &fakeClock{now: time.Unix(1e9, 0)}
		ks := New(Config{Backends: map[string]Backend{BackendFile: b}, CacheTTL: tc.ttl, Now: clock.Now})
		wantFetch(t, ks, cacheRefA, "v1")
		b.set(cacheRefA, "v2")
		clock.advance(tc.hit)
		wantFetch(t, ks, cacheRefA, "v1")
		if n := b.count(cacheRefA); n != 1 {
			t.Fatalf("ttl %v: %d fetches within the TTL, want 1", tc.ttl, n)
		}
		clock.advance(tc.miss - tc.hit)
		wantFetch(t, ks, cacheRefA, "v2")
		if n := b.count(cacheRefA); n != 2 {
			t.Fatalf("ttl %v: %d fetches after the TTL, want 2", tc.ttl, n)
		}
	}
}

func TestCacheDisabled(t *testing.T) {
	b := newCacheBackend(map[Ref]string{cacheRefA: "v1"})
	ks := New(Config{Backends: map[string]Backend{BackendFile: b}, CacheTTL: -1})
	for i := 1; i <= 3; i++ {
		wantFetch(t, ks, cacheRefA, "v1")
		if n := b.count(cacheRefA); n != i {
			t.Fatalf("%d fetches after %d, want as many", n, i)
		}
	}
}

func TestCacheFailureNotCached(t *testing.T) {
	b := newCacheBackend(map[Ref]string{})
	ks := New(Config{Backends: map[string]Backend{BackendFile: b}})
	if _, err := fetchOne(t, ks, cacheRefA); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Fetch: %v, want ErrNotFound", err)
	}
	b.set(cacheRefA, "v1")
	wantFetch(t, ks, cacheRefA, "v1")
	wantFetch(t, ks, cacheRefA, "v1")
	if n := b.count(cacheRefA); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

// TestCacheDropInFlight: a fetch that began before a Drop returns its
// value but does not cache it.
func TestCacheDropInFlight(t *testing.T) {
	for _, drop := range []bool{false, true} {
		b := newCacheBackend(map[Ref]string{cacheRefA: "old"})
		entered := make(chan struct{})
		release := make(chan struct{})
		b.hook = func(context.Context, Ref) error {
			entered <- struct{}{}
			<-release
			return nil
		}
		ks := New(Config{Backends: map[string]Backend{BackendFile: b}, CacheTTL: time.Hour})
		done := make(chan string)
		go func() {
			v, err := fetchOne(t, ks, cacheRefA)
			if err != nil {
				t.Error(err)
			}
			done <- v
		}()
		<-entered
		if drop {
			ks.Drop()
		}
		close(release)
		if v := <-done; v != "old" {
			t.Fatalf("in-flight fetch = %q, want old", v)
		}

		b.mu.Lock()
		b.hook = nil
		b.values[cacheRefA] = "new"
		b.mu.Unlock()
		want := map[bool]string{false: "old", true: "new"}[drop] // cached unless dropped
		wantFetch(t, ks, cacheRefA, want)
	}
}

func TestCacheFetchAll(t *testing.T) {
	const secretA = "CANARY-cache-a-1234"
	b := newCacheBackend(map[Ref]string{cacheRefA: secretA, cacheRefB: "vb"})
	ks := New(Config{Backends: map[string]Backend{BackendFile: b, BackendVault: b}})
	set, err := ks.Fetch(context.Background(), map[string]Ref{"A": cacheRefA, "B": cacheRefB, "A2": cacheRefA})
	if err != nil || len(set.Values) != 3 || set.Values["A"] != secretA || set.Values["A2"] != secretA || set.Values["B"] != "vb" || set.Leases != nil {
		t.Fatalf("Fetch = %d values, %v", len(set.Values), err)
	}

	// One reference failing fails them all, naming it.
	missing := Ref{Backend: BackendVault, Path: "secret/c", Field: "token"}
	for range 10 { // map order varies: the failure comes first or last
		got, err := ks.Fetch(context.Background(), map[string]Ref{"A": cacheRefA, "C": missing, "B": cacheRefB})
		var ke *Error
		if got != nil || !errors.As(err, &ke) || ke.Ref != missing || !errors.Is(err, ErrNotFound) {
			t.Fatalf("Fetch returned values: %v, %v; want an *Error naming %s", got != nil, err, missing)
		}
		kcNoLeak(t, err, secretA)
	}
	if got, err := ks.Fetch(context.Background(), nil); err != nil || len(got.Values) != 0 {
		t.Fatalf("Fetch(nil): %v", err)
	}
}

func TestCacheTimeout(t *testing.T) {
	b := newCacheBackend(map[Ref]string{cacheRefA: "v"})
	b.hook = func(ctx context.Context, _ Ref) error {
		<-ctx.Done()
		return ctx.Err() // a plain error, as from a library
	}
	ks := New(Config{Backends: map[string]Backend{BackendFile: b}, Timeout: 20 * time.Millisecond})
	_, err := fetchOne(t, ks, cacheRefA)
	var ke *Error
	if !errors.As(err, &ke) || ke.Ref != cacheRefA || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Fetch: %v, want ErrUnreachable naming %s", err, cacheRefA)
	}
	if !strings.Contains(err.Error(), "within 20ms") {
		t.Errorf("error %q does not say how long it waited", err)
	}

	// The caller's own cancellation is not the backend's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = ks.Fetch(ctx, map[string]Ref{"X": cacheRefA})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Errorf("Fetch with a canceled context: %v", err)
	}

	// A backend's own *Error passes unchanged.
	own := &Error{Ref: cacheRefA, Err: fmt.Errorf("%w: own words", ErrDenied)}
	b.hook = func(context.Context, Ref) error { return own }
	if _, err := fetchOne(t, ks, cacheRefA); err != own {
		t.Errorf("Fetch: %v, want the backend's error", err)
	}
}

func TestCacheLockout(t *testing.T) {
	b := hookedBackend{newCacheBackend(map[Ref]string{cacheRefA: "v1"})}
	plain := newCacheBackend(map[Ref]string{cacheRefB: "vb"})
	ks := New(Config{Backends: map[string]Backend{BackendFile: b, BackendVault: plain}})
	wantFetch(t, ks, cacheRefA, "v1")
	wantFetch(t, ks, cacheRefB, "vb")

	b.lockoutErr = errors.New("revoke failed")
	if err := ks.Lockout(context.Background()); !errors.Is(err, b.lockoutErr) {
		t.Fatalf("Lockout: %v, want the hook's error", err)
	}
	if b.lockouts != 1 {
		t.Fatalf("%d lockout hook calls, want 1", b.lockouts)
	}
	// The cache is gone.
	wantFetch(t, ks, cacheRefA, "v1")
	wantFetch(t, ks, cacheRefB, "vb")
	if b.count(cacheRefA) != 2 || plain.count(cacheRefB) != 2 {
		t.Fatalf("fetches after Lockout: %d, %d; want 2, 2", b.count(cacheRefA), plain.count(cacheRefB))
	}
	b.lockoutErr = nil
	if err := ks.Lockout(context.Background()); err != nil || b.lockouts != 2 {
		t.Fatalf("Lockout: %v, %d hook calls", err, b.lockouts)
	}

	if err := ks.Close(); err != nil || b.closed != 1 {
		t.Fatalf("Close: %v, %d closes", err, b.closed)
	}
}

func TestCacheNoBackend(t *testing.T) {
	ks := New(Config{Backends: map[string]Backend{BackendFile: newCacheBackend(nil)}})
	if !ks.Has(BackendFile) || ks.Has(BackendVault) || ks.Has(BackendKeychain) {
		t.Error("Has")
	}
	_, err := fetchOne(t, ks, cacheRefB)
	var ke *Error
	if !errors.As(err, &ke) || ke.Ref != cacheRefB || !errors.Is(err, ErrNoBackend) {
		t.Fatalf("Fetch: %v, want ErrNoBackend naming %s", err, cacheRefB)
	}

	var nilKS *Keystore
	if nilKS.Has(BackendFile) {
		t.Error("nil Keystore has a backend")
	}
	if _, err := nilKS.Fetch(context.Background(), map[string]Ref{"X": cacheRefA}); !errors.Is(err, ErrNoBackend) {
		t.Errorf("nil Keystore Fetch: %v", err)
	}
	nilKS.Drop()
	if nilKS.Lockout(context.Background()) != nil || nilKS.Close() != nil {
		t.Error("nil Keystore Lockout/Close failed")
	}
}
