package auditship

import (
	"context"
	"fmt"

	"coily.dev/coily/audit"
	"coily.dev/coily/store/etcdstore"
)

// Tail returns the last n records of every host that match accepts (all
// when nil), merged by time, oldest first, and the revision they were
// read at (Follow from it misses nothing and repeats nothing).
func Tail(ctx context.Context, st *etcdstore.Store, n int, match func(audit.Record) bool) ([]audit.Record, int64, error) {
	recs, rev, err := st.AuditTail(ctx, n, match)
	if err != nil {
		return nil, 0, fmt.Errorf("auditship: %w", err)
	}
	out := make([]audit.Record, len(recs))
	for i, r := range recs {
		out[i] = r.Record
	}
	return out, rev, nil
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
