package main

// The egress rows of a command (the hosts its proxy was asked for), as
// `coily audit show|tail` and `coily sandbox exec` print them: one line a
// row, every line through printLine. Hosts and reasons come from inside a
// sandbox: the host is one shell word (so a space cannot forge a column)
// and the whole line is escaped.

import (
	"coily.dev/coily/cli"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/egress"
)

// egressLine renders one row: decision, host:port, connections, then for
// what went through the bytes each way and the time, and the reason of a
// denial, e.g.
//
//	egress allow   api.github.com:443  3 conns  1.2 kB up  45 kB down  820ms
//	egress deny    evil.example:443  1 conn  not-allowlisted
func egressLine(r audit.EgressRow) string {
	parts := []string{fmt.Sprintf("egress %-6s  %s", cli.ShellWord(r.Decision), egressTarget(r.Host, r.Port)), plural(r.Conns, "conn", "conns")}
	if r.Failures != 0 {
		parts = append(parts, fmt.Sprintf("%d failed", r.Failures))
	}
	if r.Decision != string(egress.Deny) {
		parts = append(parts, humanBytes(r.BytesUp)+" up", humanBytes(r.BytesDown)+" down", humanMillis(r.DurationMS))
	}
	if r.Reason != "" {
		parts = append(parts, r.Reason)
	}
	return strings.Join(parts, "  ")
}

// egressTarget is host:port with the host as one shell word, in brackets
// when it holds a colon (IPv6).
func egressTarget(host string, port int) string {
	h := cli.ShellWord(host)
	if strings.Contains(host, ":") {
		return "[" + h + "]:" + strconv.Itoa(port)
	}
	return net.JoinHostPort(h, strconv.Itoa(port))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// humanBytes writes n in decimal units, two or three significant digits:
// 999 B, 1.2 kB, 45 kB, 3.1 MB.
func humanBytes(n int64) string {
	if n < 1000 && n > -1000 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v := float64(n)
	for _, unit := range []string{"kB", "MB", "GB", "TB", "PB"} {
		v /= 1000
		switch {
		case v < 9.95 && v > -9.95:
			return fmt.Sprintf("%.1f %s", v, unit)
		case v < 999.5 && v > -999.5 || unit == "PB":
			return fmt.Sprintf("%.0f %s", v, unit)
		}
	}
	panic("unreachable")
}

// humanMillis writes a duration given in milliseconds: 820ms, 2.1s, 3m5s.
func humanMillis(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case d < 0:
		return "0ms"
	case d < time.Second:
		return strconv.FormatInt(int64(d.Round(time.Millisecond)/time.Millisecond), 10) + "ms"
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// egressRequestLine renders one request of an inspected connection:
// decision, host:port, method, path, status, body bytes each way, then
// "injected" and the reason of a refusal, e.g.
//
//	request allow  api.github.com:443  GET /repos/alice/app  200  0 B up  5.1 kB down  injected
//	request deny   api.github.com:443  DELETE /repos/alice/app  403  0 B up  0 B down  http-rule
func egressRequestLine(q audit.EgressRequest) string {
	parts := []string{fmt.Sprintf("request %-5s  %s", cli.ShellWord(q.Decision), egressTarget(q.Host, q.Port)),
		cli.ShellWord(q.Method) + " " + cli.ShellWord(q.Path), strconv.Itoa(q.Status),
		humanBytes(q.BytesUp) + " up", humanBytes(q.BytesDown) + " down"}
	if q.Injected {
		parts = append(parts, "injected")
	}
	if q.Query != "" { // a hash, never the query's text
		parts = append(parts, "query "+cli.ShellWord(q.Query))
	}
	if q.Reason != "" {
		parts = append(parts, cli.ShellWord(q.Reason))
	}
	return strings.Join(parts, "  ")
}
