package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fetch returns the field ref names from a static secret. Errors are
// *Error wrapping one of ErrNotFound, ErrDenied, ErrUnreachable or
// ErrRenewal. A dynamic secret (one whose read carries a lease) is
// refused here, and its lease revoked: a Keystore fetches those
// (FetchGroup) and tracks their leases.
func (v *Vault) Fetch(ctx context.Context, ref Ref) (string, error) {
	vals, lease, err := v.FetchGroup(ctx, []Ref{ref})
	if err != nil {
		return "", err
	}
	if lease != nil {
		v.revokeQuietly(ctx, lease)
		return "", &Error{Ref: ref, Err: fmt.Errorf("%w: %s is a dynamic secret (its read carries a lease); fetch it through a keystore, which revokes the lease", ErrNotFound, ref.Path)}
	}
	return vals[ref.Field], nil
}

// FetchGroup reads the secret refs name (one path) once and returns the
// fields asked for, and the read's lease when it carries one (a dynamic
// secret: the caller revokes it with RevokeLease when done). On an error
// the lease, if any, has been revoked.
func (v *Vault) FetchGroup(ctx context.Context, refs []Ref) (map[string]string, *Lease, error) {
	if len(refs) == 0 {
		return map[string]string{}, nil, nil
	}
	var r readResult
	err := v.do(ctx, func(s *vaultSession) error {
		var err error
		r, err = v.readSecret(ctx, s, refs[0].Path)
		return err
	})
	if err != nil {
		return nil, nil, &Error{Ref: refs[0], Err: err}
	}
	vals := make(map[string]string, len(refs))
	for _, ref := range refs {
		if ref.Path != refs[0].Path {
			v.revokeQuietly(ctx, r.lease)
			return nil, nil, &Error{Ref: ref, Err: fmt.Errorf("%w: not the path of %s", ErrNotFound, refs[0])}
		}
		val, err := r.field(ref.Field)
		if err != nil {
			clear(vals)
			v.revokeQuietly(ctx, r.lease)
			return nil, nil, &Error{Ref: ref, Err: err}
		}
		vals[ref.Field] = val
	}
	return vals, r.lease, nil
}

// RenewLease renews lease id by increment (sys/leases/renew) and returns
// it with the TTL Vault granted, which may be shorter (the lease's max
// TTL). Errors wrap ErrNotFound (no such lease), ErrDenied,
// ErrUnreachable or ErrRenewal.
func (v *Vault) RenewLease(ctx context.Context, id string, increment time.Duration) (Lease, error) {
	l := Lease{Backend: BackendVault, ID: id}
	err := v.do(ctx, func(s *vaultSession) error {
		sec, err := s.client.Sys().RenewWithContext(ctx, id, int(increment/time.Second))
		if err != nil {
			return v.classify(ctx, "renewal of lease "+id+" (sys/leases/renew)", err, s.token)
		}
		if sec == nil {
			return fmt.Errorf("%w: vault returned nothing for the renewal of lease %s", ErrRenewal, id)
		}
		l.TTL, l.Renewable = time.Duration(sec.LeaseDuration)*time.Second, sec.Renewable
		return nil
	})
	if err != nil {
		return l, err
	}
	v.log.Debug("vault lease renewed", "lease_id", id, "ttl", l.TTL)
	return l, nil
}

// RevokeLease revokes lease id (sys/leases/revoke, synchronous: Vault has
// revoked what the lease created when it answers). A lease Vault no longer
// holds (expired, revoked with its token) is not an error.
func (v *Vault) RevokeLease(ctx context.Context, id string) error {
	err := v.do(ctx, func(s *vaultSession) error {
		if err := s.client.Sys().RevokeWithContext(ctx, id); err != nil {
			return v.classify(ctx, "revocation of lease "+id+" (sys/leases/revoke)", err, s.token)
		}
		return nil
	})
	if err != nil {
		v.log.Warn("vault lease revocation failed", "lease_id", id, "err", err)
		return err
	}
	v.log.Info("vault lease revoked", "lease_id", id)
	return nil
}

// revokeQuietly revokes a lease a caller will never see (a read that
// failed after Vault created it), logging a failure.
func (v *Vault) revokeQuietly(ctx context.Context, l *Lease) {
	if l != nil {
		_ = v.RevokeLease(context.WithoutCancel(ctx), l.ID)
	}
}

// do runs call with the current session's token. A refusal (403) is
// looked at before it is returned: a token file that now holds another
// token (Vault Agent's sink) is re-read and call retried with it; a token
// that is no longer valid is dropped (approle logs in again and call is
// retried once; token auth fails every later call until a fresh token).
func (v *Vault) do(ctx context.Context, call func(*vaultSession) error) error {
	for attempt := 0; ; attempt++ {
		s, err := v.session(ctx)
		if err != nil {
			return err
		}
		err = call(s)
		var ve *vaultError
		if err == nil || !errors.As(err, &ve) || ve.kind != ErrDenied || ctx.Err() != nil {
			return err
		}
		if attempt == 0 && v.refreshToken(true) {
			continue
		}
		// Denied: a policy, or a token that expired or was revoked
		// behind the watcher's back?
		if !v.tokenInvalid(ctx, s, ve.resp) {
			return err
		}
		gone := v.invalidate(s, "vault token is no longer valid (expired or revoked)")
		if gone != nil {
			return gone
		}
		if attempt > 0 {
			return err
		}
		// approle: log in again and retry once.
	}
}
