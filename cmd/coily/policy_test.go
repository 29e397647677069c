package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPolicyCheckEgress(t *testing.T) {
	for _, c := range []struct {
		name, rule string
		want       []string // lines of stdout, after the file name and line
		notWant    []string
	}{
		{
			name:    "preset and mirror",
			rule:    "network: proxied\n    egress:\n      presets: [npm]\n      registries: {npm: \"https://mirror.example.com/npm/\"}",
			want:    []string{`rule "r" egress enforce: allow mirror.example.com:443`},
			notWant: []string{"registry.npmjs.org", "warning"},
		},
		{
			name: "github preset with own entries",
			rule: "network: proxied\n    egress:\n      allow: [\"*.Corp.example.com\"]\n      presets: [github]\n      allow_cidrs: [10.0.0.0/8]",
			want: []string{`rule "r" egress enforce: allow *.corp.example.com (443 by CONNECT, 80 by plain HTTP)`, `rule "r" egress enforce: allow github.com:22`,
				`rule "r" egress enforce: allow *.githubusercontent.com:443`, `rule "r" egress enforce: allow_cidr 10.0.0.0/8`},
			notWant: []string{"warning"},
		},
		{
			name: "pinned ssh host keys",
			rule: "network: proxied\n    egress:\n      allow: [\"github.com:22\"]\n      allow_cidrs: [10.0.0.0/8]\n      ssh_known_hosts:\n" +
				"        - \"GitHub.com,[10.1.2.3]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs\"\n" +
				"        - \"[git.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs\"",
			want: []string{`rule "r" egress enforce: ssh_known_hosts github.com,[10.1.2.3]:2222 ssh-ed25519 SHA256:hqvtsyY+9zLXCmFN1eJY3Rya8nzGse7iriFkbnGQC78`,
				`rule "r" egress enforce: ssh_known_hosts [git.example.com]:2222 ssh-ed25519 SHA256:hqvtsyY+9zLXCmFN1eJY3Rya8nzGse7iriFkbnGQC78`,
				`warning: rule "r" pins an ssh host key for [git.example.com]:2222, which its egress allowlist does not reach (add git.example.com:2222 to egress.allow`},
			notWant: []string{"for github.com,", "for [10.1.2.3]", "has no allowlist"},
		},
		{
			name: "pinned ssh host keys without an allowlist",
			rule: "network: proxied\n    egress:\n      ssh_known_hosts: [\"github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs\"]",
			want: []string{`warning: rule "r" needs the network but has no allowlist`, `warning: rule "r" pins an ssh host key for github.com,`},
		},
		{
			name: "proxied without egress",
			rule: "network: proxied",
			want: []string{`warning: rule "r" needs the network but has no allowlist`},
		},
		{
			name: "proxied with an empty enforced egress",
			rule: "network: proxied\n    egress:\n      mode: enforce",
			want: []string{`warning: rule "r" needs the network but has no allowlist`},
		},
		{
			name:    "observe without allowlist",
			rule:    "network: proxied\n    egress:\n      mode: observe",
			want:    []string{`rule "r" egress observe: any host is allowed and recorded`},
			notWant: []string{"warning"},
		},
		{
			name:    "git credentials in the allowlist",
			rule:    "network: proxied\n    egress: {allow: [\"git.example.com:8443\"]}\n    git_credentials: [{host: \"git.example.com:8443\", password: \"file:git\"}]",
			want:    []string{`rule "r" git_credentials: git gets user x-access-token and file:git for https://git.example.com:8443, from coily's credential helper only`},
			notWant: []string{"warning"},
		},
		{
			name: "git credentials outside the allowlist",
			rule: "network: proxied\n    egress: {allow: [git.example.com]}\n    git_credentials: [{host: \"git.example.com:8443\", password: \"file:git\"}]",
			want: []string{`warning: rule "r" has git_credentials for git.example.com:8443, which its egress allowlist does not allow: git cannot reach it (add git.example.com:8443 to egress.allow)`},
		},
		{
			name: "ssh keys",
			rule: "network: proxied\n    egress:\n      allow: [\"github.com:22\"]\n      ssh_known_hosts:\n" +
				"        - \"github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs\"\n" +
				"    ssh_keys: [{key: \"vault:secret/coily/deploy#private_key\", hosts: [github.com]}]",
			want:    []string{`rule "r" ssh_keys: ssh gets vault:secret/coily/deploy#private_key through coily's agent, which signs only for github.com (host keys SHA256:hqvtsyY+9zLXCmFN1eJY3Rya8nzGse7iriFkbnGQC78); the key never enters the sandbox`},
			notWant: []string{"warning"},
		},
		{
			name:    "no network",
			rule:    "network: deny",
			notWant: []string{"egress", "warning"},
		},
		{
			name:    "open network",
			rule:    "network: open",
			notWant: []string{"egress", "warning"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.yaml")
			doc := "version: 1\ncommands:\n  - name: r\n    binary: /bin/true\n    " + c.rule + "\n"
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := policyCheck(&env{args: []string{path}, stdout: &out, stderr: &errb}, path, false); code != 0 {
				t.Fatalf("policy check = %d, stderr %q", code, errb.String())
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				lines = append(lines, strings.TrimPrefix(l, path+":3: "))
			}
			for _, w := range c.want {
				if !slices.Contains(lines, w) && !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
					t.Errorf("no line %q in\n%s", w, out.String())
				}
			}
			for _, n := range c.notWant {
				if strings.Contains(out.String(), n) {
					t.Errorf("output mentions %q:\n%s", n, out.String())
				}
			}
			if !strings.Contains(lines[len(lines)-1], ": OK: 1 rules") {
				t.Errorf("last line %q is not the OK line", lines[len(lines)-1])
			}
		})
	}
}
