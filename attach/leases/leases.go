// Package leases is the attachment that holds the leases of an
// execution's dynamic secrets (a Vault lease of AWS keys, say): each is
// recorded in the store before anything can use it, renewed while the
// command runs when it would end first, and revoked when the command is
// over or will never run. A lease a server could not revoke (it crashed,
// was killed, or could not reach the backend) stays recorded, and the
// next start revokes it (RevokeLeftovers).
package leases

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/keystore"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// EventRevoke is the audit event of a lease revoked at start: one an
// earlier run of the server held and did not revoke.
const EventRevoke = "lease.revoke"

// renewMargin is asked for beyond a command's deadline when its lease is
// renewed, so that the lease outlives the command's last moment.
const renewMargin = 30 * time.Second

// Config is what leases are held, renewed and revoked with: the server's
// keystore (their backends), store (their records) and log.
type Config struct {
	Keystore *keystore.Keystore
	Store    store.Shared
	Log      *slog.Logger
	Now      func() time.Time
	// Host names this host in the leases it records, and is the only
	// host whose leftovers it revokes at start: in a fleet the store
	// holds the leases of every host's running commands ("" for one host).
	Host string
}

// Leases are the leases one execution's credentials came with.
type Leases struct {
	cfg      Config
	id, rule string
	held     []keystore.Lease // not yet revoked
	ids      []string         // every lease it held, for its audit records
	renewals atomic.Int64
}

// New is the attachment of the leases execution id (under rule) will
// hold: none yet.
func New(cfg Config, id, rule string) *Leases {
	return &Leases{cfg: cfg, id: id, rule: rule}
}

var (
	_ attach.Leased = (*Leases)(nil)
	_ attach.Keeper = (*Leases)(nil)
)

// Hold records leases in the store before anything can use them, so that
// a server that dies before revoking them revokes them at its next start
// (RevokeLeftovers). A lease that cannot be recorded refuses the
// execution; every lease is then revoked (Close) and nothing runs.
func (l *Leases) Hold(leases []keystore.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	now := l.cfg.Now()
	for _, ls := range leases {
		l.held = append(l.held, ls)
		l.ids = append(l.ids, ls.ID)
		rec := store.Lease{ID: ls.ID, Backend: ls.Backend, RequestID: l.id, Rule: l.rule, Acquired: now, Host: l.cfg.Host}
		if ls.TTL > 0 {
			rec.Expires = now.Add(ls.TTL)
		}
		if err := l.cfg.Store.PutLease(rec); err != nil {
			return refusal.Wrap(refusal.Internal, err, "lease state unavailable; the credentials were revoked and the command not run")
		}
	}
	return nil
}

