package console

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/visible"
)

// filter selects the audit records a stream sends. Every field empty
// matches everything.
type filter struct {
	principal string
	rule      string
	decision  string // "", "allow" or "refuse"
	event     string // exact, or a prefix when prefix is set ("exec.*")
	prefix    bool
	backlog   int // records to start with
}

// defaultBacklog is how many earlier records a stream starts with.
const defaultBacklog = 200

// maxFilterValue bounds one filter value.
const maxFilterValue = 256

// parseFilter reads a stream's query: principal, rule, decision (allow or
// refuse), event (exact, or ending in * for a prefix) and backlog (0 to
// webapi.MaxAuditBacklog), each at most once. An unknown parameter, a
// repeated one, or a value that is not plain visible text is refused: a
// filter that was silently dropped would show more than was asked.
func parseFilter(rawQuery string, maxBacklog int) (filter, error) {
	f := filter{backlog: min(defaultBacklog, maxBacklog)}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return filter{}, refusal.New(refusal.BadRequest, "malformed query")
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return filter{}, refusal.New(refusal.BadRequest, "filter %q given %d times", visible.Text(k), len(vs))
		}
		v := vs[0]
		if len(v) > maxFilterValue || !utf8.ValidString(v) || !visible.Clean(v) {
			return filter{}, refusal.New(refusal.BadRequest, "filter %q must be at most %d bytes of visible text", visible.Text(k), maxFilterValue)
		}
		switch k {
		case "principal":
			f.principal = v
		case "rule":
			f.rule = v
		case "decision":
			if v != "" && v != "allow" && v != "refuse" {
				return filter{}, refusal.New(refusal.BadRequest, "decision must be allow or refuse")
			}
			f.decision = v
		case "event":
			f.event, f.prefix = strings.CutSuffix(v, "*")
		case "backlog":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxBacklog {
				return filter{}, refusal.New(refusal.BadRequest, "backlog must be 0 to %d", maxBacklog)
			}
			f.backlog = n
		default:
			return filter{}, refusal.New(refusal.BadRequest, "unknown filter %q", visible.Text(k))
		}
	}
	return f, nil
}

// match reports whether r passes the filter.
func (f filter) match(r audit.Record) bool {
	switch {
	case f.principal != "" && r.Principal != f.principal:
		return false
	case f.rule != "" && r.Rule != f.rule:
		return false
	case f.decision != "" && r.Decision != f.decision:
		return false
	case f.prefix:
		return strings.HasPrefix(r.Event, f.event)
	case f.event != "":
		return r.Event == f.event
	}
	return true
}
