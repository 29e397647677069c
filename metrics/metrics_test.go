package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// bare is a server's metrics on a new registry, with the approvals they
// gauge; the server is neither locked out nor paused, and runs nothing.
type bare struct {
	metrics   *Metrics
	approvals *approvals.Queue
}

// newTestMetrics registers metrics for a bare server on a new registry.
func newTestMetrics(tb testing.TB) (*bare, *prometheus.Registry) {
	tb.Helper()
	reg := prometheus.NewRegistry()
	s := &bare{}
	m, err := New(reg, bareGauges(s), "test")
	if err != nil {
		tb.Fatal(err)
	}
	s.metrics = m
	s.approvals = approvals.New(time.Now, m.ApprovalEnded, nil)
	return s, reg
}

func bareGauges(s *bare) Gauges {
	no := func() bool { return false }
	return Gauges{Lockout: no, Pause: no, InFlight: func() int { return 0 },
		ApprovalsWaiting: func() int { return s.approvals.PendingCount() }}
}

// A registry serves one server: a second registration is an error, not a
// panic or a silent merge.
func TestMetricsRegistryOnce(t *testing.T) {
	_, reg := newTestMetrics(t)
	if _, err := New(reg, bareGauges(&bare{}), "test"); err == nil {
		t.Fatal("registering a second server's metrics on the same registry succeeded")
	}
}

// Egress rows become bytes by direction and denials by decision, under
// the exec's rule; hosts never become labels.
func TestMetricsEgress(t *testing.T) {
	s, reg := newTestMetrics(t)
	x := &policy.Rule{Name: "gh"}
	rows := audit.EgressRows([]egress.Row{
		{Host: cmdtext.New(nil, "api.github.com"), Port: 443, Decision: egress.Allow, Conns: 2, BytesUp: 100, BytesDown: 5000},
		{Host: cmdtext.New(nil, "evil.example"), Port: 443, Decision: egress.Deny, Conns: 3},
		{Host: cmdtext.New(nil, "other.example"), Port: 443, Decision: egress.ObserveDeny, Conns: 1, BytesUp: 10, BytesDown: 20},
	})
	s.metrics.ExecEnded(x, 1500*time.Millisecond, rows)
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
	x := &policy.Rule{Name: "sh"}
	s.metrics.ExecRan(x, 0, 0)
	s.metrics.ExecRan(x, 2, 0)
	s.metrics.ExecRan(x, -1, 9)
	s.metrics.ExecRefused(nil)
	s.metrics.Refused("no-such-code")
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
	ap := s.approvals.Create(approvals.Request{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", Requester: "tag:agent",
		Exec: &coilyv1.ExecRequest{Argv: []string{"/usr/bin/git", "push", "--force"}}, Rule: &policy.Rule{Name: "git-push-force"}}, time.Minute)
	if v := gathered(t, reg, "coily_approvals_waiting"); v != 1 {
		t.Fatalf("approvals waiting = %v, want 1", v)
	}
	if _, err := s.approvals.Decide(ap.Snapshot().GetId(), "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.approvals.Wait(context.Background(), ap); err != nil {
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
// Run: go test -run '^$' -bench MetricsPerExec ./metrics/
func BenchmarkMetricsPerExec(b *testing.B) {
	s, _ := newTestMetrics(b)
	m := s.metrics
	x := &policy.Rule{Name: "gh"}
	rows := audit.EgressRows([]egress.Row{{Host: cmdtext.New(nil, "api.github.com"), Port: 443,
		Decision: egress.Allow, Conns: 1, BytesUp: 100, BytesDown: 1000}})
	ran := 2 * time.Millisecond
	b.ReportAllocs()
	for b.Loop() {
		m.AuditWritten(50*time.Microsecond, false, nil)
		m.ExecEnded(x, ran, rows)
		m.ExecRan(x, 0, 0)
		m.AuditWritten(900*time.Microsecond, true, nil)
	}
}
