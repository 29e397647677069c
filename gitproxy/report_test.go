package gitproxy

import (
	"fmt"
	"strings"
	"testing"
)

// band is data as one side-band packet.
func band(n byte, data string) string { return pkt(string([]byte{n}) + data) }

// status is a report-status on band 1, then the final flush.
func status(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(pkt(l + "\n"))
	}
	b.WriteString("0000")
	return band(1, b.String()) + "0000"
}

var reportCases = []struct {
	name, in string
	ok       bool
	refs     map[string]string
	said     string
}{
	{name: "accepted", in: status("unpack ok", "ok refs/heads/x"), ok: true, refs: map[string]string{"refs/heads/x": ""}},
	{name: "refused by a hook, its message on band 2",
		in: band(2, "protected\nby upstream\n") + status("unpack ok", "ng refs/heads/x pre-receive hook declined"),
		ok: true, refs: map[string]string{"refs/heads/x": "pre-receive hook declined"}, said: "by upstream"},
	{name: "report split over packets, keepalives between",
		in: band(1, pkt("unpack ok\n")[:7]) + band(1, "") + band(1, pkt("unpack ok\n")[7:]+pkt("ok refs/heads/x\n")+"0000") + "0000",
		ok: true, refs: map[string]string{"refs/heads/x": ""}},
	{name: "ng without a reason", in: status("unpack ok", "ng refs/heads/x"), ok: true, refs: map[string]string{"refs/heads/x": "refused"}},
	{name: "unpack failed", in: status("unpack index-pack abnormal exit"), ok: true, refs: map[string]string{}},
	{name: "fatal on band 3", in: band(3, "upstream is down\n") + status("unpack ok", "ok refs/heads/x")},
	{name: "unknown band", in: band(4, "x") + status("unpack ok", "ok refs/heads/x")},
	{name: "packet without a band", in: "0004" + status("unpack ok", "ok refs/heads/x")},
	{name: "no final flush", in: band(1, pkt("unpack ok\n")+pkt("ok refs/heads/x\n")+"0000")},
	{name: "report without its flush", in: band(1, pkt("unpack ok\n")+pkt("ok refs/heads/x\n")) + "0000"},
	{name: "empty report", in: band(1, "0000") + "0000"},
	{name: "nothing", in: ""},
	{name: "no unpack line first", in: status("ok refs/heads/x", "unpack ok")},
	{name: "a ref reported twice", in: status("unpack ok", "ok refs/heads/x", "ng refs/heads/x no")},
	{name: "ok with trailing words", in: status("unpack ok", "ok refs/heads/x but not really")},
	{name: "unknown status verb", in: status("unpack ok", "maybe refs/heads/x")},
	{name: "ok without a ref", in: status("unpack ok", "ok")},
	{name: "data after the report", in: band(1, pkt("unpack ok\n")+pkt("ok refs/heads/x\n")+"0000"+pkt("ok refs/heads/y\n")) + "0000"},
	{name: "length not hex", in: "00zz" + status("unpack ok")},
	{name: "length with a sign", in: "+004" + status("unpack ok")},
	{name: "length under four", in: "0003" + status("unpack ok")},
	{name: "length past the data", in: "ffff\x01unpack ok"},
	{name: "inner length past the data", in: band(1, "00ffunpack ok\n") + "0000"},
	{name: "a report larger than the bound", in: band(1, pkt("unpack ok\n")) + strings.Repeat(band(1, strings.Repeat("x", 60000)), maxReportBytes/60000+1) + "0000"},
	{name: "more said than the report's bound, then accepted (what upstream applied is not read as refused)",
		in: strings.Repeat(band(2, strings.Repeat("x", 60000)+"\n"), 2*maxReportBytes/60000+1) + band(2, "done\n") + status("unpack ok", "ok refs/heads/x"),
		ok: true, refs: map[string]string{"refs/heads/x": ""}, said: "done"},
}

// readReport reads upstream's side-band report-status, and refuses what
// does not read as one.
func TestReadReport(t *testing.T) {
	for _, c := range reportCases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := readReport(strings.NewReader(c.in))
			if (err == nil) != c.ok {
				t.Fatalf("err=%v, want ok=%v", err, c.ok)
			}
			if err != nil {
				return
			}
			if fmt.Sprint(rep.refs) != fmt.Sprint(c.refs) || rep.said != c.said {
				t.Fatalf("got refs %v said %q, want %v %q", rep.refs, rep.said, c.refs, c.said)
			}
		})
	}
}

// FuzzReadReport: readReport never panics, and what it accepts has its
// refs and a bounded message.
func FuzzReadReport(f *testing.F) {
	for _, c := range reportCases {
		if len(c.in) < 64<<10 {
			f.Add(c.in)
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		rep, err := readReport(strings.NewReader(in))
		if err != nil {
			return
		}
		if rep.refs == nil || len(rep.said) > 1010 || strings.ContainsAny(rep.said, "\n\r") {
			t.Fatalf("accepted %q: %+v", in, rep)
		}
	})
}
