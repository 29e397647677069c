package keystore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zalando/go-keyring"

	"coily.dev/coily/internal/keyringtest"
)

// The keychain tests run against a real Secret Service (gnome-keyring on
// a private bus, see keyringtest); they cannot be parallel.

var (
	_ Backend = (*Keychain)(nil)
	_ Backend = (*File)(nil)
)

const (
	kcCanary  = "CANARY-keychain-value-4711"
	kcCanary2 = "CANARY-keychain-changed-0815"
)

func kcRef(service, account string) Ref {
	return Ref{Backend: BackendKeychain, Path: service, Field: account}
}

// kcNoLeak fails when err's message holds a secret value.
func kcNoLeak(t *testing.T, err error, values ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, v := range values {
		if strings.Contains(err.Error(), v) {
			t.Errorf("error %q contains a secret value", err)
		}
	}
}

// kcExpect checks that err is an *Error for ref wrapping want.
func kcExpect(t *testing.T, err error, ref Ref, want error) {
	t.Helper()
	var ke *Error
	switch {
	case err == nil:
		t.Fatalf("fetch %s succeeded, want %v", ref, want)
	case !errors.As(err, &ke) || ke.Ref != ref:
		t.Fatalf("fetch %s: %v (%T), want an *Error naming the reference", ref, err, err)
	case !errors.Is(err, want):
		t.Fatalf("fetch %s: %v, want %v", ref, err, want)
	}
}

func kcSet(t *testing.T, service, account, value string) {
	t.Helper()
	if err := keyring.Set(service, account, value); err != nil {
		t.Fatalf("keyring.Set: %v", err)
	}
}

func TestKeychainFetch(t *testing.T) {
	keyringtest.Start(t)
	kcSet(t, "coily-test", "github", kcCanary)
	kcSet(t, "coily-test", "npm", kcCanary2)
	k := NewKeychain()
	ctx := context.Background()

	for ref, want := range map[Ref]string{kcRef("coily-test", "github"): kcCanary, kcRef("coily-test", "npm"): kcCanary2} {
		if v, err := k.Fetch(ctx, ref); err != nil || v != want {
			t.Fatalf("Fetch %s = %q, %v", ref, v, err)
		}
	}
	for _, ref := range []Ref{kcRef("coily-test", "nobody"), kcRef("no-such-service", "github"), kcRef("coily-test", "git")} {
		_, err := k.Fetch(ctx, ref)
		kcExpect(t, err, ref, ErrNotFound)
		kcNoLeak(t, err, kcCanary, kcCanary2)
	}
	_, err := k.Fetch(ctx, kcRef("", "github"))
	kcExpect(t, err, kcRef("", "github"), ErrNotFound)
	if len(k.inflight) != 0 {
		t.Errorf("%d calls left in flight", len(k.inflight))
	}
}

func TestKeychainLocked(t *testing.T) {
	keyringtest.Start(t)
	kcSet(t, "coily-test", "github", kcCanary)
	k := NewKeychain()
	ref := kcRef("coily-test", "github")
	if v, err := k.Fetch(context.Background(), ref); err != nil || v != kcCanary {
		t.Fatalf("Fetch = %q, %v", v, err)
	}

	keyringtest.Lock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := k.Fetch(ctx, ref)
	took := time.Since(begin)
	t.Logf("locked: %v after %v", err, took)
	kcExpect(t, err, ref, ErrLocked)
	kcNoLeak(t, err, kcCanary)
	if !strings.Contains(err.Error(), "unlock") {
		t.Errorf("error %q does not say to unlock the keyring", err)
	}
	if took > 3*time.Second {
		t.Errorf("locked fetch took %v", took)
	}
	// Checked before asking go-keyring: nothing prompted, nothing left.
	if len(k.inflight) != 0 {
		t.Errorf("%d calls left in flight", len(k.inflight))
	}

	keyringtest.Unlock(t)
	if v, err := k.Fetch(context.Background(), ref); err != nil || v != kcCanary {
		t.Fatalf("Fetch after Unlock = %q, %v", v, err)
	}
}

