// Package storetest is the contract every store.Shared keeps: what the
// server relies on of the stop controls, the rate buckets, the signing
// keys, the relay's records and nonces, and the leases, whatever keeps
// them. Each implementation runs it from its own tests (Shared). It also
// has shared state that can be put out of reach (Unreachable), for the
// tests of what uses it. It is imported only from tests.
package storetest

import (
	"testing"

	"coily.dev/coily/store"
)

// Writes is what the state under test tells the contract so that it can
// check a call wrote nothing: a count that grows with every write made
// to it (bbolt: the pages it wrote; etcd: the store's revision). The
// Shared that open returns must implement it.
type Writes interface {
	Writes(t testing.TB) int64
}

// Expiry is how the state under test forgets relay records and nonces.
type Expiry int

const (
	// ByPrune: PruneRelays(before, now) forgets what is older than
	// before and the nonces expired at now (the state file).
	ByPrune Expiry = iota
	// ByLease: the state forgets them itself, in real time, by leases
	// (etcd), and PruneRelays does nothing. The contract cannot wait for
	// that; the implementation's own tests show it.
	ByLease
)

// Shared runs the contract against the state open returns, which forgets
// relay records and nonces as expiry says. Each call of open must return a
// fresh, empty state of its own; the state may be kept by other processes
// (an etcd cluster), so the contract waits on nothing but the calls it
// makes and keeps no state of its own between them.
func Shared(t *testing.T, expiry Expiry, open func(t *testing.T) store.Shared) {
	t.Run("stops", func(t *testing.T) { stops(t, open) })
	t.Run("rates", func(t *testing.T) { rates(t, open) })
	t.Run("keys", func(t *testing.T) { keys(t, open) })
	t.Run("relays", func(t *testing.T) { relays(t, expiry, open) })
	t.Run("leases", func(t *testing.T) { leases(t, open) })
}

// writes returns the count of writes made to s.
func writes(t *testing.T, s store.Shared) int64 {
	t.Helper()
	w, ok := s.(Writes)
	if !ok {
		t.Fatalf("%T does not implement storetest.Writes", s)
	}
	return w.Writes(t)
}
