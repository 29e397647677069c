package cli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"coily.dev/coily/internal/visibletest"
)

// Text and Argv are package visible's (tested there, with a real bash):
// the CLI prints exactly what they give, for every hostile input.
func TestTermTextAndArgvAreVisibles(t *testing.T) {
	for _, tc := range visibletest.HostileText {
		if got := Text(tc.In); got != tc.Want {
			t.Errorf("Text(%q) = %q, want %q", tc.In, got, tc.Want)
		}
	}
	for _, tc := range visibletest.HostileArgv {
		if got := Argv(tc.In); got != tc.Want {
			t.Errorf("Argv(%q) = %s, want %s", tc.In, got, tc.Want)
		}
	}
}

func TestPrintLineEscapesTheWholeLine(t *testing.T) {
	var b bytes.Buffer
	PrintLine(&b, "coily: refused (%s): %s", "policy-deny\x1b[31m", "binary x\ncoily: approved\r is not an absolute path")
	want := `coily: refused (policy-deny\x1b[31m): binary x\ncoily: approved\r is not an absolute path` + "\n"
	if b.String() != want {
		t.Fatalf("PrintLine wrote %q, want %q", b.String(), want)
	}
}

func TestTermJSON(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"C1", "\u009b2J", `\u009b2J`},
		{"DEL", "a\x7fb", `a\u007fb`},
		{"bidi", "\u202etxt.exe\u2066", `\u202etxt.exe\u2066`},
		{"tag above U+FFFF", "\U000e0041", `\udb40\udc41`},
		{"C0 stays the encoder's", "\x1b[2A\n", `\u001b[2A\n`},
		{"letters unchanged", "héllo 日本 🙂", "héllo 日本 🙂"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, _ := json.Marshal(map[string]string{"s": tc.in})
			got := JSON(enc)
			if want := `{"s":"` + tc.want + `"}`; string(got) != want {
				t.Fatalf("JSON(%s) = %s, want %s", enc, got, want)
			}
			visibletest.CheckVisible(t, string(got))
			var back map[string]string
			if err := json.Unmarshal(got, &back); err != nil || back["s"] != tc.in {
				t.Fatalf("%s decodes to %q (%v), want %q", got, back["s"], err, tc.in)
			}
		})
	}
	multi := []byte("{\n  \"a\": \"\u202e\"\n}")
	if got := string(JSON(multi)); got != "{\n  \"a\": \"\\u202e\"\n}" {
		t.Fatalf("multiline JSON: %q", got)
	}
}

func FuzzTermJSON(f *testing.F) {
	for _, tc := range visibletest.HostileText {
		f.Add(tc.In)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc, err := json.Marshal([]string{s})
		if err != nil {
			t.Fatal(err)
		}
		got := JSON(enc)
		visibletest.CheckVisible(t, string(got))
		var want, back []string
		if err := json.Unmarshal(enc, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, want) {
			t.Fatalf("%s decodes to %q (%v), not %q", got, back, err, want)
		}
	})
}
