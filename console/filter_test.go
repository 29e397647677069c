package console

import (
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/visible"
)

var filterCases = []struct {
	name, query string
	want        filter
	ok          bool
}{
	{"none", "", filter{backlog: defaultBacklog}, true},
	{"all", "principal=tag:owner&rule=gh&decision=refuse&event=exec.*&backlog=5",
		filter{principal: "tag:owner", rule: "gh", decision: "refuse", event: "exec.", prefix: true, backlog: 5}, true},
	{"exact event", "event=lockout", filter{event: "lockout", backlog: defaultBacklog}, true},
	{"empty values", "principal=&decision=", filter{backlog: defaultBacklog}, true},
	{"escaped", "principal=alice%40example.com", filter{principal: "alice@example.com", backlog: defaultBacklog}, true},
	{"unknown key", "color=red", filter{}, false},
	{"repeated key", "rule=a&rule=b", filter{}, false},
	{"bad decision", "decision=maybe", filter{}, false},
	{"negative backlog", "backlog=-1", filter{}, false},
	{"huge backlog", "backlog=100000", filter{}, false},
	{"backlog not a number", "backlog=1e3", filter{}, false},
	{"control in value", "principal=a%1b%5b2J", filter{}, false},
	{"newline in value", "rule=a%0Ab", filter{}, false},
	{"bidi in value", "rule=%E2%80%AEx", filter{}, false},
	{"invalid UTF-8", "rule=%FF", filter{}, false},
	{"too long", "rule=" + strings.Repeat("a", maxFilterValue+1), filter{}, false},
	{"bad escape", "rule=%zz", filter{}, false},
	{"semicolon", "rule=a;b", filter{}, false},
}

func TestParseFilter(t *testing.T) {
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFilter(tc.query, 500)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("parseFilter(%q) = %+v, %v; want %+v ok=%v", tc.query, got, err, tc.want, tc.ok)
			}
			if err != nil {
				if refusal.As(err).Code != refusal.BadRequest || !visible.Clean(refusal.As(err).Msg) {
					t.Fatalf("refusal %v", err)
				}
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	rec := audit.Record{Event: "exec.result", Principal: "tag:agent", Rule: "gh", Decision: "refuse"}
	for _, tc := range []struct {
		query string
		match bool
	}{
		{"", true},
		{"event=exec.*", true},
		{"event=exec.result", true},
		{"event=exec", false},
		{"event=*", true},
		{"principal=tag:agent&rule=gh&decision=refuse", true},
		{"principal=tag:agen", false},
		{"rule=g", false},
		{"decision=allow", false},
	} {
		f, err := parseFilter(tc.query, 500)
		if err != nil {
			t.Fatal(err)
		}
		if f.match(rec) != tc.match {
			t.Errorf("%q matches %v, want %v", tc.query, !tc.match, tc.match)
		}
	}
}

func FuzzParseFilter(f *testing.F) {
	for _, tc := range filterCases {
		f.Add(tc.query)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got, err := parseFilter(q, 500)
		if err != nil {
			if got != (filter{}) || refusal.As(err).Code != refusal.BadRequest || !visible.Clean(refusal.As(err).Msg) {
				t.Fatalf("refusal %v with %+v", err, got)
			}
			return
		}
		for _, v := range []string{got.principal, got.rule, got.event} {
			if len(v) > maxFilterValue || !visible.Clean(v) {
				t.Fatalf("accepted %q", v)
			}
		}
		if got.backlog < 0 || got.backlog > 500 || (got.decision != "" && got.decision != "allow" && got.decision != "refuse") {
			t.Fatalf("accepted %+v", got)
		}
	})
}
