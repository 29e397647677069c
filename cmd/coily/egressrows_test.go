package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/egress"

	"coily.dev/coily/internal/visibletest"
)

func TestEgressLine(t *testing.T) {
	for _, tc := range []struct {
		row  audit.EgressRow
		want string
	}{
		{audit.EgressRow{Host: "api.github.com", Port: 443, Decision: "allow", Conns: 3, BytesUp: 1234, BytesDown: 45_000, DurationMS: 820.4},
			"egress allow   api.github.com:443  3 conns  1.2 kB up  45 kB down  820ms"},
		{audit.EgressRow{Host: "evil.example", Port: 443, Decision: "deny", Reason: "not-allowlisted", Conns: 1},
			"egress deny    evil.example:443  1 conn  not-allowlisted"},
		{audit.EgressRow{Host: "registry.npmjs.org", Port: 443, Decision: "observe-deny", Reason: "not-allowlisted", Conns: 2, Failures: 1,
			BytesUp: 999, BytesDown: 3_149_000, DurationMS: 2140},
			"egress observe-deny  registry.npmjs.org:443  2 conns  1 failed  999 B up  3.1 MB down  2.1s  not-allowlisted"},
		{audit.EgressRow{Host: "::1", Port: 80, Decision: "deny", Reason: "loopback", Conns: 4},
			"egress deny    [::1]:80  4 conns  loopback"},
		{audit.EgressRow{Host: "a.example", Port: 8443, Decision: "allow", Conns: 1, BytesDown: 999_600, DurationMS: 185_000},
			"egress allow   a.example:8443  1 conn  0 B up  1.0 MB down  3m5s"},
		// Hostile: a host or decision with spaces stays one word; controls
		// are escaped by shellWord, and by printLine for the reason.
		{audit.EgressRow{Host: "a.example:443  9 conns", Port: 1, Decision: "allow", Conns: 1},
			"egress allow   ['a.example:443  9 conns']:1  1 conn  0 B up  0 B down  0ms"},
		{audit.EgressRow{Host: "x\x1b[2A\ncoily: approved", Port: 443, Decision: "deny now", Reason: "r\r\x1b]52;c;x\a", Conns: 1},
			`egress 'deny now'  [$'x\x1b[2A\ncoily: approved']:443  1 conn  0 B up  0 B down  0ms  r` + "\r\x1b]52;c;x\a"},
	} {
		if got := egressLine(tc.row); got != tc.want {
			t.Errorf("egressLine(%#v)\n got %q\nwant %q", tc.row, got, tc.want)
		}
	}
}

func TestHumanUnits(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 9949: "9.9 kB", 9950: "10 kB", 45_000: "45 kB",
		999_499: "999 kB", 999_500: "1.0 MB", 12_345_678: "12 MB", 7 << 40: "7.7 TB", 1 << 62: "4612 PB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for ms, want := range map[float64]string{0: "0ms", 0.4: "0ms", 820.4: "820ms", 999.4: "999ms", 1000: "1.0s", 59_940: "59.9s",
		61_000: "1m1s", 3_600_000: "1h0m0s", -5: "0ms"} {
		if got := humanMillis(ms); got != want {
			t.Errorf("humanMillis(%v) = %q, want %q", ms, got, want)
		}
	}
}

// The rows sandbox exec prints are the ones the server records.
func TestAuditRows(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 46, 23, 0, time.UTC)
	got := audit.EgressRows([]egress.Row{{Host: cmdtext.New(nil, "h.example"), Port: 443, Decision: egress.ObserveDeny, Reason: "not-allowlisted", Conns: 2,
		Failures: 1, BytesUp: 5, BytesDown: 7, Duration: 1500 * time.Microsecond, First: now, Last: now.Add(time.Second)}})
	want := audit.EgressRow{Host: "h.example", Port: 443, Decision: "observe-deny", Reason: "not-allowlisted", Conns: 2,
		Failures: 1, BytesUp: 5, BytesDown: 7, DurationMS: 1.5, First: now, Last: now.Add(time.Second)}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("auditRows = %+v, want %+v", got, want)
	}
}

// FuzzEgressLine: whatever a sandbox puts in a host and a reason, the row
// prints as one terminal-safe line whose host reads back, as one shell
// word, as the host.
func FuzzEgressLine(f *testing.F) {
	for _, h := range []string{"api.github.com", "::1", "", "a b", "x\x1b[2A\ncoily: approved", "\u202egnp.exe", "'", "[::1]:443", "\xff"} {
		f.Add(h, 443, "not-allowlisted\r\x1b[2K")
	}
	f.Fuzz(func(t *testing.T, host string, port int, reason string) {
		line := termText(egressLine(audit.EgressRow{Host: host, Port: port, Decision: "deny", Reason: reason, Conns: 1}))
		visibletest.CheckVisible(t, line)
		const head = "egress deny    "
		tail := "  1 conn"
		if reason != "" {
			tail += "  " + termText(reason)
		}
		target, okHead := strings.CutPrefix(line, head)
		target, okTail := strings.CutSuffix(target, tail)
		if !okHead || !okTail {
			t.Fatalf("%q: not %q, target, %q", line, head, tail)
		}
		word, ok := strings.CutSuffix(target, ":"+strconv.Itoa(port))
		if strings.Contains(host, ":") {
			var open, closed bool
			word, open = strings.CutPrefix(word, "[")
			word, closed = strings.CutSuffix(word, "]")
			ok = ok && open && closed
		}
		if back := visibletest.ShellSplit(t, word); !ok || len(back) != 1 || back[0] != host {
			t.Fatalf("%q: host reads back as %q, not %q", line, back, host)
		}
	})
}
