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

// EgressRequests is the record's form of the request rows of an egress
// proxy's inspected connections; dropped are those it did not keep.
func EgressRequests(rows []egress.RequestRow) []EgressRequest {
	var out []EgressRequest
	for _, r := range rows {
		out = append(out, EgressRequest{Time: r.Time, Host: r.Host.String(), Port: r.Port, Method: r.Method.String(),
			Path: r.Path.String(), Query: r.Query, Decision: string(r.Decision), Reason: r.Reason, Status: r.Status,
			BytesUp: r.BytesUp, BytesDown: r.BytesDown, Injected: r.Injected, Proto: r.Proto})
	}
	return out
}
