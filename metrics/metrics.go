// Package metrics holds the server's Prometheus metrics
// (docs/operations.md, "Metrics and health"): the counters and histograms
// the server updates as calls are refused, commands run and audit records
// are written, and the gauges read from the server's state when scraped.
package metrics

import (
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
)

// Metrics are the server's Prometheus metrics, registered on the registry
// the server's configuration names.
//
// Every label is bounded, and none carries what a caller chose: rule is
// a rule name of the policy (names match policy's name grammar, at most
// as many as the policies loaded since start had; noRule when none
// matched), code a refusal code (package refusal), and result,
// direction, decision, outcome and durable come from fixed sets below.
// Argv, principals, peers and hosts are never labels: a caller or a
// command could make them unbounded.
type Metrics struct {
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

// Gauges read the server's state when the metrics are scraped.
type Gauges struct {
	// Lockout and Pause say whether the server is locked out, or paused.
	Lockout, Pause func() bool
	// ApprovalsWaiting counts the approvals waiting for a human.
	ApprovalsWaiting func() int
	// InFlight counts the Exec requests admitted and not yet answered.
	InFlight func() int
}

// New registers the server's metrics on reg: the ones it counts and the
// gauges g reads when scraped. A registry serves one server: a second
// registration is an error.
func New(reg prometheus.Registerer, g Gauges, version string) (*Metrics, error) {
	m := &Metrics{
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
			func() float64 { return one(g.Lockout()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_pause_active", Help: "1 while the server is paused."},
			func() float64 { return one(g.Pause()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_approvals_waiting", Help: "Approvals waiting for a human."},
			func() float64 { return float64(g.ApprovalsWaiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_execs_in_flight", Help: "Exec requests admitted and not yet answered (waiting or running)."},
			func() float64 { return float64(g.InFlight()) }),
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

// Rules gives every allow rule of p its series at zero, so that a rate
// or an increase sees a rule's first exec.
func (m *Metrics) Rules(p *policy.Policy) {
	for _, r := range p.Rules() {
		if r.Effect != policy.Allow {
			continue
		}
		for _, res := range execResults {
			m.execs.WithLabelValues(r.Name, res)
		}
	}
}

// Refused counts a refusal of any call, by its code (every refusal is
// recorded).
func (m *Metrics) Refused(code string) {
	if !slices.Contains(refusal.Codes(), refusal.Code(code)) {
		code = string(refusal.Internal) // not a code: bounded all the same
	}
	m.refusals.WithLabelValues(code).Inc()
}

// ExecRefused counts an Exec refused, before or while it ran, under the
// rule that allowed it (nil: none did).
func (m *Metrics) ExecRefused(rule *policy.Rule) {
	m.execs.WithLabelValues(ruleLabel(rule), resultRefused).Inc()
}

// ExecRan counts an Exec whose command ran to an exit status (or was
// ended by signal, when not 0).
func (m *Metrics) ExecRan(rule *policy.Rule, exitCode, signal int) {
	result := resultExitZero
	switch {
	case signal != 0:
		result = resultSignal
	case exitCode != 0:
		result = resultExitNonzero
	}
	m.execs.WithLabelValues(ruleLabel(rule), result).Inc()
}

// ExecEnded records what a command that started cost: its run time (if
// it ran at all) and its egress (its result record's rows).
func (m *Metrics) ExecEnded(rule *policy.Rule, ran time.Duration, rows []audit.EgressRow) {
	label := ruleLabel(rule)
	if ran > 0 {
		m.execDuration.WithLabelValues(label).Observe(ran.Seconds())
	}
	var up, down int64
	for _, row := range rows {
		up, down = up+row.BytesUp, down+row.BytesDown
		if d := egress.Decision(row.Decision); d == egress.Deny || d == egress.ObserveDeny {
			m.egressDenials.WithLabelValues(label, row.Decision).Add(float64(row.Conns))
		}
	}
	if len(rows) > 0 {
		m.egressBytes.WithLabelValues(label, "up").Add(float64(up))
		m.egressBytes.WithLabelValues(label, "down").Add(float64(down))
	}
}

// ApprovalEnded observes how long an approval waited, by how it ended.
func (m *Metrics) ApprovalEnded(st coilyv1.ApprovalState, waited time.Duration) {
	outcome := strings.ToLower(strings.TrimPrefix(st.String(), "APPROVAL_STATE_"))
	m.approvalWait.WithLabelValues(outcome).Observe(waited.Seconds())
}

// AuditWritten observes one audit append: how long it took, whether it
// was fsynced, and whether it failed.
func (m *Metrics) AuditWritten(took time.Duration, durable bool, err error) {
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

func ruleLabel(r *policy.Rule) string {
	if r == nil {
		return noRule
	}
	return r.Name
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
