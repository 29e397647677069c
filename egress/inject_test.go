package egress

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseForm(t *testing.T) {
	for _, s := range []string{"bearer", "token", "basic", "header", "sigv4"} {
		f, err := ParseForm(s)
		if err != nil || f.String() != s {
			t.Errorf("ParseForm(%q) = %v, %v", s, f, err)
		}
	}
	for _, s := range []string{"", "Bearer", "BASIC", "cookie", "header:x", "SigV4", "sigv4a"} {
		if _, err := ParseForm(s); err == nil {
			t.Errorf("ParseForm(%q) succeeded", s)
		}
	}
}

func TestInjectionSwap(t *testing.T) {
	ph := NewPlaceholder()
	if !strings.HasPrefix(ph, PlaceholderPrefix) || len(ph) != len(PlaceholderPrefix)+32 || ph == NewPlaceholder() {
		t.Fatalf("placeholder %q", ph)
	}
	cases := []struct {
		in    Injection
		value string
		want  string // "" for refused
	}{
		{Injection{Form: FormBearer}, "Bearer " + ph, "Bearer S"},
		{Injection{Form: FormBearer}, "bearer " + ph, "Bearer S"},
		{Injection{Form: FormBearer}, "Bearer " + ph + "x", ""},
		{Injection{Form: FormBearer}, "token " + ph, ""},
		{Injection{Form: FormBearer}, ph, ""},
		{Injection{Form: FormToken}, "token " + ph, "token S"},
		{Injection{Form: FormBasic}, "Basic " + base64Std("x-access-token:"+ph), "Basic " + base64Std("x-access-token:S")},
		{Injection{Form: FormBasic}, "Basic " + base64Std(ph+":x"), ""},
		{Injection{Form: FormBasic}, "Basic " + base64Std(ph+":"+ph), ""},
		{Injection{Form: FormBasic}, "Basic !!", ""},
		{Injection{Form: FormHeader, Header: "x-api-key"}, ph, "S"},
		{Injection{Form: FormHeader, Header: "x-api-key"}, " " + ph, ""},
	}
	for _, tc := range cases {
		tc.in.Placeholder, tc.in.Secret = ph, "S"
		got, ok := tc.in.swap(tc.value)
		if (tc.want == "") == ok || got != tc.want {
			t.Errorf("%v swap(%q) = %q, %v; want %q", tc.in.Form, tc.value, got, ok, tc.want)
		}
	}
}

func TestInjectHeaders(t *testing.T) {
	ph := NewPlaceholder()
	ins := []Injection{{Placeholder: ph, Secret: "S", Host: "api.test", PathPrefix: "/repos", Form: FormBearer},
		{Placeholder: ph, Secret: "S", Host: "api.test", Form: FormHeader, Header: "X-Api-Key"}}
	h := http.Header{"Authorization": {"Bearer " + ph}, "X-Api-Key": {ph}, "Accept": {"*/*"}}
	used, err := injectHeaders(h, "api.test", 443, "/repos/x", ins)
	if err != nil || len(used) != 2 || h.Get("Authorization") != "Bearer S" || h.Get("X-Api-Key") != "S" {
		t.Fatalf("%v %v %v", used, err, h)
	}
	for _, bad := range []http.Header{
		{"Authorization": {"Bearer " + ph}, "Cookie": {"t=" + ph}},
		{"X-" + ph: {"1"}},
		{"Proxy-Authorization": {"Basic " + base64Std("u:"+ph)}},
	} {
		if _, err := injectHeaders(bad, "api.test", 443, "/repos/x", ins); err == nil {
			t.Errorf("%v: placeholder not refused", bad)
		}
	}
	if _, err := injectHeaders(http.Header{"Authorization": {"Bearer " + ph}}, "api.test", 443, "/user", ins); err == nil {
		t.Error("placeholder outside the path prefix not refused")
	}
	if _, err := injectHeaders(http.Header{"Authorization": {"Bearer " + ph}}, "api.test", 8443, "/repos/x", ins); err == nil {
		t.Error("placeholder to another port than the injection's (443) not refused")
	}
}

func TestScanReader(t *testing.T) {
	ph := NewPlaceholder()
	ins := []Injection{{Placeholder: ph}}
	for _, split := range []bool{false, true} {
		wrap := func(s string) io.Reader {
			if split {
				return iotest.OneByteReader(strings.NewReader(s))
			}
			return strings.NewReader(s)
		}
		body := strings.Repeat("x", 70000) + ph[:10]
		out, err := io.ReadAll(newScanReader(wrap(body), ins, 0))
		if err != nil || string(out) != body {
			t.Errorf("split=%v: clean body: %d bytes, %v", split, len(out), err)
		}
		s := newScanReader(wrap(strings.Repeat("y", 40000)+ph+"tail"), ins, 0)
		out, err = io.ReadAll(s)
		if !errors.Is(err, errBodyPlaceholder) || !s.found || bytes.Contains(out, []byte(ph[:len(ph)-1])) {
			t.Errorf("split=%v: placeholder: %v found=%v, passed on a prefix of it: %v", split, err, s.found, bytes.Contains(out, []byte(ph[:20])))
		}
		c := newScanReader(wrap(strings.Repeat("z", 101)), ins, 100)
		if _, err := io.ReadAll(c); !errors.Is(err, errBodyCap) || !c.capped {
			t.Errorf("split=%v: over the cap: %v", split, err)
		}
	}
}

// FuzzScanReader: the bytes passed on are a prefix of the input that
// holds no placeholder, and all of it when the input holds none.
func FuzzScanReader(f *testing.F) {
	ph := "coily-placeholder-0123456789abcdef0123456789abcdef"
	f.Add([]byte("hello"), uint8(1))
	f.Add([]byte("a"+ph+"b"), uint8(7))
	f.Add([]byte(ph[:30]+ph), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		r := io.Reader(bytes.NewReader(data))
		if chunk%2 == 1 {
			r = iotest.OneByteReader(r)
		} else if chunk%3 == 0 {
			r = iotest.HalfReader(r)
		}
		out, err := io.ReadAll(newScanReader(r, []Injection{{Placeholder: ph}}, 0))
		if !bytes.HasPrefix(data, out) || bytes.Contains(out, []byte(ph)) {
			t.Fatalf("passed on %q of %q", out, data)
		}
		if has := bytes.Contains(data, []byte(ph)); has != errors.Is(err, errBodyPlaceholder) || (!has && !bytes.Equal(out, data)) {
			t.Fatalf("%q: out %q err %v", data, out, err)
		}
	})
}
