package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// unreachable is shared state that can be put out of reach: every call
// then fails with store.ErrUnavailable, as a store without a quorum does.
type unreachable struct {
	store.Shared
	down atomic.Bool
}

var errNoQuorum = fmt.Errorf("shared state: no quorum: %w", store.ErrUnavailable)

func call[T any](u *unreachable, f func() (T, error)) (T, error) {
	if u.down.Load() {
		var zero T
		return zero, errNoQuorum
	}
	return f()
}

func (u *unreachable) do(f func() error) error {
	_, err := call(u, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

func (u *unreachable) Stops() (store.Stops, error) { return call(u, u.Shared.Stops) }
func (u *unreachable) SetLockout(s store.Stop) error {
	return u.do(func() error { return u.Shared.SetLockout(s) })
}
func (u *unreachable) SetPause(s store.Stop) error {
	return u.do(func() error { return u.Shared.SetPause(s) })
}
func (u *unreachable) Key(sb string) (store.Key, error) {
	return call(u, func() (store.Key, error) { return u.Shared.Key(sb) })
}
func (u *unreachable) Keys() ([]store.Key, error) { return call(u, u.Shared.Keys) }
func (u *unreachable) Relay(id string) (store.Relay, error) {
	return call(u, func() (store.Relay, error) { return u.Shared.Relay(id) })
}
func (u *unreachable) FinishRelay(id string, resp []byte) error {
	return u.do(func() error { return u.Shared.FinishRelay(id, resp) })
}
func (u *unreachable) PutLease(l store.Lease) error {
	return u.do(func() error { return u.Shared.PutLease(l) })
}
func (u *unreachable) DeleteLease(id string) error {
	return u.do(func() error { return u.Shared.DeleteLease(id) })
}
func (u *unreachable) Leases() ([]store.Lease, error) { return call(u, u.Shared.Leases) }

func (u *unreachable) SetSelfPause(p string, s store.Stop) error {
	return u.do(func() error { return u.Shared.SetSelfPause(p, s) })
}

func (u *unreachable) SetPauses(p store.Stop, self map[string]store.Stop) error {
	return u.do(func() error { return u.Shared.SetPauses(p, self) })
}

func (u *unreachable) Take(key string, r store.Rate, now time.Time) (bool, time.Duration, error) {
	if u.down.Load() {
		return false, 0, errNoQuorum
	}
	return u.Shared.Take(key, r, now)
}

func (u *unreachable) IssueKey(sb string, secret []byte, now time.Time) (store.Key, error) {
	return call(u, func() (store.Key, error) { return u.Shared.IssueKey(sb, secret, now) })
}

func (u *unreachable) ReplaceKeys(sbs []string, secret func(string) ([]byte, error), now time.Time) ([]store.Key, error) {
	return call(u, func() ([]store.Key, error) { return u.Shared.ReplaceKeys(sbs, secret, now) })
}

func (u *unreachable) AcceptRelay(r store.Relay, nonce string, exp time.Time) (store.Relay, bool, error) {
	if u.down.Load() {
		return store.Relay{}, false, errNoQuorum
	}
	return u.Shared.AcceptRelay(r, nonce, exp)
}

func (u *unreachable) PruneRelays(before, now time.Time) (int, int, error) {
	if u.down.Load() {
		return 0, 0, errNoQuorum
	}
	return u.Shared.PruneRelays(before, now)
}

// With its shared state out of reach, the server refuses an Exec whose
// rule takes a rate token with state-unavailable (gRPC UNAVAILABLE), audits
// the refusal, and runs nothing; a lockout is in force all the same, and an
// unlock changes nothing until the state is back.
func TestSharedStateUnavailable(t *testing.T) {
	pol := `version: 1
roles: {operator: {permissions: [exec, lockout, unlock, status], commands: [sh]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, rate: {per_minute: 10}}
`
	shared := &unreachable{}
	in := testserver.Start(t, testserver.Options{Policy: pol, Shared: func(db *store.DB) store.Shared {
		shared.Shared = db
		return shared
	}})
	in.Client.RateLimitRetries = 0
	ran := filepath.Join(in.StateDir, "ran")
	shared.down.Store(true)

	r := execArgv(t, in, "/bin/sh", "-c", "touch "+ran)
	wantCode(t, r.err, refusal.StateUnavailable)
	if re := refusal.As(r.err); re.AuditID == "" || re.Code.GRPCCode() != codes.Unavailable {
		t.Fatalf("refusal %+v: want an audit id and UNAVAILABLE", re)
	}
	in.WaitAudit(t, func(rec audit.Record) bool {
		return rec.Decision == "refuse" && rec.Code == string(refusal.StateUnavailable) && rec.Rule == "sh"
	})
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the command ran: %v", err)
	}

	ctx := context.Background()
	_, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "incident"})
	if status.Code(err) != codes.Unavailable || refusal.FromStatus(err).Code != refusal.StateUnavailable {
		t.Fatalf("Lockout with the state out of reach: %v, want state-unavailable", err)
	}
	_, err = in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "too soon"})
	if refusal.FromStatus(err).Code != refusal.StateUnavailable {
		t.Fatalf("Unlock with the state out of reach: %v, want state-unavailable", err)
	}
	if st, err := in.Client.API.Status(ctx, &coilyv1.StatusRequest{}); err != nil || !st.GetLockout().GetActive() {
		t.Fatalf("after a refused unlock: %v %v, want still locked out", st, err)
	}

	shared.down.Store(false)
	if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "back"}); err != nil {
		t.Fatalf("Unlock with the state back: %v", err)
	}
	if r := execArgv(t, in, "/bin/sh", "-c", "touch "+ran); r.err != nil {
		t.Fatalf("Exec with the state back: %v", r.err)
	}
}
