// Package recorder writes the server's audit records: every decision goes
// through Record, which appends it (fsynced, or pending for the decision
// that precedes a command) with its log line; a caller's refusals past its
// budget are counted in refusal.summary records instead of written one by
// one (flood.go); every append is observed and handed to the live feed
// (feed.go).
package recorder

import (
	"context"
	"log/slog"
	"time"

	"coily.dev/coily/audit"
)

// Appender is the audit log the records go to (*audit.Log).
type Appender interface {
	// Append writes r and fsyncs it.
	Append(ctx context.Context, r audit.Record) (audit.Record, error)
	// AppendPending writes r without waiting for the fsync.
	AppendPending(ctx context.Context, r audit.Record) (audit.Record, error)
}

// Config is what a Recorder writes to and who hears of it.
type Config struct {
	Audit Appender
	Log   *slog.Logger
	Now   func() time.Time
	// Written observes each append: how long it took, whether it was
	// fsynced, whether it failed (the metrics); nil hears nothing.
	Written func(took time.Duration, durable bool, err error)
	// Refused hears each refusal given to Record before it is written or
	// counted (the metrics, the notifier); nil hears nothing.
	Refused func(audit.Record)
	// Recorded hears each record Record wrote on its own, once written
	// (the audit head's anchor); nil hears nothing.
	Recorded func(audit.Record)
}

// Recorder writes the audit records of one server.
type Recorder struct {
	cfg   Config
	flood floodGuard
	feed  auditFeed
}

// New returns a recorder writing to cfg.Audit. Log and Now default to
// slog.Default and time.Now.
func New(cfg Config) *Recorder {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{cfg: cfg}
}

// Record writes one audit record (fsynced when durable) and the matching
// log line; a refusal past its caller's budget is counted in the caller's
// refusal.summary instead, written before Record returns it.
func (r *Recorder) Record(ctx context.Context, rec audit.Record, durable bool) (audit.Record, error) {
	if rec.Decision == "refuse" && r.cfg.Refused != nil {
		r.cfg.Refused(rec)
	}
	// The result of a command that ran is always recorded on its own (its
	// decision was, and slots bound how many run): how it ended, what was
	// quarantined, what bounded it must not fold into a count.
	if rec.Decision == "refuse" && rec.Event != "exec.result" {
		key := floodKey(rec)
		if b, lead := r.flood.admit(key, rec, r.cfg.Now()); b != nil {
			// Counted in the caller's refusal.summary, written before
			// this refusal is answered (flood.go).
			return r.summarise(ctx, key, b, lead)
		}
	}
	out, err := r.Append(ctx, rec, durable)
	attrs := []any{"event", rec.Event, "principal", rec.Principal, "transport", rec.Transport,
		"peer", rec.Peer, "decision", rec.Decision}
	for _, kv := range [][2]string{{"code", rec.Code}, {"rule", rec.Rule}, {"request_id", rec.RequestID}, {"reason", rec.Reason}} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0], kv[1])
		}
	}
	if err != nil {
		r.cfg.Log.Error("audit write failed", append(attrs, "err", err)...)
		return out, err
	}
	r.cfg.Log.Info("decision", append(attrs, "audit_id", out.ID)...)
	if r.cfg.Recorded != nil {
		r.cfg.Recorded(out)
	}
	return out, nil
}

// Append appends rec (fsynced when durable), observes the write and hands
// the record to the live feed: no flood control, no log line.
func (r *Recorder) Append(ctx context.Context, rec audit.Record, durable bool) (audit.Record, error) {
	appendFn := r.cfg.Audit.AppendPending
	if durable {
		appendFn = r.cfg.Audit.Append
	}
	t0 := time.Now()
	out, err := appendFn(ctx, rec)
	if r.cfg.Written != nil {
		r.cfg.Written(time.Since(t0), durable, err)
	}
	if err == nil {
		r.feed.publish(out)
	}
	return out, err
}

// Subscribe returns a channel of the records appended from now on, and
// the function that ends the subscription. The channel is closed when the
// subscriber falls too far behind, at Close, or by the returned function.
func (r *Recorder) Subscribe() (<-chan audit.Record, func()) { return r.feed.subscribe() }

// Close ends every subscription to the live feed and refuses new ones
// (the server's shutdown). Records are still written.
func (r *Recorder) Close() { r.feed.close() }
