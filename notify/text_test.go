package notify

import (
	"strings"
	"testing"
	"unicode/utf8"
)

var hostileText = []struct{ in, want string }{
	{"tag:agent", "tag:agent"},
	{"alice@example.com", "alice@example.com"},
	{"evil\r\nX-Injected: 1", "evil??X-Injected: 1"},
	{"a\x00b\x1bc\x7f", "a?b?c?"},
	{"\u202egnp.exe", "?gnp.exe"},                              // right-to-left override
	{"zero\u200bwidth\ufeff", "zero?width?"},                   // zero-width space, BOM
	{"line\u2028para\u2029", "line?para?"},                     // separators
	{"c1\u0085\u009b", "c1??"},                                 // NEL, CSI
	{"bad\xff\xfeutf8", "bad??utf8"},                           // invalid bytes
	{"ünïcødé ✓", "ünïcødé ✓"},                                 // printable stays
	{"tab\there", "tab?here"},                                  // tabs too
	{strings.Repeat("x", 200), strings.Repeat("x", 125) + "…"}, // bounded
}

func TestClean(t *testing.T) {
	for _, tc := range hostileText {
		if got := clean(tc.in, maxName); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestArgvLine(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"gh", "issue", "create", "--title", "a b"}, `gh issue create --title "a b"`},
		{[]string{"sh", "-c", "echo $HOME\nrm -rf /"}, `sh -c "echo $HOME\nrm -rf /"`},
		{[]string{"x", "\u202eevil", ""}, `x "\u202eevil" ""`},
		{[]string{"x", "'q'", "`b`"}, `x "'q'" "` + "`b`" + `"`},
	} {
		if got := argvLine(tc.argv); got != tc.want {
			t.Errorf("argvLine(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
	long := argvLine([]string{strings.Repeat("a", 5000), "b"})
	if len(long) > maxArgv || !strings.HasSuffix(long, "…") {
		t.Errorf("long argv: %d bytes", len(long))
	}
}

// safeText checks what clean promises.
func safeText(t *testing.T, s string, limit int) {
	t.Helper()
	if !utf8.ValidString(s) || len(s) > limit {
		t.Fatalf("%q: invalid UTF-8 or longer than %d", s, limit)
	}
	for _, r := range s {
		if unsafeRune(r) {
			t.Fatalf("%q keeps %U", s, r)
		}
	}
}

func FuzzClean(f *testing.F) {
	for _, tc := range hostileText {
		f.Add(tc.in, 64)
	}
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = 4 + int(uint(limit)%300)
		safeText(t, clean(s, limit), limit)
		line := argvLine(strings.Split(s, "|"))
		safeText(t, line, maxArgv)
		if strings.ContainsFunc(strings.TrimSuffix(line, "…"), func(r rune) bool { return r >= 0x7f }) {
			t.Fatalf("argvLine(%q) = %q is not ASCII", s, line)
		}
	})
}
