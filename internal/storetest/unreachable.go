package storetest

import (
	"fmt"
	"sync/atomic"
	"time"

	"coily.dev/coily/store"
)

// Unreachable is shared state that can be put out of reach: while Down
// is set every call fails with store.ErrUnavailable, as a store without a
// quorum does; otherwise it is Shared's. A unit seam for what a server
// does with its state out of reach.
type Unreachable struct {
	store.Shared
	Down atomic.Bool
}

var errNoQuorum = fmt.Errorf("shared state: no quorum: %w", store.ErrUnavailable)

func call[T any](u *Unreachable, f func() (T, error)) (T, error) {
	if u.Down.Load() {
		var zero T
		return zero, errNoQuorum
	}
	return f()
}

func (u *Unreachable) do(f func() error) error {
	_, err := call(u, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

func (u *Unreachable) Stops() (store.Stops, error) { return call(u, u.Shared.Stops) }
func (u *Unreachable) SetLockout(s store.Stop) error {
	return u.do(func() error { return u.Shared.SetLockout(s) })
}
func (u *Unreachable) SetPause(s store.Stop) error {
	return u.do(func() error { return u.Shared.SetPause(s) })
}
func (u *Unreachable) Key(sb string) (store.Key, error) {
	return call(u, func() (store.Key, error) { return u.Shared.Key(sb) })
}
func (u *Unreachable) Keys() ([]store.Key, error) { return call(u, u.Shared.Keys) }
func (u *Unreachable) Relay(id string) (store.Relay, error) {
	return call(u, func() (store.Relay, error) { return u.Shared.Relay(id) })
}
func (u *Unreachable) FinishRelay(id string, resp []byte) error {
	return u.do(func() error { return u.Shared.FinishRelay(id, resp) })
}
func (u *Unreachable) PutLease(l store.Lease) error {
	return u.do(func() error { return u.Shared.PutLease(l) })
}
func (u *Unreachable) DeleteLease(id string) error {
	return u.do(func() error { return u.Shared.DeleteLease(id) })
}
func (u *Unreachable) Leases() ([]store.Lease, error) { return call(u, u.Shared.Leases) }

func (u *Unreachable) SetSelfPause(p string, s store.Stop) error {
	return u.do(func() error { return u.Shared.SetSelfPause(p, s) })
}

func (u *Unreachable) SetPauses(p store.Stop, self map[string]store.Stop) error {
	return u.do(func() error { return u.Shared.SetPauses(p, self) })
}

func (u *Unreachable) Take(key string, r store.Rate, now time.Time) (bool, time.Duration, error) {
	if u.Down.Load() {
		return false, 0, errNoQuorum
	}
	return u.Shared.Take(key, r, now)
}

func (u *Unreachable) IssueKey(sb string, secret []byte, now time.Time) (store.Key, error) {
	return call(u, func() (store.Key, error) { return u.Shared.IssueKey(sb, secret, now) })
}

func (u *Unreachable) ReplaceKeys(sbs []string, secret func(string) ([]byte, error), now time.Time) ([]store.Key, error) {
	return call(u, func() ([]store.Key, error) { return u.Shared.ReplaceKeys(sbs, secret, now) })
}

func (u *Unreachable) AcceptRelay(r store.Relay, nonce string, exp time.Time) (store.Relay, bool, error) {
	if u.Down.Load() {
		return store.Relay{}, false, errNoQuorum
	}
	return u.Shared.AcceptRelay(r, nonce, exp)
}

func (u *Unreachable) PruneRelays(before, now time.Time) (int, int, error) {
	if u.Down.Load() {
		return 0, 0, errNoQuorum
	}
	return u.Shared.PruneRelays(before, now)
}
