package main

import (
	"strings"
	"testing"

	"coily.dev/coily/server"
)

func TestParseSandboxUIDs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want server.UIDRange
		err  string
	}{
		{"", server.UIDRange{}, ""},
		{"none", server.UIDRange{Off: true}, ""},
		{"1879048192:4096", server.UIDRange{First: 1879048192, Count: 4096}, ""},
		{"1:1", server.UIDRange{First: 1, Count: 1}, ""},
		{"4294967294:1", server.UIDRange{First: 4294967294, Count: 1}, ""},
		{"4294967294:2", server.UIDRange{}, "at most 4294967294"},
		{"0:10", server.UIDRange{}, "above 0"},
		{"10:0", server.UIDRange{}, "COUNT 1 to 65536"},
		{"10:65537", server.UIDRange{}, "COUNT 1 to 65536"},
		{"10", server.UIDRange{}, "FIRST:COUNT"},
		{"-1:5", server.UIDRange{}, "FIRST:COUNT"},
		{"0x70000000:5", server.UIDRange{}, "FIRST:COUNT"},
		{"10:5:5", server.UIDRange{}, "FIRST:COUNT"},
		{" 10:5", server.UIDRange{}, "FIRST:COUNT"},
		{"10:+5", server.UIDRange{}, "FIRST:COUNT"},
		{"99999999999:1", server.UIDRange{}, "FIRST:COUNT"},
		{"None", server.UIDRange{}, "FIRST:COUNT"},
	} {
		got, err := parseSandboxUIDs(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %+v %v, want an error with %q", c.in, got, err, c.err)
		}
	}
}

func FuzzParseSandboxUIDs(f *testing.F) {
	for _, s := range []string{"", "none", "1879048192:4096", "0:10", "4294967294:2", "10:65537", "-1:5", "1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseSandboxUIDs(s)
		if err != nil || r.Off || (r.First == 0 && r.Count == 0) {
			return
		}
		if r.First <= 0 || r.Count <= 0 || r.Count > 65536 || r.First+r.Count-1 > 1<<32-2 {
			t.Fatalf("%q accepted as %+v", s, r)
		}
	})
}
