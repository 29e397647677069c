package policy_test

import (
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/policy"
)

// Keys made with ssh-keygen for these tests.
const (
	edKey    = "AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs"
	edFinger = "SHA256:hqvtsyY+9zLXCmFN1eJY3Rya8nzGse7iriFkbnGQC78"
	ecKey    = "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBKehW5417I4gZ6MIsC1Ur5sstNoQumMOk8lnFS0zk6RCmjvGdjdnkMX+Fq6pdxeGpyCGc18oGiEMnB653jOTM20="
	rsaKey   = "AAAAB3NzaC1yc2EAAAADAQABAAABgQDsi+36H639aiHO12NOml0BWkSEWLIaX4SfPUmKlKifmu+tafz4SlRQIMfQL1o4v1g87lVOQU4KPKNefbuWiamtjREC7ekrAnKEYXTqZasrMsJjNNwedVwHUdK2mDzmvIUBZqkHKifZZHDYFoNVIFcYm1ViZt48R5j90TMJ5YrOHUuD/kHFivO+0V9himOpI0OtAhnPD8l9ktYCkfgX+ImceF1AxdkxDiPpliez0fGASDH5RvNporlgZp2fWl1iGY+praImE0yY33b9/xET1TnrwD6MVpABJCgntRahZDmX4EXvnGhB2RsbfvYJC2lK33ucV/2F84vcv7kP52oaKerGiL0cqT5mMvoFe8HdDOcGm/QURY485BhINE2N1f1b0zSq9d1ZzH4maHAKNPV2Dnrzae+6MjWLeJgcoP9S7LvjwOjjAlLfCXAcynxF6yPcjLNOuM6v96uLtH9lk1nenmdfV0aLDpsa3baitrQsLRBHvzJkoW9TfK57M7mzxIgdLck="
)