// Keep renews, until the returned stop is called, each renewable lease
// whose TTL ends before deadline (the command's timeout); a lease that
// cannot be renewed and would end first is logged. stop waits for the
// renewals to end.
func (l *Leases) Keep(deadline time.Time) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ls := range l.held {
		if ls.TTL <= 0 || !time.Now().Add(ls.TTL).Before(deadline) {
			continue
		}
		if !ls.Renewable {
			l.cfg.Log.Warn("a credential's lease ends before the command's timeout and cannot be renewed",
				"request_id", l.id, "lease_id", ls.ID, "ttl", ls.TTL, "timeout", time.Until(deadline).Round(time.Second))
			continue
		}
		wg.Go(func() { l.renew(ctx, ls, deadline) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// renew renews ls at two thirds of each TTL granted, asking for the time
// left to deadline and a margin, until ctx ends, deadline passes or a
// renewal fails (then the lease ends at its TTL; the command goes on).
func (l *Leases) renew(ctx context.Context, ls keystore.Lease, deadline time.Time) {
	ttl := ls.TTL
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
		renewed, err := l.cfg.Keystore.RenewLease(ctx, ls, (left + renewMargin).Round(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				l.cfg.Log.Warn("lease renewal failed; the credential ends at its TTL", "request_id", l.id, "lease_id", ls.ID, "err", err)
			}
			return
		}
		l.renewals.Add(1)
		if renewed.TTL <= 0 {
			return
		}
		ttl = renewed.TTL
	}
}

// Prepare has nothing to ready: the leases came with the credentials.
func (l *Leases) Prepare(context.Context, *attach.Run) error { return nil }

// Close revokes the leases (the command is over, or will never run) and
// forgets those revoked; one that cannot be revoked stays in the store
// for the next start to revoke, and ends at its TTL meanwhile. The
// outcome goes into the end's record, when there is one.
func (l *Leases) Close(ctx context.Context, end *attach.End) {
	if len(l.held) == 0 {
		return
	}
	held := l.held
	l.held = nil
	var failed []string
	for _, ls := range held {
		if err := l.cfg.Keystore.RevokeLease(context.WithoutCancel(ctx), ls); err != nil {
			failed = append(failed, ls.ID+": "+err.Error())
			l.cfg.Log.Error("lease revocation failed; the next start revokes it", "request_id", l.id, "lease_id", ls.ID, "err", err)
			continue
		}
		if err := l.cfg.Store.DeleteLease(ls.ID); err != nil {
			// Revoked, but still recorded: the next start revokes it
			// again, which is harmless.
			l.cfg.Log.Error("forgetting a revoked lease", "lease_id", ls.ID, "err", err)
		}
	}
	rec := end.Record
	if rec == nil {
		return
	}
	rec.SetDetail("leases_revoked", strconv.Itoa(len(held)-len(failed)))
	rec.SetList("lease_revoke_failed", failed)
	if n := l.renewals.Load(); n > 0 {
		rec.SetDetail("lease_renewals", strconv.FormatInt(n, 10))
	}
}

// Describe writes the ids of every lease held: lease ids, never values.
func (l *Leases) Describe(rec *audit.Record) { rec.Leases = l.ids }

// StartRevokingLeftovers revokes, in the background (on bg), the leases
// an earlier run of the server recorded and did not revoke
// (RevokeLeftovers). They are read now, before this run records any of
// its own.
func StartRevokingLeftovers(cfg Config, bg *sync.WaitGroup, record func(context.Context, audit.Record) (audit.Record, error)) {
	all, err := cfg.Store.Leases()
	if err != nil {
		cfg.Log.Error("reading the leases an earlier run left; they end at their TTL", "err", err)
		return
	}
	leftovers := Leftovers(all, cfg.Host)
	if len(leftovers) == 0 {
		return
	}
	cfg.Log.Warn("revoking leases an earlier run of the server did not revoke", "count", len(leftovers))
	bg.Go(func() { RevokeLeftovers(context.Background(), cfg, leftovers, record) })
}

// Leftovers are the leases of all an earlier run of host left: its own,
// and those naming no host (a one-host server's, moved to etcd by coily
// state migrate while it was stopped), never those another host of the
// fleet holds for its running commands.
func Leftovers(all []store.Lease, host string) []store.Lease {
	var out []store.Lease
	for _, l := range all {
		if l.Host == host || l.Host == "" {
			out = append(out, l)
		}
	}
	return out
}

// RevokeLeftovers revokes the leases an earlier run of the server left
// recorded (leftovers, read before this run took any), each audited as an
// EventRevoke record by record. One that cannot be revoked stays
// recorded, for the next start.
func RevokeLeftovers(ctx context.Context, cfg Config, leftovers []store.Lease, record func(context.Context, audit.Record) (audit.Record, error)) {
	for _, l := range leftovers {
		rec := access.CallerRecord(access.ServerCaller, "", EventRevoke, fmt.Sprintf(
			"lease acquired %s by an earlier run of the server, which did not revoke it", l.Acquired.UTC().Format(time.RFC3339)))
		rec.RequestID, rec.Rule, rec.Leases = l.RequestID, l.Rule, []string{l.ID}
		err := cfg.Keystore.RevokeLease(ctx, keystore.Lease{Backend: l.Backend, ID: l.ID})
		if err == nil {
			err = cfg.Store.DeleteLease(l.ID)
		}
		rec.Details = map[string]string{"result": "revoked"}
		if err != nil {
			rec.Details["result"] = "failed: " + err.Error()
			cfg.Log.Error("revoking a lease left by an earlier run failed; the next start tries again", "lease_id", l.ID, "err", err)
		} else {
			cfg.Log.Info("revoked a lease left by an earlier run", "lease_id", l.ID, "request_id", l.RequestID)
		}
		if _, aerr := record(ctx, rec); aerr != nil {
			cfg.Log.Error("audit of a lease revocation", "lease_id", l.ID, "err", aerr)
		}
	}
}
