package egress

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"coily.dev/coily/cmdtext"
	"coily.dev/coily/scrub"
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
// (name not found, connection refused). Host and Message are what the
// command asked for and the sentence that refused it: command-controlled,
// so made safe to show (cmdtext) with the exec's secrets.
type Row struct {
	Host      cmdtext.Text  `json:"host"`
	Port      int           `json:"port"`
	Decision  Decision      `json:"decision"`
	Reason    string        `json:"reason,omitempty"`
	Message   cmdtext.Text  `json:"message,omitempty"` // the latest denial's sentence
	Conns     int           `json:"connections"`
	Failures  int           `json:"failures,omitempty"`
	BytesUp   int64         `json:"bytes_up"`
	BytesDown int64         `json:"bytes_down"`
	Duration  time.Duration `json:"duration"`
	First     time.Time     `json:"first"`
	Last      time.Time     `json:"last"`
}

// row is a Row as the proxy counts it, with the host and message raw.
type row struct {
	Row
	host, message string
}

type rowKey struct {
	host     string
	port     int
	decision Decision
}

// rows is the concurrency-safe table of Rows.
type rows struct {
	mu sync.Mutex
	m  map[rowKey]*row
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
		r.m, r.n = map[rowKey]*row{}, map[Decision]int{}
	}
	limit := MaxRows
	if k.decision == Deny {
		limit = MaxDenyRows
	}
	e := r.m[k]
	if e == nil && r.n[k.decision] >= limit {
		k = rowKey{host: OtherHosts, decision: k.decision}
		e = r.m[k]
	}
	fresh := e == nil
	if fresh {
		e = &row{Row: Row{Port: k.port, Decision: k.decision, First: now}, host: k.host}
		r.m[k] = e
		r.n[k.decision]++
	}
	e.Conns++
	e.Last = now
	if reason != "" {
		e.Reason = reason
	}
	if message != "" {
		e.message = message
	}
	return k, fresh
}

// finish adds a finished connection's traffic.
func (r *rows) finish(k rowKey, up, down int64, d time.Duration, failed bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[k]
	if e == nil {
		return
	}
	e.BytesUp += up
	e.BytesDown += down
	e.Duration += d
	if failed {
		e.Failures++
	}
	if now.After(e.Last) {
		e.Last = now
	}
}

// list is a copy of the rows sorted by host, port, decision, their host
// and message made safe to show with secrets.
func (r *rows) list(secrets *scrub.Set) []Row {
	r.mu.Lock()
	raw := make([]row, 0, len(r.m))
	for _, e := range r.m {
		raw = append(raw, *e)
	}
	r.mu.Unlock()
	slices.SortFunc(raw, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Decision, b.Decision))
	})
	out := make([]Row, len(raw))
	for i, e := range raw {
		out[i] = e.Row
		out[i].Host, out[i].Message = cmdtext.New(secrets, e.host), cmdtext.New(secrets, e.message)
	}
	return out
}
