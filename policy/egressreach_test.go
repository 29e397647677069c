package policy_test

import (
	"strings"
	"testing"
)

// A host pinned to a guarded address is reached only through an
// allow_cidrs entry that opens its port; policy check says when none does.
func TestEgressUnreachable(t *testing.T) {
	const key = "AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs"
	for _, tc := range []struct {
		name, egress, want string
	}{
		{"no cidr", `{allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}}`,
			`host git.test:8443 is pinned to [127.0.0.1], which no allow_cidrs entry opens on port 8443: the proxy refuses it (add 127.0.0.1/32:8443 to egress.allow_cidrs)`},
		{"cidr, every port", `{allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}, allow_cidrs: [127.0.0.0/8]}`, ""},
		{"cidr, its port", `{allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}, allow_cidrs: ["127.0.0.1/32:8443"]}`, ""},
		{"cidr, its port in a range", `{allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}, allow_cidrs: ["127.0.0.1/32:8000-8999"]}`, ""},
		{"cidr, another port", `{allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}, allow_cidrs: ["127.0.0.1/32:22"]}`, "opens on port 8443"},
		{"cidr, another address", `{allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}, allow_cidrs: ["10.0.0.0/8"]}`, "opens on port 8443"},
		{"default port", `{allow: [git.test], hosts: {git.test: ["::1"]}}`, "add [::1]/128:443 to"},
		{"public address", `{allow: ["git.test:8443"], hosts: {git.test: [8.8.8.8]}}`, ""},
		{"ssh host", `{allow: ["git.test:22"], hosts: {git.test: [127.0.0.1]}, allow_cidrs: ["127.0.0.1/32:22"], ssh_known_hosts: ["[git.test]:2222 ssh-ed25519 ` + key + `"]}`,
			"ssh host git.test:2222 is pinned to [127.0.0.1], which no allow_cidrs entry opens on port 2222"},
		{"observe", `{mode: observe, allow: ["git.test:8443"], hosts: {git.test: [127.0.0.1]}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := parse(t, "reach.yaml", `version: 1
commands:
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    flags: any
    sandbox: bwrap
    network: proxied
    egress: `+tc.egress+"\n")
			var got []string
			for _, w := range p.Warnings() {
				if strings.Contains(w.Msg, "pinned to") {
					got = append(got, w.Msg)
				}
			}
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("warnings %q, want one containing %q", got, tc.want)
			}
		})
	}
}
