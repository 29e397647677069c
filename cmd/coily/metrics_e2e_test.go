package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/toolbin"
)

// prometheusBin is Debian's prometheus (scripts/test.sh installs it).
const prometheusBin = "/usr/bin/prometheus"

// metricsAddr waits for the server's "serving metrics" line with a local
// address and returns that address.
func metricsAddr(t *testing.T, p *serveProc) string {
	t.Helper()
	re := regexp.MustCompile(`msg="serving metrics" addr=(127\.0\.0\.1:\d+)`)
	var addr string
	poll.Until(t, 15*time.Second, "the metrics listener's log line", func() bool {
		m := re.FindStringSubmatch(p.log.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// freeLoopbackPort returns a loopback port nothing listens on now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ports, err := toolbin.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// startPrometheus runs a real Prometheus on loopback scraping target
// every 250 ms, and returns its base URL once it is ready.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	dir := shortDir(t)
	conf := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf(`global: {scrape_interval: 250ms, scrape_timeout: 200ms}
scrape_configs:
  - job_name: coily
    static_configs: [{targets: [%q]}]
`, target)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeLoopbackPort(t)))
	log := new(testlog.Buffer)
	cmd := exec.Command(prometheusBin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := "http://" + addr
	poll.Until(t, 60*time.Second, "prometheus to be ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", log)
		default:
		}
		code, _ := httpGet(base + "/-/ready")
		return code == http.StatusOK
	})
	return base
}

func httpGet(u string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// promQuery asks Prometheus's HTTP API for an instant vector and returns
// the value of its only sample (ok false when there is none).
func promQuery(t *testing.T, base, query string) (float64, bool) {
	t.Helper()
	code, body := httpGet(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if code != http.StatusOK {
		t.Fatalf("query %s: %d %s", query, code, body)
	}
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v %s", query, err, body)
	}
	if len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// A real Prometheus scrapes `coily serve --metrics-listen`: it sees the
// exec counter at zero, then the Exec this test makes (sandboxed, as the
// example policy says) counted; the refusal too. The listener is gone
// once the server has stopped.
func TestCLIMetricsPrometheus(t *testing.T) {
	_, err := os.Stat(prometheusBin)
	requireComponent(t, err == nil, "prometheus (apt-get install prometheus)")
	p := startServe(t, shortDir(t), examplePolicy(t), "--metrics-listen", "127.0.0.1:0")
	addr := metricsAddr(t, p)
	if code, body := httpGet("http://" + addr + "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz: %d %q\nserver log:\n%s", code, body, p.log)
	}
	prom := startPrometheus(t, addr)
	series := `coily_execs_total{job="coily",rule="true",result="exit-zero"}`
	poll.Until(t, 60*time.Second, "prometheus to scrape the exec counter at 0", func() bool {
		v, ok := promQuery(t, prom, series)
		return ok && v == 0
	})
	if r := p.run(t, "exec", "--", "/bin/true"); r.code != 0 {
		t.Fatalf("coily exec: %d %s\nserver log:\n%s", r.code, r.stderr, p.log)
	}
	if r := p.run(t, "exec", "--", "/usr/bin/id"); r.code != 125 {
		t.Fatalf("coily exec of a command no rule allows: %d %s", r.code, r.stderr)
	}
	poll.Until(t, 60*time.Second, "prometheus to see the exec counted", func() bool {
		v, ok := promQuery(t, prom, series)
		return ok && v == 1
	})
	poll.Until(t, 30*time.Second, "prometheus to see the refusal counted", func() bool {
		v, ok := promQuery(t, prom, `coily_refusals_total{job="coily",code="policy-deny"}`)
		return ok && v == 1
	})
	if v, ok := promQuery(t, prom, `up{job="coily"}`); !ok || v != 1 {
		t.Errorf("up = %v (%v)", v, ok)
	}
	p.stop()
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("the metrics listener %s still accepts connections after the server stopped", addr)
	}
}
