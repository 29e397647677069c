package fleet

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/stateguard"
	"coily.dev/coily/store"
)

// Lockouts is the Host of a coily server: what it does, beyond its stop
// controls, when a lockout taken elsewhere comes in force here. It does
// not replace the sandboxes' signing keys again (the host that took the
// lockout did, in the shared state) nor tell the owner again.
type Lockouts struct {
	// RejectApprovals rejects every pending approval and says how many.
	RejectApprovals func() int
	// Keystore is the keystore's lockout hook (cached credentials
	// dropped, the Vault token revoked when so configured).
	Keystore func(context.Context) error
	// Record audits a record.
	Record func(context.Context, audit.Record) (audit.Record, error)
	Logger *slog.Logger
}

// LockedOut rejects the pending approvals, runs the keystore's hook and
// audits lockout.remote: who took the lockout, why, when, the revision
// it was read at and how many running commands it signalled here.
func (l Lockouts) LockedOut(ctx context.Context, st store.Stop, rev int64, killed int) {
	rejected := l.RejectApprovals()
	rec := audit.Record{Event: audit.EventLockoutRemote, Decision: "allow", Principal: st.By, Reason: st.Reason,
		Killed: killed, Details: map[string]string{
			"etcd_rev":           strconv.FormatInt(rev, 10),
			"since":              st.Since.UTC().Format(time.RFC3339Nano),
			"approvals_rejected": strconv.Itoa(rejected),
		}}
	if err := l.Keystore(context.WithoutCancel(ctx)); err != nil {
		l.Logger.Error("keystore lockout hook", "err", err)
		rec.Details["keystore_error"] = err.Error()
	}
	if _, err := l.Record(context.WithoutCancel(ctx), rec); err != nil {
		l.Logger.Error("audit a lockout from elsewhere", "err", err, "revision", rev)
	}
}

// Loosened audits unlock.remote and resume.remote: who lifted the stop,
// why, when, and the revision it was read at; resume.remote also carries
// the pause state after it, which the host's next start reads.
func (l Lockouts) Loosened(ctx context.Context, after store.Stops, rev int64, unlock, resume bool) {
	var recs []audit.Record
	if unlock {
		recs = append(recs, stateguard.UnlockRemote(after.Lockout, rev))
	}
	if resume {
		recs = append(recs, stateguard.ResumeRemote(after, rev))
	}
	for _, rec := range recs {
		if _, err := l.Record(context.WithoutCancel(ctx), rec); err != nil {
			l.Logger.Error("audit a loosening from elsewhere", "event", rec.Event, "err", err, "revision", rev)
		}
	}
}
