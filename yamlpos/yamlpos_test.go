package yamlpos

import (
	"strings"
	"testing"

	"coily.dev/coily/internal/hostileyaml"
)

var cases = []struct {
	name      string
	text      string
	line, col int
	msg       string
}{
	{"unclosed [ on line 4", "version: 1\nroles:\n  op:\n    permissions: [exec, status\n    commands: [\"*\"]\n", 4, 18, "unclosed ["},
	{"unclosed { on line 2", "a: 1\nb: {x: 1, y: 2\nc: 3\n", 2, 4, "unclosed {"},
	{"brackets in quotes do not count", "a: \"[\"\nb: [1, 2\nc: 3\n", 2, 4, "unclosed ["},
	{"bad indent on line 5", "version: 1\nroles:\n  op:\n    permissions: [exec]\n     commands: [\"*\"]\n", 5, 6, ""},
	{"unclosed quote on line 2", "a: 1\nb: \"never\n", 2, 4, "double-quoted"},
	{"tab", "a:\n\tb: 1\n", 2, 1, `\t`},
	{"scalar run on into a key", "env:\n  A: b\n   C: d\n", 3, 5, "mapping value"},
}

func TestLocate(t *testing.T) {
	for _, c := range cases {
		p, ok := Locate([]byte(c.text))
		if !ok || p.Line != c.line || p.Column != c.col || !strings.Contains(p.Msg, c.msg) {
			t.Errorf("%s: %+v %v; want %d:%d %q", c.name, p, ok, c.line, c.col, c.msg)
		}
	}
	if _, ok := Locate([]byte("a: [1, 2]\nb: {c: d}\n")); ok {
		t.Error("valid YAML located an error")
	}
}

// FuzzLocate: never panics; a position, when there is one, lies within the
// input and its message has no control characters.
func FuzzLocate(f *testing.F) {
	for _, c := range cases {
		f.Add(c.text)
	}
	for _, c := range hostileyaml.Cases("version: 1\n", 2<<10, 8, 20000) {
		f.Add(string(c.Data))
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, ok := Locate([]byte(text))
		if !ok {
			return
		}
		if p.Line < 1 || p.Line > strings.Count(text, "\n")+strings.Count(text, "\r")+2 || p.Column < 0 {
			t.Fatalf("position %d:%d outside %q", p.Line, p.Column, text)
		}
		for _, r := range p.Msg {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("control character in %q", p.Msg)
			}
		}
	})
}
