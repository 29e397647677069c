package server

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// A control action that could not be persisted keeps its own details in
// its audit record, and one that did not happen at all (a key the store
// could not keep) is recorded as refused, never as allowed.
func TestFailedControlRecords(t *testing.T) {
	s := newUnitServer(t, matrixPolicy)
	c := access.Caller{Principal: "local:root", Transport: access.TransportLocal, Roles: []string{"operator"}}
	ctx := access.WithCall(context.Background(), c, s.Policy())
	if err := s.cfg.Local.(*store.DB).Close(); err != nil { // every later store call fails
		t.Fatal(err)
	}
	_, err := s.IssueKey(ctx, &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if refusal.As(err).Code != refusal.Internal || refusal.As(err).AuditID == "" {
		t.Fatalf("IssueKey on a closed store: %v", err)
	}
	_, err = s.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "disk gone"})
	if refusal.As(err).Code != refusal.Internal {
		t.Fatalf("Lockout on a closed store: %v", err)
	}
	recs, err := audit.Tail(filepath.Join(filepath.Dir(s.cfg.Local.Path()), "audit"), 10)
	if err != nil {
		t.Fatal(err)
	}
	var key, lock *audit.Record
	for i := range recs {
		switch recs[i].Event {
		case "key.issue":
			key = &recs[i]
		case "lockout":
			lock = &recs[i]
		}
	}
	if key == nil || key.Decision != "refuse" || key.Code != string(refusal.Internal) || !slices.Equal(key.Lists["sandboxes"], []string{"demo"}) || key.Details["error"] == "" {
		t.Fatalf("key.issue record %+v", key)
	}
	if lock == nil || lock.Decision != "allow" || lock.Details["error"] == "" || lock.Details["keys_error"] == "" {
		t.Fatalf("lockout record lost its details: %+v", lock)
	}
}
