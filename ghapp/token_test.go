package ghapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// Nothing that renders a Token shows its value: json, slog (text and
// JSON, as a value and in a group), fmt's verbs, on the token, a pointer
// to it and a struct holding it.
func TestTokenNeverShowsValue(t *testing.T) {
	const val = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
	tok := Token{Value: val, ExpiresAt: answerNow, Repository: Repository{"alice", "repo"}, Permissions: Permissions{"issues": "write"}}
	holder := struct{ Token Token }{tok}
	var out []string
	for _, v := range []any{tok, &tok, holder, &holder} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(data))
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
			out = append(out, fmt.Sprintf(verb, v))
		}
		out = append(out, fmt.Sprint(v), fmt.Sprintln(v))
		var buf bytes.Buffer
		for _, h := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
			slog.New(h).Info("minted", "token", v, slog.Group("g", "t", v))
			slog.New(h).With("token", v).Info("minted")
		}
		out = append(out, buf.String())
	}
	for _, s := range out {
		if strings.Contains(s, val) || strings.Contains(s, fmt.Sprintf("%x", val)) || strings.Contains(s, fmt.Sprintf("%X", val)) {
			t.Errorf("shows the token: %s", s)
		}
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("minted", "token", tok)
	if !strings.Contains(buf.String(), "token.repository=alice/repo token.permissions=issues:write") {
		t.Errorf("slog: %s", buf.String())
	}
	if s := fmt.Sprintf("%+v", tok); !strings.Contains(s, "installation token for alice/repo (issues:write)") {
		t.Errorf("%%+v: %s", s)
	}
}
