package cli

import (
	"strings"
	"testing"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// An approval's listing shows the rest of what will run under its line,
// escaped: a hostile working directory, environment value or standard
// input cannot forge lines or move the cursor.
func TestPrintApprovalShowsWhatWillRun(t *testing.T) {
	var b strings.Builder
	printApproval(&b, &coilyv1.Approval{Id: "a1", Requester: "tag:agent", Rule: "kubectl-apply",
		Argv: []string{"kubectl", "apply", "-f", "-"}, State: coilyv1.ApprovalState_APPROVAL_STATE_PENDING,
		Cwd: "other\ncheckout", Env: map[string]string{"B": "2", "A": "\x1b[2J"},
		StdinBytes: 900, StdinSha256: "ab12", StdinHead: []byte("kind: Secret\n\x1b]0;owned\x07")})
	out := b.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || strings.ContainsAny(out, "\x1b\x07") {
		t.Fatalf("listing:\n%s", out)
	}
	for _, want := range []string{`    in other\ncheckout`, `    env $'A=\x1b[2J' B=2`, `    stdin 900 bytes, sha256 ab12: kind: Secret\n\x1b]0;owned\a…`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
