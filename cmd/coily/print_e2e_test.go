package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"coily.dev/coily/audit"

	"coily.dev/coily/internal/visibletest"
)

// The hostile pieces the end-to-end tests send through the real CLI, and
// how the terminal must show them.
const (
	// Moves the cursor up two lines, erases it and forges an approval.
	forgeLine = "\x1b[2A\x1b[2K\rcoily: approved"
	// A bidi override, a C1 CSI and a forged line of its own.
	bidiC1 = "\u202egnp.exe\u009b31m\ncoily: approved"
	// OSC 52 sets the approver's clipboard; OSC 8 hides a link.
	oscReason = "\x1b]52;c;cm0gLXJmIH4K\a\x1b]8;;https://evil.example/\x1b\\ok\x1b]8;;\x1b\\"

	// A reason for a lockout: what protojson leaves raw (bidi, C1) too.
	stopReason = oscReason + "\u2066\u0085"

	forgeLineArg   = `$'\x1b[2A\x1b[2K\rcoily: approved'`
	bidiC1Arg      = `$'\u202egnp.exe\u009b31m\ncoily: approved'`
	forgeLineText  = `\x1b[2A\x1b[2K\rcoily: approved`
	oscReasonText  = `\x1b]52;c;cm0gLXJmIH4K\a\x1b]8;;https://evil.example/\x1b\ok\x1b]8;;\x1b\`
	stopReasonText = oscReasonText + `\u2066\u0085`
)

// requireTerminalSafe fails unless out is lines of graphic text, each
// ending in a newline, and has want lines (want < 0: any number).
func requireTerminalSafe(t *testing.T, what, out string, want int) {
	t.Helper()
	if out != "" && !strings.HasSuffix(out, "\n") {
		t.Fatalf("%s: output does not end in a newline: %q", what, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want >= 0 && len(lines) != want {
		t.Fatalf("%s: %d lines, want %d:\n%s", what, len(lines), want, out)
	}
	for _, l := range lines {
		visibletest.CheckVisible(t, l)
	}
}

// TestCLIAuditPrintsHostileRecordsEscaped writes records carrying escape
// sequences with the real audit writer and reads them back with `coily
// audit tail` and `coily audit show` (human and --json).
func TestCLIAuditPrintsHostileRecordsEscaped(t *testing.T) {
	dir := t.TempDir()
	log, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	hostile := audit.Record{Event: "exec", RequestID: "R-hostile", Principal: "tag:agent" + forgeLine, Transport: "tailnet",
		Argv: []string{"/bin/echo", forgeLine, bidiC1, "two words"}, Decision: "refuse", Code: "policy-deny", Reason: oscReason}
	rec, err := log.Append(context.Background(), hostile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(context.Background(), audit.Record{Event: "lockout", Peer: "evil\u202e\u2066host\r", Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	log.Close()

	r := runCoily(t, nil, "audit", "tail", "--state-dir", dir)
	if r.code != 0 {
		t.Fatalf("audit tail: %+v", r)
	}
	requireTerminalSafe(t, "audit tail", r.stdout, 2)
	for _, want := range []string{"/bin/echo " + forgeLineArg + " " + bidiC1Arg + " 'two words'", "(" + oscReasonText + ")",
		"tag:agent" + forgeLineText, `evil\u202e\u2066host\r`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("audit tail does not show %s:\n%s", want, r.stdout)
		}
	}

	r = runCoily(t, nil, "audit", "show", "--state-dir", dir, rec.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "/bin/echo "+forgeLineArg+" "+bidiC1Arg+" 'two words'") ||
		!strings.Contains(r.stdout, "("+oscReasonText+")") {
		t.Fatalf("audit show: %+v", r)
	}
	requireTerminalSafe(t, "audit show", r.stdout, -1)

	for _, args := range [][]string{{"tail", "--json"}, {"show", "--json", rec.ID}, {"show", "--json", "R-hostile"}} {
		r := runCoily(t, nil, append([]string{"audit", args[0], "--state-dir", dir}, args[1:]...)...)
		if r.code != 0 {
			t.Fatalf("audit %v: %+v", args, r)
		}
		requireTerminalSafe(t, "audit "+strings.Join(args, " "), r.stdout, -1)
		var got audit.Record
		if err := json.Unmarshal([]byte(strings.SplitN(r.stdout, "\n", 2)[0]), &got); err != nil {
			t.Fatalf("audit %v: %v\n%s", args, err, r.stdout)
		}
		if !reflect.DeepEqual(got.Argv, hostile.Argv) || got.Reason != hostile.Reason || got.Principal != hostile.Principal {
			t.Fatalf("audit %v: JSON decodes to argv %q reason %q principal %q, not what was logged", args, got.Argv, got.Reason, got.Principal)
		}
	}
}

// TestCLIRefusalsAndStatusPrintEscaped sends escape sequences to a real
// server as an argv and a lockout reason: the refusal, `status`, `status
// --json`, `audit tail` and `policy explain` show them escaped.
func TestCLIRefusalsAndStatusPrintEscaped(t *testing.T) {
	dir := shortDir(t)
	p := startServe(t, dir, examplePolicy(t))

	// The server's refusal repeats argv[0]: one line, escaped.
	r := p.run(t, "exec", "--", "/no/such"+forgeLine+bidiC1, "arg")
	if r.code != 125 || !strings.HasPrefix(r.stderr, "coily: refused (policy-deny): ") ||
		!strings.Contains(r.stderr, "/no/such"+forgeLineText+`\u202egnp.exe\u009b31m\ncoily: approved`) {
		t.Fatalf("exec refusal: %+v", r)
	}
	requireTerminalSafe(t, "exec refusal", r.stderr, 1)

	if r := p.run(t, "lockout", "--reason", stopReason); r.code != 0 {
		t.Fatalf("lockout: %+v", r)
	}
	r = p.run(t, "status")
	if r.code != 0 || !strings.Contains(r.stdout, "("+stopReasonText+")") {
		t.Fatalf("status: %+v", r)
	}
	requireTerminalSafe(t, "status", r.stdout, -1)
	r = p.run(t, "status", "--json")
	if r.code != 0 {
		t.Fatalf("status --json: %+v", r)
	}
	requireTerminalSafe(t, "status --json", r.stdout, -1)
	var st struct {
		Lockout struct{ Reason string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Lockout.Reason != stopReason {
		t.Fatalf("status --json decodes to reason %q (%v), want %q:\n%s", st.Lockout.Reason, err, stopReason, r.stdout)
	}
	if r := p.run(t, "unlock"); r.code != 0 {
		t.Fatalf("unlock: %+v", r)
	}

	r = runCoily(t, nil, "audit", "tail", "--state-dir", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "$'/no/such"+forgeLineText+`\u202egnp.exe\u009b31m\ncoily: approved' arg`) ||
		!strings.Contains(r.stdout, stopReasonText) {
		t.Fatalf("audit tail: %+v", r)
	}
	requireTerminalSafe(t, "audit tail", r.stdout, -1)

	r = runCoily(t, nil, "policy", "explain", "--policy", examplePolicy(t), "--as", "tag:x"+forgeLine, "--", "/no/such"+bidiC1)
	if r.code != 1 || !strings.Contains(r.stdout, "principal: tag:x"+forgeLineText) ||
		!strings.Contains(r.stdout, `/no/such\u202egnp.exe\u009b31m\ncoily: approved`) {
		t.Fatalf("policy explain: %+v", r)
	}
	requireTerminalSafe(t, "policy explain", r.stdout, -1)
}

// TestCLIApprovalsPrintEscaped puts escape sequences in a pending
// request's argv and in an approver's note: `approvals list` and the
// requester's refusal show them escaped.
func TestCLIApprovalsPrintEscaped(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (to run the approver as another uid)")
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(approvalPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--socket-group", "nogroup")

	id, done := pendingExec(t, p, "/bin/echo", forgeLine, bidiC1)
	r := p.run(t, "approvals", "list")
	if r.code != 0 || !strings.Contains(r.stdout, `wants rule "confirm-echo": /bin/echo `+forgeLineArg+" "+bidiC1Arg) {
		t.Fatalf("approvals list: %+v", r)
	}
	requireTerminalSafe(t, "approvals list", r.stdout, 1)

	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	r = runCoily(t, nobody, "--socket", p.socket, "approvals", "deny", id, "--note", oscReason)
	if r.code != 0 {
		t.Fatalf("deny: %+v", r)
	}
	requireTerminalSafe(t, "approvals deny", r.stdout, 1)
	r = waitRun(t, done)
	if r.code != 125 || !strings.Contains(r.stderr, "(confirm-rejected): approval "+id+" denied by local:nobody: "+oscReasonText) {
		t.Fatalf("requester after a hostile denial note: %+v", r)
	}
	requireTerminalSafe(t, "requester", r.stderr, 1)
}
