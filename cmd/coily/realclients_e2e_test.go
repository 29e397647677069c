package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
)

// findRow returns the row of rows for host:port with the decision.
func findRow(rows []audit.EgressRow, host string, port int, decision string) (audit.EgressRow, bool) {
	for _, r := range rows {
		if r.Host == host && r.Port == port && r.Decision == decision {
			return r, true
		}
	}
	return audit.EgressRow{}, false
}

// writePolicy writes body as dir/policy.yaml.
func writePolicy(t testing.TB, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// npm installs from a local registry through coily in enforce mode: the
// registry is the only host it may reach, a postinstall script that
// tries another host is refused, and both land in the audit record.
func TestCLIRealNpmThroughEgress(t *testing.T) {
	requireBwrap(t)
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	contacted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
			contacted <- struct{}{}
		}
	}()
	targetPort := target.Addr().(*net.TCPAddr).Port
	reg := standin.NpmRegistry(t, standin.DefaultNpmPackage,
		standin.ContactOnInstall("standin-contact", "1.0.0", "elsewhere.test:"+strconv.Itoa(targetPort)))
	_, regPort, _ := net.SplitHostPort(reg.Host)
	npm := standin.Need(t, "npm", standin.NpmHint)
	npm, err = filepath.EvalSymlinks(npm)
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws") // not in the state directory, private to the server
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, ws)
	p := startServe(t, dir, writePolicy(t, dir, fmt.Sprintf(`version: 1
workspaces: {app: %s}
roles: {operator: {permissions: [exec], commands: [npm-install]}}
commands:
  - name: npm-install
    binary: %s
    args: [install, "**"]
    flags: any
    workspace: app
    timeout: 2m
    network: proxied
    egress:
      allow: ["npm.test:%s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {npm.test: [127.0.0.1], elsewhere.test: [127.0.0.1]}
`, ws, npm, regPort)))
	registry := "http://npm.test:" + regPort + "/"
	flags := []string{"--registry", registry, "--no-package-lock", "--no-audit", "--no-fund", "--no-update-notifier"}
	r := p.run(t, append(append([]string{"exec", "--", npm, "install"}, flags...), "standin-pkg")...)
	if r.code != 0 {
		t.Fatalf("npm install through coily: %+v\n%s", r, p.log)
	}
	if _, err := os.Stat(filepath.Join(ws, "node_modules", "standin-pkg", "package.json")); err != nil {
		t.Fatalf("standin-pkg was not installed in the workspace: %v", err)
	}
	// The postinstall's host is not in the allowlist (although it is
	// the same loopback server by another name): refused, audited.
	r = p.run(t, append(append([]string{"exec", "--", npm, "install"}, flags...), "standin-contact")...)
	elsewhere := "elsewhere.test:" + strconv.Itoa(targetPort)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "standin-postinstall: "+elsewhere+": proxy answered 403") ||
		!strings.Contains(r.stderr, "coily: egress refused: host "+elsewhere+" is not in the egress allowlist") {
		t.Fatalf("postinstall to another host: %+v", r)
	}
	select {
	case <-contacted:
		t.Fatal("the postinstall script reached the other host")
	case <-time.After(100 * time.Millisecond):
	}
	recs := egressRecords(t, dir)
	if len(recs) != 2 {
		t.Fatalf("%d exec.result records, want 2", len(recs))
	}
	port, _ := strconv.Atoi(regPort)
	if row, ok := findRow(recs[0].Egress, "npm.test", port, "allow"); !ok || row.BytesDown == 0 {
		t.Errorf("first install: no allow row with bytes for the registry: %+v", recs[0].Egress)
	}
	if _, ok := findRow(recs[1].Egress, "elsewhere.test", targetPort, "deny"); !ok {
		t.Errorf("second install: no deny row for the postinstall's host: %+v", recs[1].Egress)
	}
	for _, rec := range recs {
		for _, row := range rec.Egress {
			if row.Decision == "allow" && row.Host != "npm.test" {
				t.Errorf("npm reached %s:%d", row.Host, row.Port)
			}
		}
	}
}

// pip installs from a local simple index over TLS through coily in
// enforce mode: only the index's host is reached, and the install lands
// in the workspace.
func TestCLIRealPipThroughEgress(t *testing.T) {
	requireBwrap(t)
	py := standin.Python(t)
	py, err := filepath.EvalSymlinks(py)
	if err != nil {
		t.Fatal(err)
	}
	idx := standin.PipIndex(t, standin.PipOptions{Hosts: []string{"pypi.test"}})
	dir := shortDir(t)
	ws := filepath.Join(shortDir(t), "ws") // not in the state directory, private to the server
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// The command trusts the test CA by an argument naming a copy in its
	// workspace (pip's --cert).
	ca, err := os.ReadFile(idx.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	port := idx.Port
	testserver.SandboxWorkspace(t, ws)
	p := startServe(t, dir, writePolicy(t, dir, fmt.Sprintf(`version: 1
workspaces: {app: %s}
roles: {operator: {permissions: [exec], commands: [pip-install]}}
commands:
  - name: pip-install
    binary: %s
    args: [pip, install, "**"] # -m is read as a flag
    flags: any
    workspace: app
    timeout: 2m
    network: proxied
    egress:
      allow: ["pypi.test:%s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {pypi.test: [127.0.0.1]}
`, ws, py, port)))
	r := p.run(t, "exec", "--", py, "-m", "pip", "install", "--isolated", "--index-url", "https://pypi.test:"+port+"/simple/",
		"--cert", filepath.Join(ws, "ca.pem"), "--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check",
		"--retries", "0", "--timeout", "10", "--target", filepath.Join(ws, "site"), "standin-pkg")
	if r.code != 0 {
		t.Fatalf("pip install through coily: %+v\n%s", r, p.log)
	}
	if _, err := os.Stat(filepath.Join(ws, "site", "standin_pkg", "__init__.py")); err != nil {
		t.Fatalf("standin-pkg was not installed: %v", err)
	}
	recs := egressRecords(t, dir)
	if len(recs) != 1 {
		t.Fatalf("%d exec.result records, want 1", len(recs))
	}
	if row, ok := findRow(recs[0].Egress, "pypi.test", mustAtoi(t, idx.Port), "allow"); !ok || row.BytesDown == 0 || len(recs[0].Egress) != 1 {
		t.Errorf("rows: %+v", recs[0].Egress)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
