package egress

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Decision is what the proxy did with a request.
type Decision string

const (
	Allow       Decision = "allow"
	Deny        Decision = "deny"
	ObserveDeny Decision = "observe-deny" // outside the allowlist, let through in observe mode
)

// Row aggregates the connections to one (Host, Port) with one Decision.
// Reason is the latest reason given for a denial (empty for allow).
// Failures counts connections let through that could not be established
// (name not found, connection refused).
type Row struct {
	Host      string        `json:"host"`
	Port      int           `json:"port"`
	Decision  Decision      `json:"decision"`
	Reason    string        `json:"reason,omitempty"`
	Message   string        `json:"message,omitempty"` // the latest denial's sentence
	Conns     int           `json:"connections"`
	Failures  int           `json:"failures,omitempty"`
	BytesUp   int64         `json:"bytes_up"`
	BytesDown int64         `json:"bytes_down"`
	Duration  time.Duration `json:"duration"`
	First     time.Time     `json:"first"`
	Last      time.Time     `json:"last"`
}

type rowKey struct {
	host     string
	port     int
	decision Decision
}

// rows is the concurrency-safe table of Rows.
type rows struct {
	mu sync.Mutex
	m  map[rowKey]*Row
	n  map[Decision]int // rows per decision, overflow rows included
}

// MaxRows bounds the distinct (host, port) rows of one proxy for each of
// allow and observe-deny, MaxDenyRows those of deny (so that refusals,
// which cost a command nothing, cannot crowd out where it did go);
// connections past them are counted in one row per decision whose host
// is OtherHosts and port 0.
const (
	MaxRows     = 256
	MaxDenyRows = 64
)

// OtherHosts is the host of the rows that count connections past MaxRows.
const OtherHosts = "(other hosts)"

// start counts a connection for the key at time now and returns the key
// it was counted under (k, or its decision's overflow row) and whether
// that row is new.
func (r *rows) start(k rowKey, reason, message string, now time.Time) (rowKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m, r.n = map[rowKey]*Row{}, map[Decision]int{}
	}
	limit := MaxRows
	if k.decision == Deny {
		limit = MaxDenyRows
	}
	row := r.m[k]
	if row == nil && r.n[k.decision] >= limit {
		k = rowKey{host: OtherHosts, decision: k.decision}
		row = r.m[k]
	}
	fresh := row == nil
	if fresh {
		row = &Row{Host: k.host, Port: k.port, Decision: k.decision, First: now}
		r.m[k] = row
		r.n[k.decision]++
	}
	row.Conns++
	row.Last = now
	if reason != "" {
		row.Reason = reason
	}
	if message != "" {
		row.Message = message
	}
	return k, fresh
}

// finish adds a finished connection's traffic.
func (r *rows) finish(k rowKey, up, down int64, d time.Duration, failed bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row := r.m[k]
	if row == nil {
		return
	}
	row.BytesUp += up
	row.BytesDown += down
	row.Duration += d
	if failed {
		row.Failures++
	}
	if now.After(row.Last) {
		row.Last = now
	}
}

// list is a copy of the rows sorted by host, port, decision.
func (r *rows) list() []Row {
	r.mu.Lock()
	out := make([]Row, 0, len(r.m))
	for _, row := range r.m {
		out = append(out, *row)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Decision, b.Decision))
	})
	return out
}
