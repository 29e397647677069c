package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"coily.dev/coily/internal/testserver"
)

// egressServers are a plain and a TLS server on loopback that count the
// requests they answer.
type egressServers struct {
	plain, tls *httptest.Server
	hits       atomic.Int64
}

func startEgressServers(t *testing.T) *egressServers {
	t.Helper()
	s := &egressServers{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	s.plain, s.tls = httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(s.plain.Close)
	t.Cleanup(s.tls.Close)
	return s
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// sandboxCurl runs curl in the sandbox with sandbox exec's own proxy and
// the flags given; curl prints the body, then the status code.
func sandboxCurl(t *testing.T, flags []string, curlArgs ...string) cliRun {
	t.Helper()
	args := append([]string{"sandbox", "exec", "--network", "proxied"}, flags...)
	// --noproxy '': the bridge exempts 127.0.0.1 and localhost by
	// NO_PROXY; these requests must go through the proxy.
	args = append(args, "--", "/usr/bin/curl", "-sS", "--noproxy", "", "--max-time", "20", "-w", " status=%{http_code}")
	return runCoily(t, nil, append(args, curlArgs...)...)
}

// requireRow fails unless stderr holds exactly the egress rows want (as
// regular expressions, in order) and nothing else.
func requireRow(t *testing.T, what string, r cliRun, want ...string) {
	t.Helper()
	requireTerminalSafe(t, what+" stderr", r.stderr, len(want))
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	for i, w := range want {
		if !regexp.MustCompile("^coily: egress " + w + "$").MatchString(lines[i]) {
			t.Fatalf("%s: stderr line %d is %q, want %q\n%+v", what, i, lines[i], w, r)
		}
	}
}

// TestCLISandboxExecOwnEgressProxy: with --network proxied and no
// --proxy-socket, sandbox exec runs its own egress proxy with the
// --egress-* allowlist, and prints its rows after the command.
func TestCLISandboxExecOwnEgressProxy(t *testing.T) {
	requireBwrap(t)
	_, err := exec.LookPath("curl")
	requireComponent(t, err == nil, "curl")
	tmp := shortDir(t)
	t.Setenv("TMPDIR", tmp) // where the proxy's socket directory goes
	testserver.SandboxReachable(t, tmp)
	s := startEgressServers(t)
	pp, tp := port(t, s.plain), port(t, s.tls)
	bytesRe := `[0-9.]+ k?B`
	through := `  1 conn  ` + bytesRe + ` up  ` + bytesRe + ` down  [0-9.]+m?s`

	// Allowed by CIDR: plain HTTP and a CONNECT tunnel (TLS end to end).
	r := sandboxCurl(t, []string{"--egress-allow-cidr", "127.0.0.1/32"}, "http://127.0.0.1:"+pp+"/")
	if r.code != 0 || r.stdout != "hello from 127.0.0.1:"+pp+" status=200" || s.hits.Load() != 1 {
		t.Fatalf("allowed by CIDR: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "allowed by CIDR", r, `allow   127\.0\.0\.1:`+pp+through)
	r = sandboxCurl(t, []string{"--egress-allow-cidr", "127.0.0.1/32", "--egress-allow", "example.com"}, "--insecure", "https://127.0.0.1:"+tp+"/")
	if r.code != 0 || r.stdout != "hello from 127.0.0.1:"+tp+" status=200" || s.hits.Load() != 2 {
		t.Fatalf("CONNECT allowed by CIDR: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "CONNECT allowed by CIDR", r, `allow   127\.0\.0\.1:`+tp+through)

	// The same address without the CIDR: 403, and a deny row.
	r = sandboxCurl(t, []string{"--egress-allow", "example.com"}, "http://127.0.0.1:"+pp+"/")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "status=403") || !strings.Contains(r.stdout, `127.0.0.1:`+pp+` is a loopback address; refused (rule "sandbox exec")`) || s.hits.Load() != 2 {
		t.Fatalf("without the CIDR: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "without the CIDR", r, `deny    127\.0\.0\.1:`+pp+`  1 conn  loopback`)

	// A name outside the allowlist: refused when enforced, let through
	// and reported when observed. The loopback address still needs its CIDR.
	r = sandboxCurl(t, []string{"--egress-allow-cidr", "127.0.0.0/8"}, "http://localhost:"+pp+"/")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "status=403") || !strings.Contains(r.stdout, "not in the egress allowlist") || s.hits.Load() != 2 {
		t.Fatalf("enforced, outside the allowlist: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "enforced", r, `deny    localhost:`+pp+`  1 conn  not-allowlisted`)
	r = sandboxCurl(t, []string{"--egress-mode", "observe", "--egress-allow-cidr", "127.0.0.0/8"}, "http://localhost:"+pp+"/")
	if r.code != 0 || r.stdout != "hello from localhost:"+pp+" status=200" || s.hits.Load() != 3 {
		t.Fatalf("observed: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "observed", r, `observe-deny  localhost:`+pp+through+`  not-allowlisted`)
	r = sandboxCurl(t, []string{"--egress-mode", "observe"}, "http://localhost:"+pp+"/")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "status=403") || s.hits.Load() != 3 {
		t.Fatalf("observed, loopback without its CIDR: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "observed without the CIDR", r, `deny    localhost:`+pp+`  1 conn  loopback`)
	r = sandboxCurl(t, []string{"--egress-allow", "localhost:" + pp, "--egress-allow-cidr", "127.0.0.0/8"}, "http://localhost:"+pp+"/")
	if r.code != 0 || r.stdout != "hello from localhost:"+pp+" status=200" || s.hits.Load() != 4 {
		t.Fatalf("allowed by name: %+v (hits %d)", r, s.hits.Load())
	}
	requireRow(t, "allowed by name", r, `allow   localhost:`+pp+through)

	// The command's code is sandbox exec's; no connection says so.
	r = runCoily(t, nil, "sandbox", "exec", "--network", "proxied", "--", "/bin/sh", "-c", "echo out; exit 7")
	if r.code != 7 || r.stdout != "out\n" || r.stderr != "coily: egress: no connections\n" {
		t.Fatalf("exit code and no rows: %+v", r)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("sandbox exec left %v in its TMPDIR", left)
	}
}

// Bad egress flags are usage errors naming the flag, before anything runs.
func TestCLISandboxExecEgressUsage(t *testing.T) {
	proxied := []string{"sandbox", "exec", "--network", "proxied"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(proxied, "--egress-allow", "10.0.0.1"), `--egress-allow: "10.0.0.1": IP literals go in allow_cidrs`},
		{append(proxied, "--egress-allow", "ok.example", "--egress-allow", "*"), `--egress-allow: "*"`},
		{append(proxied, "--egress-allow", "evil\x1b[2A.example"), `--egress-allow: "evil\x1b[2A.example"`},
		{append(proxied, "--egress-allow-cidr", "10.0.0.1/8"), `--egress-allow-cidr: "10.0.0.1/8" has host bits set; write 10.0.0.0/8`},
		{append(proxied, "--egress-allow-cidr", "10.0.0.1"), `--egress-allow-cidr: "10.0.0.1" is not a CIDR`},
		{append(proxied, "--egress-preset", "leftpad"), `--egress-preset: unknown egress preset "leftpad"`},
		{append(proxied, "--egress-mode", "Observe"), `--egress-mode: egress mode must be enforce or observe, got "Observe"`},
		{[]string{"sandbox", "exec", "--egress-allow", "example.com"}, "--egress-allow needs --network proxied"},
		{[]string{"sandbox", "exec", "--network", "open", "--egress-mode", "observe"}, "--egress-mode needs --network proxied"},
		{append(proxied, "--proxy-socket", "/nonexistent.sock", "--egress-preset", "npm"), "--egress-preset sets the allowlist of coily's own proxy"},
		{[]string{"sandbox", "exec", "--proxy-socket", "/nonexistent.sock"}, "--proxy-socket needs --network proxied"},
		{[]string{"sandbox", "exec", "--network", "wide"}, `--network: unknown network mode "wide"`},
	} {
		r := runCoily(t, nil, append(tc.args, "--", "/bin/echo", "ran")...)
		if r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, "coily sandbox exec: "+termText(tc.want)) ||
			!strings.Contains(r.stderr, "Run 'coily sandbox exec --help' for usage.") {
			t.Errorf("%q: %+v; want exit 2 and %q", tc.args, r, tc.want)
		}
		requireTerminalSafe(t, "usage error", r.stderr, -1)
	}
}
