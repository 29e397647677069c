package etcdstore

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestOpLabel: a metric's op label is one of a fixed set whatever the
// method's name, so the series stay bounded.
func TestOpLabel(t *testing.T) {
	for method, want := range map[string]string{
		"/etcdserverpb.KV/Range":           "range",
		"/etcdserverpb.KV/Txn":             "txn",
		"/etcdserverpb.KV/Put":             "put",
		"/etcdserverpb.KV/DeleteRange":     "delete",
		"/etcdserverpb.Lease/LeaseGrant":   "lease_grant",
		"/etcdserverpb.Watch/Watch":        "watch",
		"/etcdserverpb.Auth/Authenticate":  "authenticate",
		"/etcdserverpb.Maintenance/Status": "other",
		"/other.KV/Txn":                    "other",
		"Txn":                              "other",
		"":                                 "other",
		"/etcdserverpb.KV/Txn/../Range":    "range", // still one of the set
	} {
		if got := opLabel(method); got != want {
			t.Errorf("opLabel(%q) = %q, want %q", method, got, want)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, OutcomeOK},
		{context.DeadlineExceeded, OutcomeUnavailable},
		{status.Error(codes.Unavailable, "x"), OutcomeUnavailable},
		{status.Error(codes.PermissionDenied, "x"), OutcomeError},
		{errors.New("x"), OutcomeError},
	} {
		if got := outcome(c.err); got != c.want {
			t.Errorf("outcome(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
