package policy_test

import (
	"maps"
	"testing"

	"coily.dev/coily/policy"
)

// pass_env: a shim offers the names of every rule for its command; the
// rule that allows the request takes those it lists, an explicit env
// value wins, the rest are dropped, and pass_env names count as env.
func TestWithPassEnv(t *testing.T) {
	p, err := policy.Parse("passenv.yaml", []byte(`version: 1
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - name: git-push
    binary: /usr/bin/git
    args: [push, "**"]
    flags: any
  - name: git
    binary: /usr/bin/git
    args: ["**"]
    flags: any
    env: [GIT_TERMINAL_PROMPT]
    pass_env: [GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := policy.Subject{Principal: "local:a", Roles: []string{policy.OperatorRole}}
	offered := map[string]string{"GIT_AUTHOR_NAME": "Ann", "GIT_AUTHOR_EMAIL": "ann@x", "GIT_COMMITTER_NAME": "not listed", "LD_PRELOAD": "/evil.so"}
	for _, tc := range []struct {
		name    string
		argv    []string
		env     map[string]string
		offered map[string]string
		want    map[string]string
	}{
		{"taken", []string{"git", "commit"}, nil, offered, map[string]string{"GIT_AUTHOR_NAME": "Ann", "GIT_AUTHOR_EMAIL": "ann@x"}},
		{"explicit wins", []string{"git", "commit"}, map[string]string{"GIT_AUTHOR_NAME": "Bob"}, offered, map[string]string{"GIT_AUTHOR_NAME": "Bob", "GIT_AUTHOR_EMAIL": "ann@x"}},
		{"explicit env kept", []string{"git", "commit"}, map[string]string{"GIT_TERMINAL_PROMPT": "0"}, offered,
			map[string]string{"GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "Ann", "GIT_AUTHOR_EMAIL": "ann@x"}},
		{"the allowing rule takes none", []string{"git", "push", "origin"}, nil, offered, nil},
		{"nothing offered", []string{"git", "commit"}, nil, nil, nil},
		{"refused request", []string{"/bin/sh"}, nil, offered, nil},
		{"empty offer", []string{"git", "commit"}, map[string]string{}, map[string]string{}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.WithPassEnv(s, tc.argv, tc.env, tc.offered)
			if !maps.Equal(got, tc.want) {
				t.Fatalf("WithPassEnv = %v, want %v", got, tc.want)
			}
		})
	}
	// A pass_env name is one the caller may pass explicitly too.
	d := p.DecideExec(s, policy.Request{Argv: []string{"git", "commit"}, Env: []string{"GIT_AUTHOR_NAME"}})
	if d.Result != policy.Allow || d.Rule.Name != "git" {
		t.Fatalf("explicit pass_env name: %+v", d)
	}
}
