package webapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"coily.dev/coily/access"
	"coily.dev/coily/refusal"
	"coily.dev/coily/webapi"
)

// admitter is the server seam: it admits or refuses, and records for
// what.
type admitter struct {
	webapi.Server
	refuse error
	asked  []access.WebAction
}

func (a *admitter) WebAdmit(_ *http.Request, act access.WebAction) error {
	a.asked = append(a.asked, act)
	return a.refuse
}

type feed struct {
	st      *webapi.AuditStream
	err     error
	backlog int
}

func (f *feed) Subscribe(_ context.Context, backlog int) (*webapi.AuditStream, error) {
	f.backlog = backlog
	return f.st, f.err
}

// WithAuditFeed admits the caller for the audit stream before the feed
// is read; a refusal stands and the feed is not read; a feed that cannot
// be read is state-unavailable; the backlog asked is bounded.
func TestWithAuditFeed(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/api/audit/stream", nil)
	want := &webapi.AuditStream{Fleet: true}
	srv, f := &admitter{}, &feed{st: want}
	st, err := webapi.WithAuditFeed(srv, f).WebAudit(r, 1<<20)
	if err != nil || st != want || f.backlog != webapi.MaxAuditBacklog || len(srv.asked) != 1 || srv.asked[0] != access.WebAudit {
		t.Fatalf("admitted: %v %v, backlog %d, asked %v", st, err, f.backlog, srv.asked)
	}
	no := refusal.New(refusal.PermissionDenied, "no")
	srv, f = &admitter{refuse: no}, &feed{st: want}
	if _, err := webapi.WithAuditFeed(srv, f).WebAudit(r, 5); !errors.Is(err, no) || f.backlog != 0 {
		t.Fatalf("refused: %v, feed read %v", err, f.backlog != 0)
	}
	srv, f = &admitter{}, &feed{err: errors.New("etcd lost")}
	if _, err := webapi.WithAuditFeed(srv, f).WebAudit(r, 5); refusal.As(err).Code != refusal.StateUnavailable {
		t.Fatalf("feed unreadable: %v", err)
	}
}
