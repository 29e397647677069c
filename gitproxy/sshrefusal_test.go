package gitproxy

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

var sshRemote = &policy.GitRemote{Name: "box", Host: "git.test", Port: 22, SSH: &policy.GitSSH{User: "git",
	KnownHosts: []policy.KnownHost{{Fingerprint: "SHA256:h2zQuQfmJ7dmhIPoKbISxU+jAIj5VOLlmA30kGQ0k8I"}}}}

const fp = "SHA256:LjCqmEGNc5PLyM329u2rr2IB/bQSa2FlRDYskF3jxdQ"

// sshRefusalCases are what ssh (or an upstream) may write when git fails,
// and the refusal read from it ("" for none).
var sshRefusalCases = []struct{ name, stderr, want string }{
	{"changed key", "@@@@\r\nThe fingerprint for the ED25519 key sent by the remote host is\n" + fp + ".\r\nHost key verification failed.\r\nfatal: Could not read from remote repository.",
		`upstream git.test showed host key ` + fp + `, which git remote "box" does not pin`},
	{"no key of the type", "Unable to negotiate with 10.1.2.3 port 22: no matching host key type found. Their offer: ssh-ed25519\r\nfatal: Could not read",
		`upstream git.test showed no host key git remote "box" pins`},
	{"unknown host", "No ED25519 host key is known for git.test and you have requested strict checking.\r\nHost key verification failed.",
		`upstream git.test showed no host key git remote "box" pins`},
	{"auth failed", "git@git.test: Permission denied (publickey).\r\nfatal: Could not read from remote repository.", ""},
	{"short fingerprint", "key sent by the remote host is\nSHA256:abc\nHost key verification failed.", `showed no host key`},
	{"fingerprint with a newline", "key sent by the remote host is SHA256:LjCqmEGNc5PLyM329u2rr2IB/bQSa2Fl\nRDYskF3jxdQ\nHost key verification failed.", `showed no host key`},
	{"escape in fingerprint", "key sent by the remote host is SHA256:\x1b[31mLjCqmEGNc5PLyM329u2rr2IB/bQSa2FlRDYskF3jxdQ\nHost key verification failed.", `showed no host key`},
	{"long fingerprint", "key sent by the remote host is\n" + fp + "AAAA.\nHost key verification failed.", `showed no host key`},
	{"empty", "", ""},
}

func TestSSHRefusal(t *testing.T) {
	for _, c := range sshRefusalCases {
		t.Run(c.name, func(t *testing.T) {
			err := sshRefusal(sshRemote, &gitError{args: []string{"fetch"}, err: errors.New("exit status 128"), stderr: c.stderr})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refusal %v, want none", err)
			case c.want != "" && (err == nil || !strings.Contains(refusal.As(err).Msg, c.want) || refusal.As(err).Code != refusal.PolicyDeny):
				t.Fatalf("refusal %v, want %q", err, c.want)
			}
		})
	}
	if err := sshRefusal(&policy.GitRemote{Name: "app", Host: "git.test", Port: 443}, &gitError{args: []string{"x"}, stderr: "Host key verification failed."}); err != nil {
		t.Errorf("an https remote's failure read as ssh's: %v", err)
	}
	if err := sshRefusal(sshRemote, errors.New("Host key verification failed.")); err != nil {
		t.Errorf("an error that is no git's read as ssh's: %v", err)
	}
}

// A refusal read from ssh's words is one printable line, and names no
// fingerprint but a well-formed one.
func FuzzSSHRefusal(f *testing.F) {
	for _, c := range sshRefusalCases {
		f.Add(c.stderr)
	}
	named := regexp.MustCompile(`showed host key (\S+),`)
	f.Fuzz(func(t *testing.T, stderr string) {
		err := sshRefusal(sshRemote, &gitError{args: []string{"fetch"}, err: errors.New("exit status 128"), stderr: stderr})
		if err == nil {
			return
		}
		msg := refusal.As(err).Msg
		if strings.ContainsAny(msg, "\r\n\x1b") {
			t.Fatalf("refusal %q is not one printable line", msg)
		}
		if m := named.FindStringSubmatch(msg); m != nil && !regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}$`).MatchString(m[1]) {
			t.Fatalf("refusal names %q", m[1])
		}
	})
}
