package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/storetest"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// With its shared state out of reach, the server refuses an Exec whose
// rule takes a rate token with state-unavailable (gRPC UNAVAILABLE), audits
// the refusal, and runs nothing; a lockout is in force all the same, and an
// unlock changes nothing until the state is back.
func TestSharedStateUnavailable(t *testing.T) {
	pol := `version: 1
roles: {operator: {permissions: [exec, lockout, unlock, status], commands: [sh]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, rate: {per_minute: 10}}
`
	shared := &storetest.Unreachable{}
	in := testserver.Start(t, testserver.Options{Policy: pol, Shared: func(db *store.DB) store.Shared {
		shared.Shared = db
		return shared
	}})
	in.Client.RateLimitRetries = 0
	ran := filepath.Join(in.StateDir, "ran")
	shared.Down.Store(true)

	r := execArgv(t, in, "/bin/sh", "-c", "touch "+ran)
	wantCode(t, r.err, refusal.StateUnavailable)
	if re := refusal.As(r.err); re.AuditID == "" || re.Code.GRPCCode() != codes.Unavailable {
		t.Fatalf("refusal %+v: want an audit id and UNAVAILABLE", re)
	}
	in.WaitAudit(t, func(rec audit.Record) bool {
		return rec.Decision == "refuse" && rec.Code == string(refusal.StateUnavailable) && rec.Rule == "sh"
	})
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the command ran: %v", err)
	}

	ctx := context.Background()
	_, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "incident"})
	if status.Code(err) != codes.Unavailable || refusal.FromStatus(err).Code != refusal.StateUnavailable {
		t.Fatalf("Lockout with the state out of reach: %v, want state-unavailable", err)
	}
	_, err = in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "too soon"})
	if refusal.FromStatus(err).Code != refusal.StateUnavailable {
		t.Fatalf("Unlock with the state out of reach: %v, want state-unavailable", err)
	}
	if st, err := in.Client.API.Status(ctx, &coilyv1.StatusRequest{}); err != nil || !st.GetLockout().GetActive() {
		t.Fatalf("after a refused unlock: %v %v, want still locked out", st, err)
	}

	shared.Down.Store(false)
	if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "back"}); err != nil {
		t.Fatalf("Unlock with the state back: %v", err)
	}
	if r := execArgv(t, in, "/bin/sh", "-c", "touch "+ran); r.err != nil {
		t.Fatalf("Exec with the state back: %v", r.err)
	}
}
