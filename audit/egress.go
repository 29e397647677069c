package audit

import "coily.dev/coily/egress"

// EgressRows is the record's form of an egress proxy's rows.
func EgressRows(rows []egress.Row) []EgressRow {
	var out []EgressRow
	for _, r := range rows {
		out = append(out, EgressRow{Host: r.Host.String(), Port: r.Port, Decision: string(r.Decision), Reason: r.Reason,
			Conns: r.Conns, Failures: r.Failures, BytesUp: r.BytesUp, BytesDown: r.BytesDown,
			DurationMS: float64(r.Duration.Microseconds()) / 1000, First: r.First, Last: r.Last})
	}
	return out
}