// TestKeychainStalledPrompt is the case the pre-check cannot catch (the
// keyring locked between the check and go-keyring's call, or a keyring
// whose items lock on their own): go-keyring's unlock waits on a prompt
// that no one answers. Fetch returns when its context ends, the call is
// abandoned, and no second call for the same reference is started while
// it hangs.
func TestKeychainStalledPrompt(t *testing.T) {
	ref := kcRef("coily-test", "github")
	k := NewKeychain()
	var calls atomic.Int32
	k.get = func(service, account string) (string, error) {
		calls.Add(1)
		return keyring.Get(service, account) // without the locked check
	}
	var abandoned *keychainCall
	t.Run("stalled", func(t *testing.T) {
		keyringtest.Start(t)
		kcSet(t, ref.Path, ref.Field, kcCanary)
		keyringtest.StallPrompter(t)
		keyringtest.Lock(t)

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		begin := time.Now()
		_, err := k.Fetch(ctx, ref)
		took := time.Since(begin)
		t.Logf("stalled: %v after %v", err, took)
		kcExpect(t, err, ref, errKeychainTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v does not wrap the context's", err)
		}
		kcNoLeak(t, err, kcCanary)
		if took > 3*time.Second {
			t.Errorf("fetch took %v, want about 2s", took)
		}

		// Every fetch meanwhile waits for the abandoned call.
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_, errs[i] = k.Fetch(ctx, ref)
			})
		}
		wg.Wait()
		for _, err := range errs {
			kcExpect(t, err, ref, errKeychainTimeout)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%d keyring calls, want 1 (the abandoned one)", n)
		}
		k.mu.Lock()
		abandoned = k.inflight[ref]
		k.mu.Unlock()
		if abandoned == nil {
			t.Fatal("no call in flight")
		}
		// The cleanups release the prompter, then close the bus: the
		// abandoned call ends either way.
	})
	if abandoned == nil {
		return
	}
	select {
	case <-abandoned.done:
		t.Logf("abandoned call ended: %v", abandoned.err)
		kcNoLeak(t, abandoned.err, kcCanary)
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned call did not end when the Secret Service went away")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.inflight) != 0 {
		t.Errorf("%d calls left in flight", len(k.inflight))
	}
}

