package main

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"coily.dev/coily/gitcred"
	"coily.dev/coily/internal/standin"
)

// randomToken is a fresh secret for one test.
func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tok_" + hex.EncodeToString(b)
}

// Real git, configured by gitcred.Env with the coily binary as its helper
// (outside any sandbox), pushes with the configured credential, never
// with one for another host, and never runs a helper its configuration
// files name — not even a URL-scoped one, which would be given the
// password on store.
func TestGitCredentialHelperWithRealGit(t *testing.T) {
	token := randomToken(t)
	g := standin.GitHTTP(t, standin.GitOptions{Token: token, Repos: []string{"owner/repo"}})
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	evilLog := filepath.Join(dir, "evil.log")
	evil := "!f() { echo \"$@\" >>" + evilLog + "; cat >>" + evilLog + "; }; f"
	// Hostile configuration a repository or home could carry: helpers
	// for every URL and for exactly this one, and the path sent along.
	gitconfig := "[credential]\n\thelper = " + quoteGit(evil) + "\n\tuseHttpPath = true\n" +
		"[credential \"https://localhost:" + g.Port + "\"]\n\thelper = " + quoteGit(evil) + "\n" +
		"[credential \"https://localhost:" + g.Port + "/owner/repo.git\"]\n\thelper = " + quoteGit(evil) + "\n"
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(gitconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(g.Port)
	env := gitcred.Env(coilyBin, []gitcred.Credential{{Host: "localhost", Port: port, Username: gitcred.DefaultUsername}})
	env[gitcred.PasswordVar(0)] = token
	base := append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "GIT_SSL_CAINFO=" + g.CAFile, "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com"}, envList(env)...)
	git := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, base
		out, err := cmd.CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, strings.ReplaceAll(string(out), token, "<token>"))
		}
		if strings.Contains(string(out), token) {
			t.Fatalf("git %s printed the token", strings.Join(args, " "))
		}
		return string(out)
	}
	git(true, "clone", "--quiet", "https://localhost:"+g.Port+"/owner/repo.git", "repo")
	git(true, "-C", "repo", "commit", "--quiet", "--allow-empty", "-m", "one")
	git(true, "-C", "repo", "push", "--quiet", "origin", "HEAD:refs/heads/main")
	head := strings.TrimSpace(git(true, "-C", "repo", "rev-parse", "HEAD"))
	if got := g.Ref(t, "owner/repo", "refs/heads/main"); got != head {
		t.Fatalf("push did not land: main is %q, want %q", got, head)
	}
	// The same server under another name gets no credential.
	git(true, "-C", "repo", "commit", "--quiet", "--allow-empty", "-m", "two")
	out := git(false, "-C", "repo", "push", "https://127.0.0.1:"+g.Port+"/owner/repo.git", "HEAD:refs/heads/main")
	if !strings.Contains(out, "coily: git credential: ") || !strings.Contains(out, "no credential for 127.0.0.1:"+g.Port) {
		t.Fatalf("the helper did not say why it gave nothing:\n%s", out)
	}
	if got := g.Ref(t, "owner/repo", "refs/heads/main"); got != head {
		t.Fatalf("a push to another host name landed: main is %q", got)
	}
	if data, err := os.ReadFile(evilLog); err == nil || !os.IsNotExist(err) {
		t.Fatalf("a configured helper ran (%v):\n%s", err, strings.ReplaceAll(string(data), token, "<token>"))
	}
}

// quoteGit quotes a value for a git configuration file.
func quoteGit(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func envList(env map[string]string) []string {
	var out []string
	for k, v := range maps.All(env) {
		out = append(out, k+"="+v)
	}
	return out
}
