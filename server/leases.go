package server

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/keystore"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// EventLeaseRevoke is the audit event of a lease revoked at start: one an
// earlier run of the server held and did not revoke (it crashed, was
// killed, or could not reach the backend).
const EventLeaseRevoke = "lease.revoke"

// leaseRenewMargin is asked for beyond a command's deadline when its
// lease is renewed, so that the lease outlives the command's last moment.
const leaseRenewMargin = 30 * time.Second

// execLeases are the dynamic-secret leases one execution's credentials
// came with.
type execLeases struct {
	held     []keystore.Lease // not yet revoked
	ids      []string         // every lease it held, for its audit records
	renewals atomic.Int64
}

// holdLeases records leases in the store before anything can use them, so
// that a server that dies before revoking them revokes them at its next
// start (revokeLeftovers). A lease that cannot be recorded fails the
// execution; every lease is then revoked (endLeases) and nothing runs.
func (s *Server) holdLeases(x *execution, leases []keystore.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	now := s.cfg.Now()
	for _, l := range leases {
		x.leases.held = append(x.leases.held, l)
		x.leases.ids = append(x.leases.ids, l.ID)
		rec := store.Lease{ID: l.ID, Backend: l.Backend, RequestID: x.id, Rule: x.rule.Name, Acquired: now}
		if l.TTL > 0 {
			rec.Expires = now.Add(l.TTL)
		}
		if err := s.cfg.Store.PutLease(rec); err != nil {
			return refusal.Wrap(refusal.Internal, err, "lease state unavailable; the credentials were revoked and the command not run")
		}
	}
	return nil
}

// keepLeases renews, until the returned stop is called, each renewable
// lease of x whose TTL ends before deadline (the command's timeout); a
// lease that cannot be renewed and would end first is logged. stop waits
// for the renewals to end.
func (s *Server) keepLeases(x *execution, deadline time.Time) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range x.leases.held {
		if l.TTL <= 0 || !time.Now().Add(l.TTL).Before(deadline) {
			continue
		}
		if !l.Renewable {
			s.log.Warn("a credential's lease ends before the command's timeout and cannot be renewed",
				"request_id", x.id, "lease_id", l.ID, "ttl", l.TTL, "timeout", time.Until(deadline).Round(time.Second))
			continue
		}
		wg.Go(func() { s.renewLease(ctx, x, l, deadline) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// renewLease renews l at two thirds of each TTL granted, asking for the
// time left to deadline and a margin, until ctx ends, deadline passes or
// a renewal fails (then the lease ends at its TTL; the command goes on).
func (s *Server) renewLease(ctx context.Context, x *execution, l keystore.Lease, deadline time.Time) {
	ttl := l.TTL
	for {
		timer := time.NewTimer(max(ttl*2/3, 100*time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		renewed, err := s.cfg.Keystore.RenewLease(ctx, l, (left + leaseRenewMargin).Round(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("lease renewal failed; the credential ends at its TTL", "request_id", x.id, "lease_id", l.ID, "err", err)
			}
			return
		}
		x.leases.renewals.Add(1)
		if renewed.TTL <= 0 {
			return
		}
		ttl = renewed.TTL
	}
}

// endCredentials ends what x's credentials came with: the leases of
// dynamic secrets, each revoked once; the outcome goes into rec, when
// given.
func (s *Server) endCredentials(ctx context.Context, x *execution, rec *audit.Record) {
	s.endLeases(ctx, x, rec)
}

// endLeases revokes x's leases (its command is over, or will never run)
// and forgets those revoked; one that cannot be revoked stays in the store
// for the next start to revoke, and ends at its TTL meanwhile. The
// outcome goes into rec, when given.
func (s *Server) endLeases(ctx context.Context, x *execution, rec *audit.Record) {
	if len(x.leases.held) == 0 {
		return
	}
	held := x.leases.held
	x.leases.held = nil
	var failed []string
	for _, l := range held {
		if err := s.cfg.Keystore.RevokeLease(context.WithoutCancel(ctx), l); err != nil {
			failed = append(failed, l.ID+": "+err.Error())
			s.log.Error("lease revocation failed; the next start revokes it", "request_id", x.id, "lease_id", l.ID, "err", err)
			continue
		}
		if err := s.cfg.Store.DeleteLease(l.ID); err != nil {
			// Revoked, but still recorded: the next start revokes it
			// again, which is harmless.
			s.log.Error("forgetting a revoked lease", "lease_id", l.ID, "err", err)
		}
	}
	if rec == nil {
		return
	}
	if rec.Details == nil {
		rec.Details = map[string]string{}
	}
	rec.Details["leases_revoked"] = strconv.Itoa(len(held) - len(failed))
	setList(rec, "lease_revoke_failed", failed)
	if n := x.leases.renewals.Load(); n > 0 {
		rec.Details["lease_renewals"] = strconv.FormatInt(n, 10)
	}
}

// revokeLeftovers revokes the leases an earlier run of the server left
// recorded (leftovers, read before this run took any), each audited as a
// lease.revoke record. One that cannot be revoked stays recorded, for the
// next start.
func (s *Server) revokeLeftovers(ctx context.Context, leftovers []store.Lease) {
	for _, l := range leftovers {
		rec := access.CallerRecord(access.ServerCaller, "", EventLeaseRevoke, fmt.Sprintf(
			"lease acquired %s by an earlier run of the server, which did not revoke it", l.Acquired.UTC().Format(time.RFC3339)))
		rec.RequestID, rec.Rule, rec.Leases = l.RequestID, l.Rule, []string{l.ID}
		err := s.cfg.Keystore.RevokeLease(ctx, keystore.Lease{Backend: l.Backend, ID: l.ID})
		if err == nil {
			err = s.cfg.Store.DeleteLease(l.ID)
		}
		rec.Details = map[string]string{"result": "revoked"}
		if err != nil {
			rec.Details["result"] = "failed: " + err.Error()
			s.log.Error("revoking a lease left by an earlier run failed; the next start tries again", "lease_id", l.ID, "err", err)
		} else {
			s.log.Info("revoked a lease left by an earlier run", "lease_id", l.ID, "request_id", l.RequestID)
		}
		if _, aerr := s.record(ctx, rec); aerr != nil {
			s.log.Error("audit of a lease revocation", "lease_id", l.ID, "err", aerr)
		}
	}
}