// knownHostCases are ssh_known_hosts lines, good and hostile: want is the
// line as coily writes it, or err part of the error.
var knownHostCases = []struct {
	in, want string
	hosts    []policy.SSHHost
	err      string
}{
	{in: "github.com ssh-ed25519 " + edKey, want: "github.com ssh-ed25519 " + edKey, hosts: []policy.SSHHost{{Host: "github.com", Port: 22}}},
	{in: "  GitHub.COM   ssh-ed25519   " + edKey + "  ", want: "github.com ssh-ed25519 " + edKey, hosts: []policy.SSHHost{{Host: "github.com", Port: 22}}},
	{in: "[git.example.com]:2222,140.82.112.3,::1,[::1]:2200,[10.0.0.1]:7999 ecdsa-sha2-nistp256 " + ecKey,
		want: "[git.example.com]:2222,140.82.112.3,::1,[::1]:2200,[10.0.0.1]:7999 ecdsa-sha2-nistp256 " + ecKey,
		hosts: []policy.SSHHost{{Host: "git.example.com", Port: 2222}, {Host: "140.82.112.3", Port: 22}, {Host: "::1", Port: 22},
			{Host: "::1", Port: 2200}, {Host: "10.0.0.1", Port: 7999}}},
	{in: "localhost ssh-rsa " + rsaKey, want: "localhost ssh-rsa " + rsaKey, hosts: []policy.SSHHost{{Host: "localhost", Port: 22}}},
	{in: "", err: "empty line"},
	{in: "   ", err: "empty line"},
	{in: "# github.com ssh-ed25519 " + edKey, err: "comment"},
	{in: "@cert-authority *.example.com ssh-ed25519 " + edKey, err: "marker"},
	{in: "@revoked github.com ssh-ed25519 " + edKey, err: "marker"},
	{in: "github.com ssh-ed25519", err: "fields"},
	{in: "github.com", err: "fields"},
	{in: "github.com ssh-ed25519 " + edKey + " me@laptop", err: "fields"},
	{in: "github.com\tssh-ed25519 " + edKey, err: "printable ASCII"},
	{in: "github.com ssh-ed25519 " + edKey + "\n[evil.example]:22 ssh-ed25519 " + edKey, err: "printable ASCII"},
	{in: "github.com ssh-ed25519 " + edKey + "\r", err: "printable ASCII"},
	{in: "github.com\x00 ssh-ed25519 " + edKey, err: "printable ASCII"},
	{in: "gíthub.com ssh-ed25519 " + edKey, err: "printable ASCII"},
	{in: "|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= ssh-ed25519 " + edKey, err: "hashed"},
	{in: "*.github.com ssh-ed25519 " + edKey, err: "patterns"},
	{in: "github.?om ssh-ed25519 " + edKey, err: "patterns"},
	{in: "!evil.example,github.com ssh-ed25519 " + edKey, err: "patterns"},
	{in: "github.com,,gitlab.com ssh-ed25519 " + edKey, err: "empty host"},
	{in: "github.com, ssh-ed25519 " + edKey, err: "empty host"},
	{in: "github.com,GITHUB.com ssh-ed25519 " + edKey, err: "twice"},
	{in: "[github.com]:22 ssh-ed25519 " + edKey, err: "without brackets"},
	{in: "[github.com] ssh-ed25519 " + edKey, err: "[HOST]:PORT"},
	{in: "[github.com]: ssh-ed25519 " + edKey, err: "port"},
	{in: "[github.com]:0 ssh-ed25519 " + edKey, err: "port"},
	{in: "[github.com]:65536 ssh-ed25519 " + edKey, err: "port"},
	{in: "[github.com]:022 ssh-ed25519 " + edKey, err: "port"},
	{in: "[github.com]:2222x ssh-ed25519 " + edKey, err: "port"},
	{in: "[[github.com]]:2222 ssh-ed25519 " + edKey, err: "label"},
	{in: "github.com:2222 ssh-ed25519 " + edKey, err: "label"},
	{in: "github.com. ssh-ed25519 " + edKey, err: "DNS name"},
	{in: ".github.com ssh-ed25519 " + edKey, err: "label"},
	{in: "-oProxyCommand=x ssh-ed25519 " + edKey, err: "label"},
	{in: "git_hub.com ssh-ed25519 " + edKey, err: "label"},
	{in: strings.Repeat("a", 64) + ".com ssh-ed25519 " + edKey, err: "label"},
	{in: strings.Repeat("a.", 127) + "com ssh-ed25519 " + edKey, err: "DNS name"},
	{in: "127.1 ssh-ed25519 " + edKey, err: "usual form"},
	{in: "127.000.0.1 ssh-ed25519 " + edKey, err: "usual form"},
	{in: "0:0::1 ssh-ed25519 " + edKey, err: "write the address as ::1"},
	{in: "::FFFF:127.0.0.1 ssh-ed25519 " + edKey, err: "write the address as"},
	{in: "fe80::1%eth0 ssh-ed25519 " + edKey, err: "zone"},
	{in: "[fe80::1%eth0]:2222 ssh-ed25519 " + edKey, err: "zone"},
	{in: "github.com ssh-rsa " + edKey, err: "is a ssh-ed25519 key, not ssh-rsa"},
	{in: "github.com ecdsa-sha2-nistp384 " + ecKey, err: "not ecdsa-sha2-nistp384"},
	{in: "github.com ssh-dss " + edKey, err: "key type"},
	{in: "github.com ssh-ed25519-cert-v01@openssh.com " + edKey, err: "key type"},
	{in: "github.com SSH-ED25519 " + edKey, err: "key type"},
	{in: "github.com ssh-ed25519 " + edKey[:len(edKey)-4], err: "does not decode"},
	{in: "github.com ssh-ed25519 " + edKey + "AAAA", err: "trailing junk"},
	{in: "github.com ecdsa-sha2-nistp256 " + strings.TrimSuffix(ecKey, "="), err: "base64"},
	{in: "github.com ecdsa-sha2-nistp256 " + strings.TrimSuffix(ecKey, "0=") + "1=", err: "base64"},
	{in: "github.com ssh-ed25519 " + strings.ReplaceAll(edKey, "+", "-"), err: "base64"},
	{in: "github.com ssh-ed25519 " + edKey + "==", err: "base64"},
	{in: "github.com ssh-ed25519 AAAA", err: "does not decode"},
	{in: "github.com ssh-rsa " + strings.Repeat("A", 9000), err: "longer than"},
}

func TestParseKnownHost(t *testing.T) {
	for _, c := range knownHostCases {
		k, err := policy.ParseKnownHost(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseKnownHost(%q) = %v, %v; want an error with %q", c.in, k, err, c.err)
			}
			continue
		}
		if err != nil || k.String() != c.want || !reflect.DeepEqual(k.Hosts, c.hosts) {
			t.Errorf("ParseKnownHost(%q) = %+v, %v; want %q with hosts %v", c.in, k, err, c.want, c.hosts)
		}
	}
	k, err := policy.ParseKnownHost("github.com ssh-ed25519 " + edKey)
	if err != nil || k.Fingerprint != edFinger || k.KeyType != "ssh-ed25519" || k.Key != edKey {
		t.Errorf("ed25519 key: %+v, %v; want fingerprint %s", k, err, edFinger)
	}
}

