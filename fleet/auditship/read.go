package auditship

import (
	"context"
	"fmt"

	"coily.dev/coily/audit"
	"coily.dev/coily/store/etcdstore"
)

// View is what Tail read.
type View struct {
	// Records are the records, oldest first.
	Records []audit.Record
	// Rev is the revision they were read at (Follow from it misses
	// nothing and repeats nothing).
	Rev int64
	// Dropped is how many older records of the last n were left out to
	// bound the view's bytes (etcdstore.Config.AuditTailBytes), at least.
	Dropped int
}

// Tail returns the last n records of every host that match accepts (all
// when nil), merged by time, oldest first, and the revision they were
// read at. It holds at most n records and the store's AuditTailBytes of
// them in all, whatever the number of hosts: the oldest are dropped.
func Tail(ctx context.Context, st *etcdstore.Store, n int, match func(audit.Record) bool) (View, error) {
	v, err := st.AuditTail(ctx, n, match)
	if err != nil {
		return View{}, fmt.Errorf("auditship: %w", err)
	}
	out := make([]audit.Record, len(v.Records))
	for i, r := range v.Records {
		out[i] = r.Record
	}
	return View{Records: out, Rev: v.Rev, Dropped: v.Dropped}, nil
}

// Follow calls fn with every record any host ships after revision rev
// (Tail's), as it is shipped, until ctx ends (nil) or the watch fails, a
// record is corrupt, or fn fails (that error).
func Follow(ctx context.Context, st *etcdstore.Store, rev int64, fn func(audit.Record) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for ev := range st.WatchAudit(ctx, rev+1) {
		if ev.Err != nil {
			return fmt.Errorf("auditship: %w", ev.Err)
		}
		if err := fn(ev.Record.Record); err != nil {
			return err
		}
	}
	return nil
}
