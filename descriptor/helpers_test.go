package descriptor

import (
	"errors"
	"strings"
	"testing"
)

// baseFields is a valid request, as YAML member texts in document order.
var baseFields = [][2]string{
	{"version", "1"},
	{"id", "0f8fad5b-d9cb-469f-a165-70867728950e"},
	{"created_at", "2026-01-02T03:04:05Z"},
	{"nonce", "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19"},
	{"sandbox", "agent-1"},
	{"argv", "[git, status, --short]"},
	{"cwd", "src"},
	{"env", "{LANG: C.UTF-8, GIT_PAGER: cat}"},
	{"stdin", `"hello\n"`},
	{"timeout", "60"},
	{"requires_confirm", "false"},
	{"note", "check the tree"},
	{"hmac", strings.Repeat("ab", 32)},
}

// yamlDoc returns the base request changed by mods: "key=text" sets (or
// appends) a member, "-key" drops one.
func yamlDoc(mods ...string) string {
	fields := append([][2]string(nil), baseFields...)
	for _, m := range mods {
		if k, ok := strings.CutPrefix(m, "-"); ok {
			for i := range fields {
				if fields[i][0] == k {
					fields = append(fields[:i], fields[i+1:]...)
					break
				}
			}
			continue
		}
		k, v, _ := strings.Cut(m, "=")
		found := false
		for i := range fields {
			if fields[i][0] == k {
				fields[i][1], found = v, true
			}
		}
		if !found {
			fields = append(fields, [2]string{k, v})
		}
	}
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(f[0] + ": " + f[1] + "\n")
	}
	return b.String()
}

// baseJSON is the base request as JSON.
const baseJSON = `{
  "version": 1,
  "id": "0f8fad5b-d9cb-469f-a165-70867728950e",
  "created_at": "2026-01-02T03:04:05Z",
  "nonce": "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19",
  "sandbox": "agent-1",
  "argv": ["git", "status", "--short"],
  "cwd": "src",
  "env": {"LANG": "C.UTF-8", "GIT_PAGER": "cat"},
  "stdin": "hello\n",
  "timeout": 60,
  "requires_confirm": false,
  "note": "check the tree",
  "hmac": "abababababababababababababababababababababababababababababababab"
}`

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	return e
}

func testKey() []byte {
	k := make([]byte, KeySize)
	for i := range k {
		k[i] = byte(i)
	}
	return k
}
