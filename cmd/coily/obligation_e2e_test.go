package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// obligationPolicy allows every echo by a broad rule that comes first; the
// confirm rule after it still binds `echo confirm …`, however written, and
// its own confirm_timeout applies.
const obligationPolicy = `version: 1
local_operators: {users: [nobody]}
roles:
  operator:
    permissions: [exec, approve]
    commands: [echo]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: confirm-echo, binary: /bin/echo, args: [confirm, "**"], sandbox: native, confirm: true, confirm_timeout: 300ms}
`

func TestCLIObligationThroughBroadRule(t *testing.T) {
	requireComponent(t, os.Geteuid() == 0, "root (a local operator)")
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(obligationPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--socket-group", "nogroup")
	if r := p.run(t, "exec", "--", "/bin/echo", "plain"); r.code != 0 || r.stdout != "plain\n" {
		t.Fatalf("plain echo: %+v", r)
	}
	for _, argv := range [][]string{{"/bin/echo", "confirm", "x"}, {"/bin/echo", "-n", "confirm"}, {"/bin/echo", "-e", "--", "confirm"}} {
		// It waits for an approval, then times out by confirm_timeout.
		r := p.run(t, append([]string{"exec", "--"}, argv...)...)
		if r.code != 125 || !strings.Contains(r.stderr, "(confirm-timeout)") || r.stdout != "" {
			t.Fatalf("%q after the obligation's timeout: %+v", argv, r)
		}
		// The approval names the rule whose obligation asks for it, not
		// the broad rule that admits the request.
		if !strings.Contains(r.stderr, `rule "confirm-echo" needs approval`) {
			t.Fatalf("%q: the approval does not name the confirm rule: %s", argv, r.stderr)
		}
	}
}
