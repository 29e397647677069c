package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coily.dev/coily/audit"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/supervise"
)

// metrics are the server's Prometheus metrics (docs/operations.md,
// "Metrics and health"), registered on Config.Metrics.
//
// Every label is bounded, and none carries what a caller chose: rule is
// a rule name of the policy (names match policy's name grammar, at most
// as many as the policies loaded since start had; noRule when none
// matched), code a refusal code (package refusal), and result,
// direction, decision, outcome and durable come from fixed sets below.
// Argv, principals, peers and hosts are never labels: a caller or a
// command could make them unbounded.
type metrics struct {
	execs         *prometheus.CounterVec   // rule, result
	refusals      *prometheus.CounterVec   // code
	execDuration  *prometheus.HistogramVec // rule
	approvalWait  *prometheus.HistogramVec // outcome
	egressBytes   *prometheus.CounterVec   // rule, direction
	egressDenials *prometheus.CounterVec   // rule, decision
	auditWrite    *prometheus.HistogramVec // durable
	auditFailures prometheus.Counter
}

// noRule is the rule label of an Exec refused before a rule allowed it
// ("(" is not in a rule name, so it cannot be one).
const noRule = "(none)"

// Exec results (the result label).
const (
	resultExitZero    = "exit-zero"
	resultExitNonzero = "exit-nonzero"
	resultSignal      = "signal"
	resultRefused     = "refused"
)

var execResults = []string{resultExitZero, resultExitNonzero, resultSignal, resultRefused}

// Buckets: commands run from milliseconds to hours; approvals wait for a
// human; an audit write is a write and usually an fsync.
var (
	execBuckets     = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
	approvalBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}
	auditBuckets    = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
)

