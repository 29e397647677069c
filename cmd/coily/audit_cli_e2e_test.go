package main

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
)

// writeAuditLog writes recs to a new log in DIR/audit and returns DIR,
// the log (open, for more) and the records as written.
func writeAuditLog(t *testing.T, recs ...audit.Record) (string, *audit.Log, []audit.Record) {
	t.Helper()
	dir := t.TempDir()
	l, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit"), MaxFileSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var out []audit.Record
	for _, r := range recs {
		w, err := l.Append(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return dir, l, out
}

const (
	showRequest  = "9f0c0c1e-2f4b-4b8e-9b57-2b9f0e7f4a11"
	showApproval = "5b1d8a4e-33c2-4f0e-8d7a-0c6f5e2a9b10"
)

var approvedRequest = []audit.Record{
	{Event: "exec.decision", RequestID: "another", Principal: "tag:agent", Rule: "gh", Decision: "allow"},
	{Event: "approval.request", RequestID: showRequest, Principal: "tag:agent", Rule: "push", Details: map[string]string{"approval_id": showApproval}},
	{Event: "approval.decide", RequestID: showRequest, Principal: "tag:owner", Decision: "allow", Details: map[string]string{"approval_id": showApproval}},
	{Event: "exec.decision", RequestID: showRequest, Principal: "tag:agent", Rule: "push", Decision: "allow", Details: map[string]string{"approval_id": showApproval, "approved_by": "tag:owner"}},
	{Event: "exec.result", RequestID: showRequest, Principal: "tag:agent", Rule: "push", Decision: "allow", Details: map[string]string{"approval_id": showApproval, "approved_by": "tag:owner"}},
}

// TestCLIAuditShowIDs: `audit show` takes the approval id, the request
// id or an audit id; an id no record can carry is a usage error (2) that
// prints none of its control characters, before the log is read.
func TestCLIAuditShowIDs(t *testing.T) {
	dir, _, recs := writeAuditLog(t, approvedRequest...)
	request := []string{"approval.request", "approval.decide", "exec.decision", "exec.result"}
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{showApproval, request},
		{showRequest, request},
		{recs[2].ID, []string{"approval.decide"}},
	} {
		r := runCoily(t, nil, "audit", "show", "--state-dir", dir, tc.id)
		if r.code != 0 || strings.Contains(r.stdout, "another") {
			t.Fatalf("audit show %s: %+v", tc.id, r)
		}
		var got []string
		for _, l := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(l); len(f) > 3 && strings.HasPrefix(f[0], "A0") {
				got = append(got, f[3])
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("audit show %s: events %v, want %v:\n%s", tc.id, got, tc.want, r.stdout)
		}
	}
	if r := runCoily(t, nil, "audit", "show", "--state-dir", dir, "A000000000999"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("an id of nothing: %+v", r)
	}
	for _, id := range []string{"", strings.Repeat("a", audit.MaxLookupID+1), "A0\x1b[31m1", "req\nA000000000001 forged", "*", "A00000000000?",
		"[a-z]*", "../audit", "\u202eid"} {
		r := runCoily(t, nil, "audit", "show", "--state-dir", dir, id)
		if r.code != 2 || !strings.Contains(r.stderr, "not an audit, request or approval id") || r.stdout != "" {
			t.Errorf("audit show %q: %+v", id, r)
		}
		if strings.ContainsAny(r.stderr, "\x1b\u202e") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("audit show %q: the refusal prints the id raw: %q", id, r.stderr)
		}
	}
}

// TestCLIAuditTailFilters: --principal, --rule and --code combine with
// AND, -n counts the records that pass, and --json prints them as stored.
func TestCLIAuditTailFilters(t *testing.T) {
	dir, _, _ := writeAuditLog(t,
		audit.Record{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "refuse", Code: "policy-deny", Argv: []string{"gh", "one"}},
		audit.Record{Event: "exec.decision", Principal: "tag:agent", Rule: "git", Decision: "refuse", Code: "policy-deny", Argv: []string{"git", "two"}},
		audit.Record{Event: "exec.decision", Principal: "tag:owner", Rule: "gh", Decision: "refuse", Code: "policy-deny", Argv: []string{"gh", "three"}},
		audit.Record{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "allow", Argv: []string{"gh", "four"}},
		audit.Record{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "refuse", Code: "policy-deny", Argv: []string{"gh", "five"}},
	)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--principal", "tag:agent", "--rule", "gh", "--code", "policy-deny"}, "one five"},
		{[]string{"--principal", "tag:agent", "--rule", "gh", "--code", "policy-deny", "-n", "1"}, "five"},
		{[]string{"--rule", "gh"}, "one three four five"},
		{[]string{"--code", "policy-deny", "--principal", "tag:owner"}, "three"},
		{[]string{"--code", "rate-limit"}, ""},
		{[]string{"-n", "2"}, "four five"},
	} {
		for _, asJSON := range []bool{false, true} {
			args := append([]string{"audit", "tail", "--state-dir", dir}, tc.args...)
			if asJSON {
				args = append(args, "--json")
			}
			r := runCoily(t, nil, args...)
			var got []string
			for _, w := range []string{"one", "two", "three", "four", "five"} {
				if strings.Contains(r.stdout, `"`+w+`"`) || strings.Contains(r.stdout, "gh "+w) || strings.Contains(r.stdout, "git "+w) {
					got = append(got, w)
				}
			}
			if r.code != 0 || strings.Join(got, " ") != tc.want {
				t.Errorf("audit tail %v (json %v): %v, want %q: %+v", tc.args, asJSON, got, tc.want, r)
			}
		}
	}
}

// TestCLIAuditTailFollow: --follow prints the records that pass the
// filters as they are written, across new files, and exits 0 on SIGINT.
func TestCLIAuditTailFollow(t *testing.T) {
	dir, l, _ := writeAuditLog(t, audit.Record{Event: "exec.decision", Principal: "tag:agent", Rule: "gh", Decision: "allow", Argv: []string{"gh", "before"}})
	cmd := exec.Command(coilyBin, "audit", "tail", "--state-dir", dir, "--follow", "--principal", "tag:agent", "--rule", "gh")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before %s", what)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("no line for %s", what)
		}
		return ""
	}
	if l := next("the tail"); !strings.Contains(l, "gh before") {
		t.Fatalf("tail: %q", l)
	}
	for i := range 40 { // 2 KiB files: several new ones
		p := "tag:agent"
		if i%2 == 1 {
			p = "tag:other"
		}
		if _, err := l.Append(context.Background(), audit.Record{Event: "exec.decision", Principal: p, Rule: "gh", Decision: "allow",
			Argv: []string{"gh", "after", strings.Repeat("x", 100), string(rune('a' + i%26))}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i += 2 {
		if l := next("a followed record"); !strings.Contains(l, "tag:agent") || !strings.HasSuffix(l, " "+string(rune('a'+i%26))) {
			t.Fatalf("record %d followed as %q", i, l)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl")); len(files) < 3 {
		t.Fatalf("the log did not roll over (%d files): the test proves nothing", len(files))
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines { // a record of another principal would be printed before the end
		t.Fatal("a record the filter refuses was printed")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("audit tail --follow after SIGINT: %v", err)
	}
}
