package keystore

import (
	"context"
	"fmt"
	"time"
)

// A Lease is the lease a dynamic secret came with (a read of Vault's AWS
// secrets engine, say): what the read created (temporary cloud keys, a
// database user) lives until the lease is revoked or expires. Its ID
// names the lease, never the secret: it may be logged and audited.
type Lease struct {
	Backend   string        // the backend that read it (BackendVault)
	ID        string        // e.g. "aws/sts/coily-s3/AbC123…"
	TTL       time.Duration // at the read, or at the last renewal
	Renewable bool
}

// A GroupBackend reads several fields of one secret with one read, so
// that values which belong together (an access key and its secret) come
// from the same version or, for a dynamic secret, the same lease.
type GroupBackend interface {
	// FetchGroup returns the values of refs (one backend and path,
	// different fields), by field, from one read, and the lease the read
	// carries (nil for a static secret). Errors are *Error naming one of
	// refs; on an error no lease is left behind.
	FetchGroup(ctx context.Context, refs []Ref) (map[string]string, *Lease, error)
}

// A LeaseBackend renews and revokes the leases of its reads.
type LeaseBackend interface {
	// RenewLease asks for the lease to last increment longer and returns
	// it with the TTL granted.
	RenewLease(ctx context.Context, id string, increment time.Duration) (Lease, error)
	// RevokeLease ends the lease (and what it created). Revoking a lease
	// that is already gone is not an error.
	RevokeLease(ctx context.Context, id string) error
}

// Set is what one Fetch returned: the values by the name each is
// injected as, and the leases they came with (revoke them when done).
type Set struct {
	Values map[string]string
	Leases []Lease
}

// RenewLease renews l through its backend, bounded by the fetch timeout.
func (k *Keystore) RenewLease(ctx context.Context, l Lease, increment time.Duration) (Lease, error) {
	b, err := k.leaseBackend(l)
	if err != nil {
		return l, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	return b.RenewLease(ctx, l.ID, increment)
}

// RevokeLease revokes l through its backend, bounded by the fetch
// timeout.
func (k *Keystore) RevokeLease(ctx context.Context, l Lease) error {
	b, err := k.leaseBackend(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	return b.RevokeLease(ctx, l.ID)
}

func (k *Keystore) leaseBackend(l Lease) (LeaseBackend, error) {
	if k == nil {
		return nil, fmt.Errorf("lease %s: %w", l.ID, ErrNoBackend)
	}
	b, ok := k.cfg.Backends[l.Backend].(LeaseBackend)
	if !ok {
		return nil, fmt.Errorf("lease %s: %w: the server has no %s backend that holds leases", l.ID, ErrNoBackend, l.Backend)
	}
	return b, nil
}

// revokeAll revokes leases a failed Fetch had acquired, best effort: a
// lease not revoked still ends at its TTL.
func (k *Keystore) revokeAll(ctx context.Context, leases []Lease) {
	for _, l := range leases {
		_ = k.RevokeLease(context.WithoutCancel(ctx), l)
	}
}
