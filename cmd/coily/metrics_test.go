package main

import (
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"coily.dev/coily/internal/testserver"
)

// The operations listener serves until close, which leaves no goroutine
// and no listener behind (serve calls it on shutdown); a listener that
// is not on loopback is warned about.
func TestOpsServersClose(t *testing.T) {
	before := goleak.IgnoreCurrent()
	in := testserver.Start(t, testserver.Options{})
	var log strings.Builder
	ops, err := startOps(slog.New(slog.NewTextHandler(&log, nil)), in.Server,
		serveOptions{metricsListen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("no address logged: %s", log.String())
	}
	if code, body := httpGet("http://" + m[1] + "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if strings.Contains(log.String(), "reachable beyond this host") {
		t.Errorf("a loopback listener was warned about: %s", log.String())
	}
	ops.close()
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Fatal("the metrics listener still accepts connections after close")
	}
	http.DefaultClient.CloseIdleConnections()
	in.Stop()
	goleak.VerifyNone(t, before)

	var warn strings.Builder
	warnIfNotLoopback(slog.New(slog.NewTextHandler(&warn, nil)), &net.TCPAddr{IP: net.IPv4zero, Port: 9464})
	if !strings.Contains(warn.String(), "reachable beyond this host") {
		t.Errorf("0.0.0.0 was not warned about: %q", warn.String())
	}
}
