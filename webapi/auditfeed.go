package webapi

import (
	"context"
	"net/http"

	"coily.dev/coily/access"
	"coily.dev/coily/refusal"
)

// AuditFeed is where the console's audit stream reads when it is not the
// server's own log: a fleet's records of every host
// (fleet/auditship.Feed).
type AuditFeed interface {
	// Subscribe returns the last backlog records (at most
	// MaxAuditBacklog) and every record after them, until ctx ends or
	// the stream's Close.
	Subscribe(ctx context.Context, backlog int) (*AuditStream, error)
}

// WithAuditFeed is s with its audit stream read from f: WebAudit admits
// the caller for access.WebAudit as s does (a refusal audited), then
// subscribes to f. A feed that cannot be read is state-unavailable.
func WithAuditFeed(s Server, f AuditFeed) Server { return feedServer{s, f} }

type feedServer struct {
	Server
	feed AuditFeed
}

func (s feedServer) WebAudit(r *http.Request, backlog int) (*AuditStream, error) {
	if err := s.WebAdmit(r, access.WebAudit); err != nil {
		return nil, err
	}
	st, err := s.feed.Subscribe(r.Context(), min(max(backlog, 0), MaxAuditBacklog))
	if err != nil {
		return nil, refusal.Wrap(refusal.StateUnavailable, err, "the fleet's audit records cannot be read")
	}
	return st, nil
}