// TestKeychainInFlight checks the in-flight guard without D-Bus.
func TestKeychainInFlight(t *testing.T) {
	ref := kcRef("svc", "acct")
	k := NewKeychain()
	var calls atomic.Int32
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	k.get = func(service, account string) (string, error) {
		if service != ref.Path || account != ref.Field {
			return "", fmt.Errorf("get(%q, %q)", service, account)
		}
		calls.Add(1)
		entered <- struct{}{}
		<-release
		return kcCanary, nil
	}

	// Fetches that give up leave one call behind, not one each.
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := k.Fetch(ctx, ref)
			done <- err
		}()
		if calls.Load() == 0 {
			<-entered
		}
		cancel()
		kcExpect(t, <-done, ref, context.Canceled)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}

	// Waiters share the call's answer.
	joined := func() int {
		k.mu.Lock()
		defer k.mu.Unlock()
		if c := k.inflight[ref]; c != nil {
			return c.fetches
		}
		return -1
	}
	before := joined()
	results := make(chan string, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			v, err := k.Fetch(context.Background(), ref)
			if err != nil {
				t.Error(err)
			}
			results <- v
		})
	}
	// Release the call only once all three have joined it.
	deadline := time.Now().Add(5 * time.Second)
	for joined() != before+3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches joined the call, want %d", joined(), before+3)
		}
		time.Sleep(time.Millisecond)
	}
	// A second independent reference gets its own call.
	other := kcRef("svc2", "acct")
	if _, err := k.Fetch(context.Background(), other); err == nil || !errors.Is(err, ErrUnreachable) {
		t.Errorf("Fetch %s: %v", other, err)
	}
	close(release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != kcCanary {
			t.Errorf("waiter got %q", v)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
	// Once it has ended, the next fetch asks again.
	if v, err := k.Fetch(context.Background(), ref); err != nil || v != kcCanary {
		t.Fatalf("Fetch = %q, %v", v, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2", n)
	}
}

func TestKeychainPanic(t *testing.T) {
	k := NewKeychain()
	k.get = func(string, string) (string, error) {
		var signal *struct{ Name string }
		return signal.Name, nil // what go-keyring does when the bus goes away
	}
	ref := kcRef("svc", "acct")
	_, err := k.Fetch(context.Background(), ref)
	kcExpect(t, err, ref, ErrUnreachable)
	if len(k.inflight) != 0 {
		t.Errorf("%d calls left in flight", len(k.inflight))
	}
}

func TestKeychainErrorMapping(t *testing.T) {
	k := NewKeychain()
	ref := kcRef("svc", "acct")
	for _, tc := range []struct {
		err  error
		want error
	}{
		{keyring.ErrNotFound, ErrNotFound},
		{keyring.ErrUnsupportedPlatform, ErrUnreachable},
		{fmt.Errorf("something odd"), ErrUnreachable},
	} {
		k.get = func(string, string) (string, error) { return "", tc.err }
		_, err := k.Fetch(context.Background(), ref)
		kcExpect(t, err, ref, tc.want)
	}
}

func TestKeychainNoSessionBus(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the session bus check is the Secret Service's")
	}
	uid := os.Getuid()
	for _, f := range []string{"bus", "dbus-session"} {
		if _, err := os.Stat(fmt.Sprintf("/run/user/%d/%s", uid, f)); err == nil {
			t.Skipf("this host has a session bus at /run/user/%d/%s", uid, f)
		}
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	ref := kcRef("coily-test", "github")
	_, err := NewKeychain().Fetch(context.Background(), ref)
	kcExpect(t, err, ref, ErrUnreachable)
	if !strings.Contains(err.Error(), "DBUS_SESSION_BUS_ADDRESS") {
		t.Errorf("error %q does not say what is missing", err)
	}
}

func TestKeychainNoSecretService(t *testing.T) {
	keyringtest.StartBus(t)
	ref := kcRef("coily-test", "github")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := NewKeychain().Fetch(ctx, ref)
	t.Logf("no Secret Service: %v", err)
	kcExpect(t, err, ref, ErrUnreachable)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("fetch waited for its deadline: %v", err)
	}
}

// TestKeystoreKeychainAndFile runs the Keystore over the real backends:
// cached values, Drop forcing a fetch, a backend that is not configured.
func TestKeystoreKeychainAndFile(t *testing.T) {
	keyringtest.Start(t)
	kcSet(t, "coily-test", "github", kcCanary)
	path := filepath.Join(t.TempDir(), "credentials")
	const fileV1, fileV2 = "CANARY-file-value-1111", "CANARY-file-value-2222"
	if err := os.WriteFile(path, []byte("npm="+fileV1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := New(Config{
		Backends: map[string]Backend{BackendKeychain: NewKeychain(), BackendFile: NewFile(path)},
		CacheTTL: time.Hour,
	})
	refs := map[string]Ref{
		"GITHUB_TOKEN": kcRef("coily-test", "github"),
		"NPM_TOKEN":    {Backend: BackendFile, Path: "npm"},
	}
	fetch := func(want map[string]string) {
		t.Helper()
		set, err := ks.Fetch(context.Background(), refs)
		if err != nil {
			t.Fatal(err)
		}
		got := set.Values
		if len(got) != len(want) {
			t.Fatalf("Fetch = %d values, want %d", len(got), len(want))
		}
		for name, v := range want {
			if got[name] != v {
				t.Fatalf("%s = %q, want %q", name, got[name], v)
			}
		}
	}
	fetch(map[string]string{"GITHUB_TOKEN": kcCanary, "NPM_TOKEN": fileV1})

	// Changed at the source: the cache still answers.
	kcSet(t, "coily-test", "github", kcCanary2)
	if err := os.WriteFile(path, []byte("npm="+fileV2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fetch(map[string]string{"GITHUB_TOKEN": kcCanary, "NPM_TOKEN": fileV1})

	ks.Drop()
	fetch(map[string]string{"GITHUB_TOKEN": kcCanary2, "NPM_TOKEN": fileV2})

	// Not configured.
	vref := Ref{Backend: BackendVault, Path: "secret/coily/github", Field: "token"}
	_, err := ks.Fetch(context.Background(), map[string]Ref{"GITHUB_TOKEN": refs["GITHUB_TOKEN"], "VAULT": vref})
	kcExpect(t, err, vref, ErrNoBackend)
	kcNoLeak(t, err, kcCanary, kcCanary2, fileV1, fileV2)

	// A locked keychain fails the whole fetch, without a value.
	ks.Drop()
	keyringtest.Lock(t)
	got, err := ks.Fetch(context.Background(), refs)
	if got != nil {
		t.Errorf("Fetch returned values with an error")
	}
	kcExpect(t, err, refs["GITHUB_TOKEN"], ErrLocked)
	kcNoLeak(t, err, kcCanary, kcCanary2, fileV1, fileV2)
}