// newMetrics registers the server's metrics on reg: the ones it counts
// and gauges read from s when scraped.
func newMetrics(reg prometheus.Registerer, s *Server, version string) (*metrics, error) {
	m := &metrics{
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_execs_total",
			Help: "Exec requests that reached the pipeline, by rule and result (exit-zero, exit-nonzero, signal, refused)."},
			[]string{"rule", "result"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_refusals_total",
			Help: "Refusals of any call (every one is audited), by refusal code."}, []string{"code"}),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coily_exec_duration_seconds",
			Help: "Run time of the commands that started, by rule.", Buckets: execBuckets}, []string{"rule"}),
		approvalWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coily_approval_decision_seconds",
			Help:    "Time from an approval's request to its end, by outcome (approved, denied, expired, cancelled, rejected).",
			Buckets: approvalBuckets}, []string{"outcome"}),
		egressBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_egress_bytes_total",
			Help: "Bytes through the egress proxies, by rule and direction (up: sent by the command; down: received), counted when the command ends."},
			[]string{"rule", "direction"}),
		egressDenials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_egress_denials_total",
			Help: "Egress connections outside the rule's allowlist, by rule and decision (deny: refused; observe-deny: let through in observe mode), counted when the command ends."},
			[]string{"rule", "decision"}),
		auditWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coily_audit_write_seconds",
			Help: "Time to append one audit record, by whether it was fsynced (durable).", Buckets: auditBuckets}, []string{"durable"}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "coily_audit_write_failures_total",
			Help: "Audit appends that failed (each fails its request)."}),
	}
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_lockout_active", Help: "1 while the server is locked out."},
			func() float64 { return s.stopGauge(true) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_pause_active", Help: "1 while the server is paused."},
			func() float64 { return s.stopGauge(false) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_approvals_waiting", Help: "Approvals waiting for a human."},
			func() float64 { return float64(s.approvals.pendingCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_execs_in_flight", Help: "Exec requests admitted and not yet answered (waiting or running)."},
			func() float64 { return float64(s.jobCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_build_info", Help: "Always 1; the version label is the server's.",
			ConstLabels: prometheus.Labels{"version": version}}, func() float64 { return 1 }),
	}
	var errs []error
	for _, c := range append(gauges, m.execs, m.refusals, m.execDuration, m.approvalWait, m.egressBytes,
		m.egressDenials, m.auditWrite, m.auditFailures) {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, c := range refusal.Codes() {
		m.refusals.WithLabelValues(string(c))
	}
	for _, d := range []string{"true", "false"} {
		m.auditWrite.WithLabelValues(d)
	}
	return m, nil
}

// rules gives every allow rule of p its series at zero, so that a rate
// or an increase sees a rule's first exec.
func (m *metrics) rules(p *policy.Policy) {
	for _, r := range p.Rules() {
		if r.Effect != policy.Allow {
			continue
		}
		for _, res := range execResults {
			m.execs.WithLabelValues(r.Name, res)
		}
	}
}

// refused counts a refusal of any call, by its code (record: every
// refusal is recorded).
func (m *metrics) refused(code string) {
	if !slices.Contains(refusal.Codes(), refusal.Code(code)) {
		code = string(refusal.Internal) // not a code: bounded all the same
	}
	m.refusals.WithLabelValues(code).Inc()
}

// execRefused counts an Exec refused, before or while it ran.
func (m *metrics) execRefused(x *execution) {
	m.execs.WithLabelValues(ruleLabel(x), resultRefused).Inc()
}

// execRan counts an Exec whose command ran to an exit status.
func (m *metrics) execRan(x *execution, res supervise.Result) {
	result := resultExitZero
	switch {
	case res.Signal != 0:
		result = resultSignal
	case res.ExitCode != 0:
		result = resultExitNonzero
	}
	m.execs.WithLabelValues(ruleLabel(x), result).Inc()
}

// execEnded records what a command that started cost: its run time and
// its egress (its result record's rows).
func (m *metrics) execEnded(x *execution, res supervise.Result, rows []audit.EgressRow) {
	rule := ruleLabel(x)
	if res.Duration > 0 {
		m.execDuration.WithLabelValues(rule).Observe(res.Duration.Seconds())
	}
	var up, down int64
	for _, row := range rows {
		up, down = up+row.BytesUp, down+row.BytesDown
		if d := egress.Decision(row.Decision); d == egress.Deny || d == egress.ObserveDeny {
			m.egressDenials.WithLabelValues(rule, row.Decision).Add(float64(row.Conns))
		}
	}
	if len(rows) > 0 {
		m.egressBytes.WithLabelValues(rule, "up").Add(float64(up))
		m.egressBytes.WithLabelValues(rule, "down").Add(float64(down))
	}
}

// approvalEnded observes how long an approval waited, by how it ended.
func (m *metrics) approvalEnded(st coilyv1.ApprovalState, waited time.Duration) {
	outcome := strings.ToLower(strings.TrimPrefix(st.String(), "APPROVAL_STATE_"))
	m.approvalWait.WithLabelValues(outcome).Observe(waited.Seconds())
}

// auditWritten observes one audit append.
func (m *metrics) auditWritten(took time.Duration, durable bool, err error) {
	if err != nil {
		m.auditFailures.Inc()
		return
	}
	d := "false"
	if durable {
		d = "true"
	}
	m.auditWrite.WithLabelValues(d).Observe(took.Seconds())
}

func ruleLabel(x *execution) string {
	if x.rule == nil {
		return noRule
	}
	return x.rule.Name
}

// stopGauge reads the lockout (or the pause) as 1 or 0.
func (s *Server) stopGauge(lockout bool) float64 {
	state, _ := s.stops.State()
	st := state.Pause
	if lockout {
		st = state.Lockout
	}
	if st.Active {
		return 1
	}
	return 0
}

func (s *Server) jobCount() int {
	_, running := s.stops.State()
	return running
}

// appendAudit appends r (fsynced when durable) and observes the write.
func (s *Server) appendAudit(ctx context.Context, r audit.Record, durable bool) (audit.Record, error) {
	appendFn := s.cfg.Audit.AppendPending
	if durable {
		appendFn = s.cfg.Audit.Append
	}
	t0 := time.Now()
	out, err := appendFn(ctx, r)
	s.metrics.auditWritten(time.Since(t0), durable, err)
	if err == nil {
		s.auditFeed.publish(out)
	}
	return out, err
}
