package server_test

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/policycase"
	"coily.dev/coily/policyfile"
	"coily.dev/coily/refusal"
)

// A policy whose tests (the file beside it) fail is refused like an
// invalid one: the last good policy stays in force, the refusal is
// audited naming the failing case; once the tests are fixed, the same
// policy applies.
func TestPolicyReloadRefusedByItsTests(t *testing.T) {
	in := testserver.Start(t, testserver.Options{WatchPolicy: true})
	if r := execArgv(t, in, "/bin/echo", "before"); r.err != nil {
		t.Fatal(r.err)
	}
	tests := policycase.BesidePath(in.PolicyPath)
	const echoAllowed = "version: 1\ncases:\n  - {name: operator echoes, principal: local:x, argv: [/bin/echo, hi], expect: allow, rule: echo}\n"
	writeAtomically(t, tests, echoAllowed)
	noEcho := strings.Replace(testserver.LocalPolicy, "commands: [echo, ", "commands: [", 1)
	writeAtomically(t, in.PolicyPath, noEcho)
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == policyfile.EventReload && r.Decision == "refuse" })
	want := `policy.tests.yaml:3:5: case "operator echoes": expected allow by rule "echo", got deny`
	if !strings.Contains(rec.Reason, want) || rec.Code != string(refusal.BadRequest) {
		t.Fatalf("reload refusal = %s %q, want %q", rec.Code, rec.Reason, want)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256([]byte(echoAllowed))); rec.Details["tests_sha256"] != sum {
		t.Errorf("refusal details %v, want tests_sha256 %s", rec.Details, sum)
	}
	if r := execArgv(t, in, "/bin/echo", "still"); r.err != nil {
		t.Fatalf("last good policy not in force: %v", r.err)
	}
	// The tests fixed: the policy waiting beside them applies.
	writeAtomically(t, tests, strings.Replace(echoAllowed, "expect: allow, rule: echo", "expect: deny", 1))
	rec = in.WaitAudit(t, func(r audit.Record) bool { return r.Event == policyfile.EventReload && r.Decision == "allow" })
	if rec.Details["tests_sha256"] == "" {
		t.Errorf("applied reload details %v lack tests_sha256", rec.Details)
	}
	testserver.Poll(t, 10*time.Second, "the policy to apply once its tests pass", func() bool {
		r := execArgv(t, in, "/bin/echo", "after")
		return r.err != nil && refusal.As(r.err).Code == refusal.PolicyDeny
	})
	// A tests file that is not valid refuses the reload too.
	writeAtomically(t, tests, "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: deny, cwd: /}\n")
	writeAtomically(t, in.PolicyPath, testserver.LocalPolicy)
	rec = in.WaitAudit(t, func(r audit.Record) bool {
		return r.Event == policyfile.EventReload && r.Decision == "refuse" && strings.Contains(r.Reason, `unknown key "cwd"`)
	})
	if !strings.Contains(rec.Reason, "policy.tests.yaml:3:") {
		t.Errorf("refusal %q does not name the tests file's line", rec.Reason)
	}
	wantCode(t, execArgv(t, in, "/bin/echo", "refused").err, refusal.PolicyDeny)
}
