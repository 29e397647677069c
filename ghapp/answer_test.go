package ghapp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var answerNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func answerReq() Request {
	return Request{AppID: "1", Installation: 2, Repository: Repository{"alice", "repo"}, Permissions: Permissions{"issues": "write"}}
}

// answer is a well-formed 201 answer, changed by edit.
func answer(edit func(m map[string]any)) []byte {
	m := map[string]any{
		"token":                "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
		"expires_at":           answerNow.Add(time.Hour).Format(time.RFC3339),
		"permissions":          map[string]any{"issues": "write", "metadata": "read"},
		"repository_selection": "selected",
		"repositories":         []any{map[string]any{"id": 1, "name": "repo", "full_name": "alice/repo"}},
	}
	if edit != nil {
		edit(m)
	}
	data, _ := json.Marshal(m)
	return data
}

func TestCheckToken(t *testing.T) {
	tok, err := checkToken(answer(nil), answerReq(), answerNow)
	if err != nil || tok.Value == "" || tok.Repository != (Repository{"alice", "repo"}) || tok.Permissions.String() != "issues:write,metadata:read" {
		t.Fatalf("checkToken = %v, %v", tok, err)
	}
	if strings.Contains(tok.String()+tok.GoString(), tok.Value) {
		t.Fatal("a Token's String shows its value")
	}
	// Fewer permissions than asked, and the repository in another case,
	// are fine: the token is no wider than asked.
	for name, edit := range map[string]func(map[string]any){
		"less":        func(m map[string]any) { m["permissions"] = map[string]any{"issues": "read"} },
		"no metadata": func(m map[string]any) { m["permissions"] = map[string]any{"issues": "write"} },
		"case":        func(m map[string]any) { m["repositories"] = []any{map[string]any{"full_name": "Alice/Repo"}} },
		"stateless":   func(m map[string]any) { m["token"] = "ghs_1_eyJhbGciOiJ.eyJpc3Mi-_.sig" },
	} {
		if _, err := checkToken(answer(edit), answerReq(), answerNow); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCheckTokenHostile(t *testing.T) {
	const val = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
	for name, tc := range map[string]struct {
		edit   func(m map[string]any)
		raw    string
		hasTok bool // the answer's token is returned for revocation
	}{
		"not json":           {raw: "<html>"},
		"null":               {raw: "null"},
		"array":              {raw: "[]"},
		"no token":           {edit: func(m map[string]any) { delete(m, "token") }},
		"empty token":        {edit: func(m map[string]any) { m["token"] = "" }},
		"token not a string": {edit: func(m map[string]any) { m["token"] = 5 }},
		"token with a space": {edit: func(m map[string]any) { m["token"] = "ghs_a b" }},
		"token with newline": {edit: func(m map[string]any) { m["token"] = "ghs_a\nX-Evil: 1" }},
		"token too long":     {edit: func(m map[string]any) { m["token"] = strings.Repeat("a", maxToken+1) }},
		"no expiry":          {edit: func(m map[string]any) { delete(m, "expires_at") }, hasTok: true},
		"bad expiry":         {edit: func(m map[string]any) { m["expires_at"] = "tomorrow" }, hasTok: true},
		"expired":            {edit: func(m map[string]any) { m["expires_at"] = answerNow.Add(-time.Second).Format(time.RFC3339) }, hasTok: true},
		"lives a day":        {edit: func(m map[string]any) { m["expires_at"] = answerNow.Add(24 * time.Hour).Format(time.RFC3339) }, hasTok: true},
		"all repositories":   {edit: func(m map[string]any) { m["repository_selection"] = "all"; delete(m, "repositories") }, hasTok: true},
		"no selection":       {edit: func(m map[string]any) { delete(m, "repository_selection") }, hasTok: true},
		"two repositories": {edit: func(m map[string]any) {
			m["repositories"] = []any{map[string]any{"full_name": "alice/repo"}, map[string]any{"full_name": "alice/other"}}
		}, hasTok: true},
		"no repositories":    {edit: func(m map[string]any) { m["repositories"] = []any{} }, hasTok: true},
		"another repository": {edit: func(m map[string]any) { m["repositories"] = []any{map[string]any{"full_name": "alice/other"}} }, hasTok: true},
		"another owner":      {edit: func(m map[string]any) { m["repositories"] = []any{map[string]any{"full_name": "mallory/repo"}} }, hasTok: true},
		"name only":          {edit: func(m map[string]any) { m["repositories"] = []any{map[string]any{"name": "repo"}} }, hasTok: true},
		"more permissions":   {edit: func(m map[string]any) { m["permissions"] = map[string]any{"issues": "write", "contents": "write"} }, hasTok: true},
		"higher level":       {edit: func(m map[string]any) { m["permissions"] = map[string]any{"issues": "admin"} }, hasTok: true},
		"metadata write":     {edit: func(m map[string]any) { m["permissions"] = map[string]any{"issues": "write", "metadata": "write"} }, hasTok: true},
		"unknown level":      {edit: func(m map[string]any) { m["permissions"] = map[string]any{"issues": "owner"} }, hasTok: true},
		"permissions a list": {edit: func(m map[string]any) { m["permissions"] = []any{"issues"} }, hasTok: true},
		"repositories a map": {edit: func(m map[string]any) { m["repositories"] = map[string]any{"full_name": "alice/repo"} }, hasTok: true},
	} {
		data := []byte(tc.raw)
		if tc.raw == "" {
			data = answer(tc.edit)
		}
		tok, err := checkToken(data, answerReq(), answerNow)
		if err == nil || !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: %v, want ErrBadToken", name, err)
			continue
		}
		if strings.Contains(err.Error(), val) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
		if (tok.Value != "") != tc.hasTok {
			t.Errorf("%s: returned token %q for revocation, want one: %v", name, tok.Value, tc.hasTok)
		}
	}
}

func FuzzCheckToken(f *testing.F) {
	f.Add(answer(nil))
	f.Add([]byte(`{"token":"x","expires_at":"2026-05-01T12:30:00Z","repository_selection":"selected","repositories":[{"full_name":"alice/repo"}],"permissions":{"issues":"write","contents":"read"}}`))
	f.Add([]byte(`{"token":"x","token":"y"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := checkToken(data, answerReq(), answerNow)
		if err != nil {
			if tok.Value != "" && strings.Contains(err.Error(), tok.Value) && len(tok.Value) > 8 {
				t.Fatalf("the error shows the token: %v", err)
			}
			return
		}
		if !validToken(tok.Value) || !tok.Repository.Equal(answerReq().Repository) ||
			len(beyond(tok.Permissions, answerReq().Permissions)) > 0 ||
			!tok.ExpiresAt.After(answerNow) || tok.ExpiresAt.After(answerNow.Add(MaxTokenLife+clockSkew)) {
			t.Fatalf("accepted %s from %s", tok, data)
		}
	})
}

func TestCheckPermission(t *testing.T) {
	if err := CheckPermission("issues", "write"); err != nil {
		t.Error(err)
	}
	for _, p := range [][2]string{{"issues", "admin"}, {"issues", ""}, {"members", "read"}, {"Issues", "read"},
		{"organization_administration", "write"}, {"", "read"}, {"issues", "WRITE"}} {
		if CheckPermission(p[0], p[1]) == nil {
			t.Errorf("%s: %s accepted", p[0], p[1])
		}
	}
}
