package egressproxy

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/sandbox"
)

func rule(t *testing.T, network string) *policy.Rule {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    network: `+network+`
    sandbox: bwrap
    egress:
      allow: ["git.example.com:22"]
      ssh_known_hosts:
        - git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs
`))
	if err != nil {
		t.Fatal(err)
	}
	return p.Rules()[0]
}

// Only a proxied rule has a proxy; it listens where the sandbox binds it,
// with the rule's pinned host keys beside it, and Close removes both and
// reports its rows into a result alone.
func TestProxyPrepareClose(t *testing.T) {
	if New(&policy.Rule{Name: "r", Network: policy.NetworkDeny}, nil, time.Now) != nil {
		t.Fatal("a rule that is not proxied has a proxy")
	}
	scratch := t.TempDir()
	var given []string
	run := &attach.Run{ID: "id", Scratch: scratch, Log: slog.New(slog.DiscardHandler),
		PrivateDir: func() (string, error) { return os.MkdirTemp(scratch, "coily-exec-") },
		Give:       func(p string) error { given = append(given, p); return nil }}
	p := New(rule(t, "proxied"), egress.NewBudget(4), time.Now)
	if err := p.Prepare(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	network, sock, known := "unix", run.Bound(sandbox.ProxySocketPath), run.Bound(sandbox.KnownHostsPath)
	dir, wantGiven := filepath.Dir(sock), 2
	if runtime.GOOS == "darwin" { // no network namespace: a loopback port
		network, sock, dir, wantGiven = "tcp", run.Bound(sandbox.ProxyAddrBind), filepath.Dir(known), 1
	}
	if sock == "" || known == "" || filepath.Dir(known) != dir || len(given) != wantGiven {
		t.Fatalf("binds %v, given %v", run.Binds, given)
	}
	c, err := net.Dial(network, sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	refused := audit.Record{}
	p.Close(context.Background(), &attach.End{Record: &refused})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the proxy's directory outlived Close: %v", err)
	}
	var rec audit.Record
	exit := &coilyv1.ExecExit{}
	p.Close(context.Background(), &attach.End{Record: &rec, Result: true, Exit: exit})
	if rec.Egress != nil || exit.EgressDenied != nil {
		t.Fatalf("a second Close wrote %v %v", rec.Egress, exit.EgressDenied)
	}
}

// The answer repeats at most maxDeniedSentences of the proxy's refusals,
// without their "coily: " prefix.
func TestDeniedSentences(t *testing.T) {
	var rows []egress.Row
	for range maxDeniedSentences + 3 {
		rows = append(rows, egress.Row{Decision: egress.Deny, Message: cmdtext.New(nil, "coily: evil.example:443 is not allowed")})
	}
	rows = append(rows, egress.Row{Decision: egress.Allow, Message: cmdtext.New(nil, "coily: fine")})
	got := deniedSentences(rows)
	if len(got) != maxDeniedSentences || got[0] != "evil.example:443 is not allowed" {
		t.Fatalf("%q", got)
	}
}
