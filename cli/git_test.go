package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/client/gitremote"
	"coily.dev/coily/client/statedir"
	"coily.dev/coily/internal/standin"
)

// The test binary is git-remote-coily too, called by that name through a
// link on git's PATH: `coily git setup` is checked with the helper it
// sends git to.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == gitremote.Name {
		os.Exit(gitremote.Main())
	}
	os.Exit(m.Run())
}

// gitHome gives the process (and the git it runs) a home of its own with
// a user configuration, no system one, and this test binary as
// git-remote-coily on PATH; it returns the user configuration's path.
func gitHome(t *testing.T) string {
	t.Helper()
	standin.Need(t, "git", standin.GitHint)
	home, bin := t.TempDir(), t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, gitremote.Name)); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(home, ".gitconfig")
	if err := os.WriteFile(cfg, []byte("[user]\n\tname = Agent\n\temail = agent@example.invalid\n[url \"https://mirror.example/\"]\n\tinsteadOf = https://mirror-of.example/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"HOME": home, "GIT_CONFIG_GLOBAL": cfg, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
		"PATH": bin + string(os.PathListSeparator) + os.Getenv("PATH"), "SANDBOX_RUNTIME": "0"} {
		t.Setenv(k, v)
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "COILY_") || k == "GIT_CONFIG_COUNT" || k == "GIT_DIR" {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	return cfg
}

func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestGitSetupThenPlainGit: after `coily git setup --global`, plain git
// on https://github.com/… (and its ssh forms) goes through the local
// socket's git proxy: ls-remote, clone and push; setup again changes
// nothing, and --undo leaves the configuration as it was, byte for byte.
func TestGitSetupThenPlainGit(t *testing.T) {
	cfg := gitHome(t)
	before, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	proxy := standin.GitSocket(t, standin.GitOptions{Repos: []string{"alice/app"}}, statedir.GitSocket(state))
	env := map[string]string{"COILY_STATE_DIR": state}
	t.Setenv("COILY_STATE_DIR", state) // for git-remote-coily, which git starts

	for i := 0; i < 2; i++ {
		if code, out, errOut := run(t, env, "git", "setup", "--global"); code != 0 || !strings.Contains(out, "url.coily::/git/github.com/.insteadOf https://github.com/") {
			t.Fatalf("git setup: %d %q %q", code, out, errOut)
		}
	}
	got := gitRun(t, "", "config", "--global", "--get-regexp", `^url\.`)
	want := "url.https://mirror.example/.insteadof https://mirror-of.example/\n" +
		"url.coily::/git/github.com/.insteadof https://github.com/\n" +
		"url.coily::/git/github.com/.insteadof ssh://git@github.com/\n" +
		"url.coily::/git/github.com/.insteadof git@github.com:\n"
	if got != want {
		t.Fatalf("config after setup twice:\n%s\nwant:\n%s", got, want)
	}

	gitRun(t, "", "ls-remote", "https://github.com/alice/app")
	work := filepath.Join(t.TempDir(), "app")
	gitRun(t, "", "clone", "--quiet", "https://github.com/alice/app", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, work, "add", "README")
	gitRun(t, work, "commit", "--quiet", "-m", "first")
	gitRun(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/agent/one")
	gitRun(t, work, "remote", "set-url", "origin", "git@github.com:alice/app.git")
	gitRun(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
	head := strings.TrimSpace(gitRun(t, work, "rev-parse", "HEAD"))
	if proxy.Ref(t, "alice/app", "refs/heads/agent/one") != head || proxy.Ref(t, "alice/app", "refs/heads/main") != head {
		t.Fatalf("pushes did not reach the proxy: %q", proxy.Requests())
	}

	if code, out, errOut := run(t, env, "git", "setup", "--global", "--undo"); code != 0 {
		t.Fatalf("git setup --undo: %d %q %q", code, out, errOut)
	}
	after, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("after --undo:\n%s\nbefore setup:\n%s", after, before)
	}
}

// TestGitSetupLocalAndDryRun: the default writes the repository's own
// configuration; --dry-run prints the git commands and writes nothing;
// --server writes the git proxy's base on the tailnet (its own port, not
// the API's), --proxy-url another.
func TestGitSetupLocalAndDryRun(t *testing.T) {
	cfg := gitHome(t)
	repo := t.TempDir()
	gitRun(t, repo, "init", "--quiet")
	t.Chdir(repo)
	code, out, errOut := run(t, map[string]string{"COILY_SERVER": "coily.tail1.ts.net:7443"}, "git", "setup", "--dry-run", "--host", "gitlab.example.com:8443")
	want := "git config --local --fixed-value --replace-all url.http://coily.tail1.ts.net:7444/git/gitlab.example.com:8443/.insteadOf " +
		"https://gitlab.example.com:8443/ https://gitlab.example.com:8443/\n"
	if code != 0 || out != want {
		t.Fatalf("dry run: %d\n%s\nwant:\n%s\n%s", code, out, want, errOut)
	}
	if out, _ := exec.Command("git", "config", "--get-regexp", `^url\.coily`).CombinedOutput(); len(out) != 0 {
		t.Fatalf("--dry-run wrote: %s", out)
	}
	// Several servers: git's rewrite names one, never "a,b".
	if code, out, errOut := run(t, map[string]string{"COILY_SERVER": "a:7443,b:7443"}, "git", "setup", "--dry-run"); code != 2 || out != "" || !strings.Contains(errOut, "names one server") {
		t.Fatalf("a list: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, nil, "git", "setup", "--proxy-url", "http://coily"); code != 0 || !strings.Contains(out, "url.http://coily/git/github.com/.insteadOf https://github.com/") {
		t.Fatalf("--proxy-url: %d %q %q", code, out, errOut)
	}
	if got := gitRun(t, repo, "config", "--local", "--get-all", "url.http://coily/git/github.com/.insteadOf"); got != "https://github.com/\nssh://git@github.com/\ngit@github.com:\n" {
		t.Fatalf("local config: %q", got)
	}
	if b, _ := os.ReadFile(cfg); strings.Contains(string(b), "coily") {
		t.Fatalf("the user's configuration was written:\n%s", b)
	}
}

// TestGitSetupRefuses: hostile or unusable --host values, a route git
// cannot take, a --proxy-url that is more than an origin, and a rewrite
// of the same URL to another place are refused, and nothing is written.
func TestGitSetupRefuses(t *testing.T) {
	cfg := gitHome(t)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{nil, []string{"--host", "github.com/evil"}, ExitUsage, "--host"},
		{nil, []string{"--host", "../x"}, ExitUsage, "--host"},
		{nil, []string{"--host", "git hub.com"}, ExitUsage, "--host"},
		{nil, []string{"--host", "GitHub.com"}, ExitUsage, "lower case"},
		{nil, []string{"--host", "user@github.com"}, ExitUsage, "--host"},
		{nil, []string{"--host", "github.com:0"}, ExitUsage, "bad port"},
		{nil, []string{"--proxy-url", "https://coily/x"}, ExitUsage, "--proxy-url"},
		{nil, []string{"--proxy-url", "https://u:p@coily"}, ExitUsage, "--proxy-url"},
		{nil, []string{"--proxy-url", "file:///etc"}, ExitUsage, "--proxy-url"},
		{map[string]string{"COILY_DEV": "/tmp/dev"}, nil, ExitUsage, "no git transport"},
		{map[string]string{"COILY_GIT_HOST": "a/b"}, nil, ExitUsage, "--host"},
		{nil, []string{"--host", "mirror-of.example"}, ExitFailure, "git already rewrites https://mirror-of.example/ to https://mirror.example/"},
	} {
		code, _, errOut := run(t, tc.env, append([]string{"git", "setup", "--global"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v %q: exit %d, %q; want %d and %q", tc.env, tc.args, code, errOut, tc.code, tc.want)
		}
		checkPrintable(t, errOut)
	}
	if b, _ := os.ReadFile(cfg); strings.Contains(string(b), "coily") {
		t.Fatalf("a refused setup wrote:\n%s", b)
	}
}
