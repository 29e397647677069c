package server_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/diskfault"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/ops"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// get fetches url and returns the status and body.
func get(t *testing.T, c *http.Client, method, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sample returns the value of one series (name and labels as the text
// format writes them, labels sorted) in a /metrics body.
func sample(body, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func wantSample(t *testing.T, body, series string, want float64) {
	t.Helper()
	if got, ok := sample(body, series); !ok || got != want {
		t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
	}
}

// The local handler: health, readiness, and metrics that count what the
// server did: an exec that ran, one refused by the policy, a lockout
// (which leaves the server ready: a state, not unreadiness).
func TestOpsHandlerLocal(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	hs := httptest.NewServer(in.Server.OpsHandler(false))
	defer hs.Close()
	c := hs.Client()

	if code, body := get(t, c, "GET", hs.URL+ops.PathHealthz); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, body := get(t, c, "GET", hs.URL+ops.PathReadyz); code != 200 || body != "ready\n" {
		t.Fatalf("readyz: %d %q", code, body)
	}
	code, body := get(t, c, "GET", hs.URL+ops.PathMetrics)
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	// Every rule and every refusal code has its series from the start.
	wantSample(t, body, `coily_execs_total{result="exit-zero",rule="true"}`, 0)
	wantSample(t, body, `coily_refusals_total{code="policy-deny"}`, 0)
	wantSample(t, body, `coily_lockout_active`, 0)
	wantSample(t, body, `coily_build_info{version="test"}`, 1)

	if r := execArgv(t, in, "/bin/true"); r.err != nil {
		t.Fatal(r.err)
	}
	if r := execArgv(t, in, "/bin/sh", "-c", "exit 3"); r.err != nil || r.exit.GetExitCode() != 3 {
		t.Fatalf("exit 3: %+v", r)
	}
	wantCode(t, execArgv(t, in, "/bin/ls", "/").err, refusal.PolicyDeny)
	if _, err := in.Client.API.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "metrics test"}); err != nil {
		t.Fatal(err)
	}
	_, body = get(t, c, "GET", hs.URL+ops.PathMetrics)
	wantSample(t, body, `coily_execs_total{result="exit-zero",rule="true"}`, 1)
	wantSample(t, body, `coily_execs_total{result="exit-nonzero",rule="sh"}`, 1)
	wantSample(t, body, `coily_execs_total{result="refused",rule="(none)"}`, 1)
	wantSample(t, body, `coily_refusals_total{code="policy-deny"}`, 1)
	wantSample(t, body, `coily_exec_duration_seconds_count{rule="true"}`, 1)
	wantSample(t, body, `coily_lockout_active`, 1)
	wantSample(t, body, `coily_execs_in_flight`, 0)
	if n, ok := sample(body, `coily_audit_write_seconds_count{durable="true"}`); !ok || n < 4 {
		t.Errorf("fsynced audit writes observed: %v (%v), want at least 4", n, ok)
	}
	for _, leak := range []string{"/bin/ls", "local:"} {
		if strings.Contains(body, leak) {
			t.Errorf("metrics mention %q (argv and principals are never labels)", leak)
		}
	}

	code, body = get(t, c, "GET", hs.URL+ops.PathReadyz)
	if code != 200 || !strings.Contains(body, "locked out") {
		t.Fatalf("readyz while locked out: %d %q (a lockout is a state, not unreadiness)", code, body)
	}
	if code, _ := get(t, c, "POST", hs.URL+ops.PathMetrics); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", code)
	}
	if code, _ := get(t, c, "GET", hs.URL+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/: %d", code)
	}
}

// /readyz turns 503, naming the audit log, when the audit directory can
// take no more (a full disk as root, a read-only directory otherwise),
// and 200 again once it can.
func TestReadyzAuditUnwritable(t *testing.T) {
	disk := diskfault.New(t, "16m")
	in := testserver.Start(t, testserver.Options{StateDir: disk.Dir})
	hs := httptest.NewServer(in.Server.OpsHandler(false))
	defer hs.Close()
	c := hs.Client()
	readyz := func() (int, string) { return get(t, c, "GET", hs.URL+ops.PathReadyz) }
	if code, body := readyz(); code != 200 {
		t.Fatalf("readyz before: %d %q", code, body)
	}
	auditDir := filepath.Join(disk.Dir, "audit")
	disk.Fail(t, auditDir)
	var body string
	testserver.Poll(t, 10*time.Second, "readyz to turn 503", func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable
	})
	if !strings.HasPrefix(body, "not ready\naudit: ") {
		t.Fatalf("readyz body %q does not name the audit log", body)
	}
	t.Logf("not ready: %q", body)
	disk.Heal(t, auditDir)
	testserver.Poll(t, 10*time.Second, "readyz to turn 200 again", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
	if r := execArgv(t, in, "/bin/true"); r.err != nil {
		t.Fatalf("exec after healing: %v", r.err)
	}
}
