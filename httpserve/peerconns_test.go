package httpserve

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/metrics"
	"coily.dev/coily/recorder"
)

// webMethodConn is the console's name for its connection refusals.
const webMethodConn = "web:connection"

// capRig is a cap wired as the server wires it: a real audit log, the
// recorder, access's gate (no WhoIs: peers are recorded by address) and
// the metrics.
type capRig struct {
	dir string
	reg *prometheus.Registry
	cap Cap
}

func newCapRig(t *testing.T) *capRig {
	t.Helper()
	dir := t.TempDir()
	al, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	reg := prometheus.NewRegistry()
	no := func() bool { return false }
	none := func() int { return 0 }
	m, err := metrics.New(reg, metrics.Gauges{Lockout: no, Pause: no, ApprovalsWaiting: none, InFlight: none}, "test")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	rec := recorder.New(recorder.Config{Audit: al, Log: log, Refused: func(r audit.Record) { m.Refused(r.Code) }})
	gate := access.New(access.Config{Log: log,
		Record: func(ctx context.Context, r audit.Record) (audit.Record, error) { return rec.Record(ctx, r, true) }})
	return &capRig{dir: dir, reg: reg, cap: Cap{Transport: access.TransportWeb, Method: webMethodConn, Gate: gate, Audit: rec,
		Refused: m.Refused, Now: time.Now, Log: log}}
}

// fakeConn is an accepted connection from remote.
type fakeConn struct {
	net.Conn
	remote net.Addr
	closed atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error         { c.closed.Store(true); return nil }

func conn(t *testing.T, hostport string) *fakeConn {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeConn{remote: a}
}

// rateLimited reads coily_refusals_total{code="rate-limit"}.
func rateLimited(t *testing.T, s *capRig) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "coily_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == "rate-limit" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func connRecords(t *testing.T, s *capRig) (refused, summaries []audit.Record) {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(s.dir, "audit"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		switch {
		case r.Method == webMethodConn:
			refused = append(refused, r)
		case r.Event == recorder.EventRefusalSummary && r.Details["sample_method"] == webMethodConn:
			summaries = append(summaries, r)
		}
	}
	return refused, summaries
}

// A peer at its cap has each new connection closed at once, others are
// not held up, a closed or hijacked connection frees its place; every
// refusal is counted, the first of a window recorded at once, the rest in
// one summary when the window ends (or the server closes).
func TestPeerConnsCapAndRecords(t *testing.T) {
	s := newCapRig(t)
	p := newPeerConns(s.cap, 2)
	p.window = 300 * time.Millisecond
	accept := func(c *fakeConn) bool {
		p.connState(c, http.StateNew)
		return !c.closed.Load()
	}
	a1, a2, b1 := conn(t, "100.64.0.7:1"), conn(t, "[::ffff:100.64.0.7]:2"), conn(t, "100.64.0.8:1")
	if !accept(a1) || !accept(a2) || !accept(b1) {
		t.Fatal("a connection under its peer's cap was refused")
	}
	for i := range 5 {
		if accept(conn(t, "100.64.0.7:"+strconv.Itoa(10+i))) {
			t.Fatalf("connection %d past the cap accepted", 3+i)
		}
	}
	p.connState(a1, http.StateClosed)
	a3 := conn(t, "100.64.0.7:3")
	if !accept(a3) {
		t.Fatal("a closed connection did not free its place")
	}
	p.connState(a3, http.StateHijacked)
	p.connState(a3, http.StateClosed) // after a hijack: uncounted once only
	if !accept(conn(t, "100.64.0.7:4")) || accept(conn(t, "100.64.0.7:5")) {
		t.Fatal("a hijacked connection did not free exactly its place")
	}
	// The window's first refusal is recorded at once (and counted then),
	// the other five in one summary at its end.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if refused, sums := connRecords(t, s); len(refused) == 1 && len(sums) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no summary at the window's end")
		}
	}
	refused, sums := connRecords(t, s)
	if len(refused) != 1 || refused[0].Code != "rate-limit" || refused[0].Decision != "refuse" ||
		refused[0].Transport != access.TransportWeb || refused[0].Peer != "100.64.0.7:10" {
		t.Fatalf("refusals recorded: %+v", refused)
	}
	if sums[0].Details["count"] != "5" || !slices.Equal(sums[0].Lists["codes"], []string{"rate-limit=5"}) || sums[0].Peer != "100.64.0.7:10" {
		t.Fatalf("summary: %+v", sums[0])
	}
	if got := rateLimited(t, s); got != 6 {
		t.Errorf("%v refusals counted, want 6", got)
	}
	// A new window records its first again; close writes what is pending.
	for i := range 3 {
		accept(conn(t, "100.64.0.7:"+strconv.Itoa(20+i)))
	}
	p.close()
	refused, sums = connRecords(t, s)
	if len(refused) != 2 || len(sums) != 2 || sums[1].Details["count"] != "2" {
		t.Fatalf("after close: %d refusals, summaries %+v", len(refused), sums)
	}
	if got := rateLimited(t, s); got != 9 {
		t.Errorf("%v refusals counted, want 9", got)
	}
}

// The peers whose refusals are counted at once are bounded: past the
// bound, newcomers share one window, and nothing is lost from the count.
func TestPeerConnsWindowsBounded(t *testing.T) {
	s := newCapRig(t)
	p := newPeerConns(s.cap, 1)
	p.maxWindows = 3
	for i := range 10 {
		peer := "100.64.1." + strconv.Itoa(i) + ":1"
		p.connState(conn(t, peer), http.StateNew)
		c := conn(t, peer)
		if p.connState(c, http.StateNew); !c.closed.Load() {
			t.Fatalf("peer %d's second connection accepted", i)
		}
	}
	p.mu.Lock()
	n := len(p.windows)
	p.mu.Unlock()
	if n > p.maxWindows+1 {
		t.Errorf("%d windows kept, bound %d", n, p.maxWindows)
	}
	p.close()
	refused, sums := connRecords(t, s)
	counted := len(refused)
	for _, r := range sums {
		c, _ := strconv.Atoi(r.Details["count"])
		counted += c
	}
	if counted != 10 || rateLimited(t, s) != 10 {
		t.Errorf("%d refusals in the log (%d records, %d summaries), %v counted; want 10", counted, len(refused), len(sums), rateLimited(t, s))
	}
}
