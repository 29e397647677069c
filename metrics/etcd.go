package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// etcdBuckets: a call to a healthy cluster takes a raft round (a
// millisecond or a few); one bounded by the call timeout takes seconds.
var etcdBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// Etcd are the metrics of a host whose shared state is in etcd
// (--state etcd://): its calls to the cluster, whether the shared state is
// in reach, and the lockouts it learnt from other hosts. The op and
// outcome labels come from store/etcdstore's fixed sets.
type Etcd struct {
	calls    *prometheus.CounterVec   // op, outcome
	latency  *prometheus.HistogramVec // op
	lockouts prometheus.Counter
}

// NewEtcd registers the metrics of a host on etcd on reg. available says
// whether the host is in step with the shared state (fleet.Sync), read
// when scraped.
func NewEtcd(reg prometheus.Registerer, available func() bool) (*Etcd, error) {
	m := &Etcd{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_etcd_calls_total",
			Help: "Calls to the etcd cluster of the shared state, by operation (range, txn, put, delete, lease_grant, lease_revoke, watch, authenticate, other) and outcome (ok, unavailable, error)."},
			[]string{"op", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coily_etcd_call_seconds",
			Help: "Time of a call to the etcd cluster (a watch: to open), by operation.", Buckets: etcdBuckets}, []string{"op"}),
		lockouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "coily_lockouts_learnt_total",
			Help: "Lockouts taken on another host that came in force here through the shared state."}),
	}
	avail := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coily_shared_state_available",
		Help: "1 while this host is in step with the shared state in etcd and admits requests; 0 while it refuses them state-unavailable."},
		func() float64 { return one(available()) })
	var errs []error
	for _, c := range []prometheus.Collector{m.calls, m.latency, m.lockouts, avail} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// Call counts one call to the cluster (etcdstore.Config.Observe).
func (m *Etcd) Call(op, outcome string, took time.Duration) {
	m.calls.WithLabelValues(op, outcome).Inc()
	m.latency.WithLabelValues(op).Observe(took.Seconds())
}

// LockoutLearnt counts a lockout taken elsewhere that came in force here
// (fleet.Config.LockoutLearnt).
func (m *Etcd) LockoutLearnt() { m.lockouts.Inc() }
