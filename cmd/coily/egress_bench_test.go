package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/sandbox"
)

// BenchmarkExecEgressVsDeny measures what a proxied network costs an
// exec, as the user feels it (whole `coily exec` processes against a
// running `coily serve`): /bin/true under a rule with network deny, the
// same under network proxied (its own egress proxy, the socket bound in,
// the in-sandbox bridge), and curl fetching one page through the proxy,
// interleaved in one run. The bar: proxied adds at most 50 ms.
// Run: go test -run '^$' -bench ExecEgressVsDeny -benchtime 200x ./cmd/coily/
func BenchmarkExecEgressVsDeny(b *testing.B) {
	if _, err := sandbox.BwrapPath(); err != nil {
		b.Skip(err)
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		b.Skip(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dir, err := os.MkdirTemp("", "coily-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	policyPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(fmt.Sprintf(`version: 1
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: true-deny, binary: /bin/true, args: [deny]}
  - {name: true-proxied, binary: /bin/true, args: [proxied], network: proxied, egress: {allow: [upstream.test]}}
  - name: curl
    binary: %s
    args: ["**"]
    flags: any
    network: proxied
    egress: {allow: ["upstream.test:%d"], allow_cidrs: [127.0.0.0/8], hosts: {upstream.test: [127.0.0.1]}}
`, curl, port)), 0o600); err != nil {
		b.Fatal(err)
	}
	srvProc := exec.Command(coilyBin, "serve", "--state-dir", dir, "--policy", policyPath)
	if os.Geteuid() == 0 {
		srvProc.Env = append(os.Environ(), "COILY_ALLOW_ROOT=true")
	}
	if err := srvProc.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srvProc.Process.Kill(); _ = srvProc.Wait() }()
	sock := filepath.Join(dir, "coily.sock")
	run := func(argv ...string) error {
		out, err := exec.Command(coilyBin, append([]string{"--socket", sock, "exec", "--"}, argv...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %v: %s", argv, err, out)
		}
		return nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for run("/bin/true", "deny") != nil {
		if time.Now().After(deadline) {
			b.Fatal("server did not become ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	url := fmt.Sprintf("http://upstream.test:%d/", port)
	arm := func(argv ...string) func() {
		return func() {
			if err := run(argv...); err != nil {
				b.Fatal(err)
			}
		}
	}
	d := benchstat.Interleave(b, arm("/bin/true", "deny"), arm("/bin/true", "proxied"), arm(curl, "-sSf", "-o", "/dev/null", url))
	deny, proxied, fetch := d[0], d[1], d[2]
	benchstat.Report(b, "deny", deny)
	benchstat.Report(b, "proxied", proxied)
	benchstat.Report(b, "proxied-curl", fetch)
	b.ReportMetric(benchstat.Added(proxied, deny, 50), "added-p50-ms")
	b.ReportMetric(benchstat.Ratio(proxied, deny, 50), "proxied/deny-p50")
}
