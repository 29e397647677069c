package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/supervise"
)

// newTestMetrics registers metrics for a bare server on a new registry.
func newTestMetrics(t *testing.T) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s := &Server{approvals: newApprovals(time.Now), stops: bareControls(t)}
	m, err := newMetrics(reg, s, "test")
	if err != nil {
		t.Fatal(err)
	}
	s.metrics = m
	s.approvals.observe = m.approvalEnded
	return s, reg
}

// bareControls are stop controls on a new state file, for a bare server.
func bareControls(tb testing.TB) *stops.Controls {
	tb.Helper()
	db, err := store.Open(filepath.Join(tb.TempDir(), "coily.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	c, err := stops.New(stops.Config{Store: db})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// A registry serves one server: a second registration is an error, not a
// panic or a silent merge.
func TestMetricsRegistryOnce(t *testing.T) {
	_, reg := newTestMetrics(t)
	if _, err := newMetrics(reg, &Server{}, "test"); err == nil {
		t.Fatal("registering a second server's metrics on the same registry succeeded")
	}
}

// Egress rows become bytes by direction and denials by decision, under
// the exec's rule; hosts never become labels.
func TestMetricsEgress(t *testing.T) {
	s, reg := newTestMetrics(t)
	x := &execution{rule: &policy.Rule{Name: "gh"}}
	rows := audit.EgressRows([]egress.Row{
		{Host: cmdtext.New(nil, "api.github.com"), Port: 443, Decision: egress.Allow, Conns: 2, BytesUp: 100, BytesDown: 5000},
		{Host: cmdtext.New(nil, "evil.example"), Port: 443, Decision: egress.Deny, Conns: 3},
		{Host: cmdtext.New(nil, "other.example"), Port: 443, Decision: egress.ObserveDeny, Conns: 1, BytesUp: 10, BytesDown: 20},
	})
	s.metrics.execEnded(x, supervise.Result{Duration: 1500 * time.Millisecond}, rows)
	for _, c := range []struct {
		got  prometheus.Metric
		want float64
	}{
		{s.metrics.egressBytes.WithLabelValues("gh", "up"), 110},
		{s.metrics.egressBytes.WithLabelValues("gh", "down"), 5020},
		{s.metrics.egressDenials.WithLabelValues("gh", "deny"), 3},
		{s.metrics.egressDenials.WithLabelValues("gh", "observe-deny"), 1},
	} {
		if v := value(t, c.got); v != c.want {
			t.Errorf("%v = %v, want %v", c.got, v, c.want)
		}
	}
	if n := count(s.metrics.execDuration); n != 1 {
		t.Errorf("duration series: %d", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "api.github.com" || l.GetValue() == "evil.example" {
					t.Errorf("%s has a host label %s=%s", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// Exec results: exit zero, non-zero, a signal; a refusal without a rule.
// A code that is not a refusal code is counted as internal (bounded).
func TestMetricsResults(t *testing.T) {
	s, _ := newTestMetrics(t)
	x := &execution{rule: &policy.Rule{Name: "sh"}}
	s.metrics.execRan(x, supervise.Result{})
	s.metrics.execRan(x, supervise.Result{ExitCode: 2})
	s.metrics.execRan(x, supervise.Result{ExitCode: -1, Signal: 9})
	s.metrics.execRefused(&execution{})
	s.metrics.refused("no-such-code")
	for labels, want := range map[[2]string]float64{
		{"sh", resultExitZero}: 1, {"sh", resultExitNonzero}: 1, {"sh", resultSignal}: 1, {noRule, resultRefused}: 1,
	} {
		if v := value(t, s.metrics.execs.WithLabelValues(labels[0], labels[1])); v != want {
			t.Errorf("execs%v = %v, want %v", labels, v, want)
		}
	}
	if v := value(t, s.metrics.refusals.WithLabelValues("internal")); v != 1 {
		t.Errorf("refusals{internal} = %v", v)
	}
	if n := count(s.metrics.refusals); n != len(refusal.Codes()) {
		t.Errorf("%d refusal series, want one per refusal code (%d)", n, len(refusal.Codes()))
	}
}

// An approval counts as waiting until it ends; its wait is observed
// under how it ended.
func TestMetricsApprovals(t *testing.T) {
	s, reg := newTestMetrics(t)
	ap := s.approvals.create(pendingExec("tag:agent"), time.Minute)
	if v := gathered(t, reg, "coily_approvals_waiting"); v != 1 {
		t.Fatalf("approvals waiting = %v, want 1", v)
	}
	if _, err := s.approvals.decide(ap.a.GetId(), "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.approvals.wait(context.Background(), ap); err != nil {
		t.Fatal(err)
	}
	if v := gathered(t, reg, "coily_approvals_waiting"); v != 0 {
		t.Fatalf("approvals waiting = %v, want 0", v)
	}
	if n := count(s.metrics.approvalWait); n != 1 {
		t.Fatalf("%d approval outcome series, want 1", n)
	}
	var m dto.Metric
	if err := s.metrics.approvalWait.WithLabelValues("approved").(prometheus.Metric).Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("approved waits observed: %v (%v), want 1", m.GetHistogram().GetSampleCount(), err)
	}
}

// gathered returns the value of an unlabelled gauge.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}

// value reads a counter.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// count counts the series a collector has.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 256)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// BenchmarkMetricsPerExec measures the metric updates one Exec of a
// command that ran makes (its result, its run time, its egress bytes, two
// audit writes), next to the Exec's own cost in BenchmarkExecTrueVsForkExec.
// Run: go test -run '^$' -bench MetricsPerExec ./server/
func BenchmarkMetricsPerExec(b *testing.B) {
	reg := prometheus.NewRegistry()
	s := &Server{approvals: newApprovals(time.Now), stops: bareControls(b)}
	m, err := newMetrics(reg, s, "bench")
	if err != nil {
		b.Fatal(err)
	}
	x := &execution{rule: &policy.Rule{Name: "gh"}}
	rows := audit.EgressRows([]egress.Row{{Host: cmdtext.New(nil, "api.github.com"), Port: 443,
		Decision: egress.Allow, Conns: 1, BytesUp: 100, BytesDown: 1000}})
	res := supervise.Result{Duration: 2 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		m.auditWritten(50*time.Microsecond, false, nil)
		m.execEnded(x, res, rows)
		m.execRan(x, res)
		m.auditWritten(900*time.Microsecond, true, nil)
	}
}
