package main

import (
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/standin"
)

// --git-cache-max and --git-cache-remote-max reach the git proxy (its
// start line says the budgets it applies); a value that is no size, or a
// remote's budget past the total, stops serve before anything runs.
func TestServeGitCacheBudgets(t *testing.T) {
	standin.Need(t, "git", standin.GitHint)
	for _, bad := range [][]string{
		{"--git-cache-max", "10GB"},
		{"--git-cache-max", "0"},
		{"--git-cache-max", "-1GiB"},
		{"--git-cache-max", "2048GiB"},
		{"--git-cache-remote-max", "lots"},
		{"--git-cache-max", "1GiB", "--git-cache-remote-max", "2GiB"},
	} {
		r := runCoily(t, nil, append([]string{"serve", "--state-dir", shortDir(t), "--policy", examplePolicy(t)}, bad...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--git-cache") {
			t.Errorf("%q: %+v", bad, r)
		}
	}
	p := startServe(t, shortDir(t), examplePolicy(t), "--git-cache-max", "3GiB", "--git-cache-remote-max", "512MiB")
	want := "cache_max=3221225472 cache_remote_max=536870912"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.log.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("the git proxy does not say %q:\n%s", want, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
