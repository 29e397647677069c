package console

import (
	"strings"
	"testing"
	"unicode/utf8"

	"coily.dev/coily/refusal"
)

var bodyCases = []struct {
	name, ct, body string
	want           string
	ok             bool
}{
	{"bare POST", "", "", "", true},
	{"bare POST whatever its type", "text/plain", "", "", true},
	{"only whitespace", "", " \n\t", "", true},
	{"note", "application/json", `{"note":"looks fine"}`, "looks fine", true},
	{"empty object", "application/json", `{}`, "", true},
	{"charset", "application/json; charset=utf-8", `{"note":"x"}`, "x", true},
	{"charset upper", "application/json; charset=UTF-8", `{"note":"x"}`, "x", true},
	{"escapes kept for the server to judge", "application/json", `{"note":"a\u001b[2J\u202eb"}`, "a\x1b[2J\u202eb", true},
	{"json null note", "application/json", `{"note":null}`, "", true},
	{"no type", "", `{"note":"x"}`, "", false},
	{"form", "application/x-www-form-urlencoded", "note=x", "", false},
	{"text", "text/plain", `{"note":"x"}`, "", false},
	{"other charset", "application/json; charset=latin1", `{"note":"x"}`, "", false},
	{"other parameter", "application/json; boundary=x", `{"note":"x"}`, "", false},
	{"malformed type", "application/json; ;", `{"note":"x"}`, "", false},
	{"json+ld", "application/ld+json", `{"note":"x"}`, "", false},
	{"array", "application/json", `["note"]`, "", false},
	{"string", "application/json", `"note"`, "", false},
	{"null", "application/json", `null`, "", false},
	{"number note", "application/json", `{"note":1}`, "", false},
	{"object note", "application/json", `{"note":{"a":1}}`, "", false},
	{"other field", "application/json", `{"reason":"x"}`, "", false},
	{"extra field", "application/json", `{"note":"x","verdict":"approve"}`, "", false},
	{"duplicate field", "application/json", `{"note":"x","note":"y"}`, "", false},
	{"two values", "application/json", `{"note":"x"} {"note":"y"}`, "", false},
	{"trailing garbage", "application/json", `{"note":"x"}]`, "", false},
	{"truncated", "application/json", `{"note":"x`, "", false},
	{"invalid UTF-8", "application/json", "{\"note\":\"\xff\"}", "\ufffd", true},
	{"too long", "application/json", `{"note":"` + strings.Repeat("a", maxBody) + `"}`, "", false},
}

func TestDecodeBody(t *testing.T) {
	for _, tc := range bodyCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeBody(tc.ct, []byte(tc.body), "note")
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("decodeBody = %q, %v; want %q ok=%v", got, err, tc.want, tc.ok)
			}
			if err != nil && refusal.As(err).Code != refusal.BadRequest {
				t.Fatalf("refused with %v, want bad-request", err)
			}
		})
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, tc := range bodyCases {
		f.Add(tc.ct, []byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		got, err := decodeBody(ct, body, "note")
		if err != nil {
			if got != "" || refusal.As(err).Code != refusal.BadRequest {
				t.Fatalf("refusal %v with text %q", err, got)
			}
			return
		}
		if len(body) > maxBody || !utf8.ValidString(got) {
			t.Fatalf("accepted %d bytes as %q", len(body), got)
		}
		if got != "" && !strings.HasPrefix(strings.TrimSpace(strings.ToLower(ct)), "application/json") {
			t.Fatalf("text %q from a body of type %q", got, ct)
		}
	})
}
