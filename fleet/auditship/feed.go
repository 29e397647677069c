package auditship

import (
	"context"
	"errors"

	"coily.dev/coily/audit"
	"coily.dev/coily/store/etcdstore"
	"coily.dev/coily/webapi"
)

// feedBuffer is how far a console's stream may fall behind before it is
// closed (it reconnects).
const feedBuffer = 256

// Feed is the console's audit stream of every host
// (webapi.WithAuditFeed): the backlog from etcd, then each record as it
// is shipped.
type Feed struct{ Store *etcdstore.Store }

var _ webapi.AuditFeed = Feed{}

// Subscribe returns the last backlog records of every host (bounded in
// bytes too: Tail), and every
// record shipped after them on Live, which closes when the watch ends (a
// corrupt record, etcd lost), the subscriber falls behind, or ctx ends.
func (f Feed) Subscribe(ctx context.Context, backlog int) (*webapi.AuditStream, error) {
	v, err := Tail(ctx, f.Store, backlog, nil)
	if err != nil {
		return nil, err
	}
	rev := v.Rev
	ctx, cancel := context.WithCancel(ctx)
	live := make(chan audit.Record, feedBuffer)
	go func() {
		defer close(live)
		defer cancel()
		_ = Follow(ctx, f.Store, rev, func(r audit.Record) error {
			select {
			case live <- r:
				return nil
			default:
				return errBehind
			}
		})
	}()
	return &webapi.AuditStream{Backlog: v.Records, Dropped: v.Dropped, Live: live, Close: cancel, Fleet: true}, nil
}

// errBehind ends a stream whose subscriber fell behind.
var errBehind = errors.New("auditship: the subscriber fell behind")
