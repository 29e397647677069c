package notify

import "github.com/prometheus/client_golang/prometheus"

// Results of a notification (the result label): every notification a sink
// was to deliver ends as exactly one of them.
const (
	resultSent    = "sent"
	resultFailed  = "failed"
	resultDropped = "dropped"
)

// metrics count deliveries by sink (ntfy, webhook) and result; both
// labels come from fixed sets.
type metrics struct {
	results *prometheus.CounterVec
	retries *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, sinks []string) (*metrics, error) {
	m := &metrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_notifications_total",
			Help: "Notifications by sink (ntfy, webhook) and result (sent; failed after every attempt; dropped: the sink's queue was full)."},
			[]string{"sink", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_notification_retries_total",
			Help: "Delivery attempts that failed and were tried again, by sink."}, []string{"sink"}),
	}
	for _, c := range []prometheus.Collector{m.results, m.retries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range sinks {
		for _, r := range []string{resultSent, resultFailed, resultDropped} {
			m.results.WithLabelValues(s, r)
		}
		m.retries.WithLabelValues(s)
	}
	return m, nil
}

func (m *metrics) result(sink, result string) { m.results.WithLabelValues(sink, result).Inc() }

func (m *metrics) retry(sink string) { m.retries.WithLabelValues(sink).Inc() }