func FuzzParseKnownHost(f *testing.F) {
	for _, c := range knownHostCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, line string) {
		k, err := policy.ParseKnownHost(line)
		if err != nil {
			return
		}
		s := k.String()
		if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }) || strings.ContainsAny(s, "*?!|#@") {
			t.Fatalf("ParseKnownHost(%q) writes %q", line, s)
		}
		back, err := policy.ParseKnownHost(s)
		if err != nil || !reflect.DeepEqual(back, k) {
			t.Fatalf("%q does not parse back from %q: %+v, %v", line, s, back, err)
		}
		// OpenSSH's format as x/crypto reads it: one entry, these hosts.
		marker, hosts, pub, comment, rest, err := ssh.ParseKnownHosts([]byte(s + "\n"))
		if err != nil || marker != "" || comment != "" || len(rest) != 0 || len(hosts) != len(k.Hosts) || ssh.FingerprintSHA256(pub) != k.Fingerprint {
			t.Fatalf("x/crypto reads %q as %q %v %v %q %q, %v", s, marker, hosts, pub, comment, rest, err)
		}
		for i, h := range k.Hosts {
			if hosts[i] != h.String() || h.Port < 1 || h.Port > 65535 || h.Host != strings.ToLower(h.Host) {
				t.Fatalf("%q: host %d is %q, parsed as %+v", s, i, hosts[i], h)
			}
		}
	})
}

func TestKnownHostsFile(t *testing.T) {
	if f := (*policy.Egress)(nil).KnownHostsFile(); f != nil {
		t.Errorf("nil egress: %q", f)
	}
	p := load(t, "egress.yaml")
	for _, r := range p.Rules() {
		if r.Name != "gh" {
			continue
		}
		want := "github.com ssh-ed25519 " + edKey + "\n" +
			"github.com,[ghe.example.com]:2222,10.20.0.5 ecdsa-sha2-nistp256 " + ecKey + "\n"
		if got := string(r.Egress.KnownHostsFile()); got != want {
			t.Errorf("gh: known hosts file\n%s\nwant\n%s", got, want)
		}
		return
	}
	t.Fatal("no rule gh")
}

// Reaching a pinned host: a name through the allowlist (its port), an
// address through allow_cidrs, anything in observe mode, nothing without
// an egress block.
func TestReachesSSH(t *testing.T) {
	e := &policy.Egress{Mode: policy.EgressEnforce}
	p, err := policy.Parse("p.yaml", []byte(`version: 1
commands:
  - name: git
    binary: /usr/bin/git
    network: proxied
    egress:
      allow: ["github.com:22", "*.example.com:2222"]
      allow_cidrs: [10.0.0.0/8]
`))
	if err != nil {
		t.Fatal(err)
	}
	eg := p.Rules()[0].Egress
	for _, c := range []struct {
		host policy.SSHHost
		want bool
	}{
		{policy.SSHHost{Host: "github.com", Port: 22}, true},
		{policy.SSHHost{Host: "github.com", Port: 2222}, false},
		{policy.SSHHost{Host: "git.example.com", Port: 2222}, true},
		{policy.SSHHost{Host: "example.com", Port: 2222}, false},
		{policy.SSHHost{Host: "10.1.2.3", Port: 7999}, true},
		{policy.SSHHost{Host: "192.0.2.1", Port: 22}, false},
		{policy.SSHHost{Host: "::ffff:10.0.0.1", Port: 22}, true},
	} {
		if got := eg.ReachesSSH(c.host); got != c.want {
			t.Errorf("ReachesSSH(%s) = %v, want %v", c.host, got, c.want)
		}
		if e.ReachesSSH(c.host) {
			t.Errorf("an empty enforced block reaches %s", c.host)
		}
		if !(&policy.Egress{Mode: policy.EgressObserve}).ReachesSSH(c.host) {
			t.Errorf("observe mode does not reach %s", c.host)
		}
	}
	if (*policy.Egress)(nil).ReachesSSH(policy.SSHHost{Host: "github.com", Port: 22}) {
		t.Error("no egress block reaches a host")
	}
}
