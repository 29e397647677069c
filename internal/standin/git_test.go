package standin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitEnv is the environment of the git client in the tests: the stand-in's
// CA, no user or system configuration, a fixed author.
func gitEnv(t *testing.T, g *Git) []string {
	return append(g.Env(),
		"HOME="+t.TempDir(), "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Stand In", "GIT_AUTHOR_EMAIL=standin@example.invalid",
		"GIT_COMMITTER_NAME=Stand In", "GIT_COMMITTER_EMAIL=standin@example.invalid",
	)
}

// credHelper is a git credential helper that answers with $STANDIN_TOKEN,
// so the token never appears in a command line or URL.
const credHelper = `credential.helper=!f() { echo username=agent; echo "password=$STANDIN_TOKEN"; }; f`

func TestGitHTTPCloneAndPush(t *testing.T) {
	Need(t, "git", GitHint)
	start := time.Now()
	g := GitHTTP(t, GitOptions{Token: "git-token-1", Repos: []string{"owner/repo"}})
	since(t, "GitHTTP", start)
	env := gitEnv(t, g)
	url := g.RepoURL("owner/repo")

	work := filepath.Join(t.TempDir(), "work")
	run(t, "", env, "git", "clone", "--quiet", url, work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, work, env, "git", "add", "README")
	run(t, work, env, "git", "commit", "--quiet", "-m", "first")
	head := strings.TrimSpace(run(t, work, env, "git", "rev-parse", "HEAD"))

	// No credentials: the server answers 401 and git, unable to prompt, fails.
	if out, err := tryRun(t, work, env, "git", "push", "--quiet", "origin", "main"); err == nil {
		t.Fatalf("push without credentials succeeded:\n%s", out)
	}
	// Wrong token: refused too.
	wrong := append(env, "STANDIN_TOKEN=not-the-token")
	if out, err := tryRun(t, work, wrong, "git", "-c", credHelper, "push", "--quiet", "origin", "main"); err == nil {
		t.Fatalf("push with a wrong token succeeded:\n%s", out)
	}
	if got := g.Ref(t, "owner/repo", "refs/heads/main"); got != "" {
		t.Fatalf("refused pushes moved main to %s", got)
	}
	var refused int
	for _, r := range g.Requests() {
		if strings.HasPrefix(r, "401 GET /owner/repo.git/info/refs?service=git-receive-pack") {
			refused++
		}
	}
	if refused < 2 {
		t.Errorf("want the two refused pushes answered 401, requests: %q", g.Requests())
	}

	right := append(env, "STANDIN_TOKEN="+g.Token)
	run(t, work, right, "git", "-c", credHelper, "push", "--quiet", "origin", "main")
	if got := g.Ref(t, "owner/repo", "refs/heads/main"); got != head {
		t.Fatalf("after push, main = %q, want %s", got, head)
	}

	again := filepath.Join(t.TempDir(), "again")
	run(t, "", env, "git", "clone", "--quiet", url, again)
	if b, err := os.ReadFile(filepath.Join(again, "README")); err != nil || string(b) != "stand-in\n" {
		t.Fatalf("cloned README = %q, %v", b, err)
	}
}

func TestGitHTTPAuthReadAndUntrustedCA(t *testing.T) {
	Need(t, "git", GitHint)
	g := GitHTTP(t, GitOptions{Token: "git-token-2", Repos: []string{"owner/private.git"}, AuthRead: true})
	env := gitEnv(t, g)
	url := g.RepoURL("owner/private")
	if out, err := tryRun(t, "", env, "git", "clone", "--quiet", url, filepath.Join(t.TempDir(), "a")); err == nil {
		t.Fatalf("clone without credentials succeeded:\n%s", out)
	}
	env = append(env, "STANDIN_TOKEN="+g.Token)
	run(t, "", env, "git", "-c", credHelper, "clone", "--quiet", url, filepath.Join(t.TempDir(), "b"))

	// Without the stand-in's CA, git must refuse the server.
	noCA := append(env, "GIT_SSL_CAINFO=/dev/null")
	if out, err := tryRun(t, "", noCA, "git", "-c", credHelper, "clone", "--quiet", url, filepath.Join(t.TempDir(), "c")); err == nil {
		t.Fatalf("clone without the CA succeeded:\n%s", out)
	}
}
