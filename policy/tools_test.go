package policy

import (
	"slices"
	"strings"
	"testing"
)

// toolCases are the tool-knowledge table: hostile arguments first.
var toolCases = []struct {
	bin  string
	args []string
	want []string // normalised; nil with refused
	// refused: a substring of the refusal ("" when allowed)
	refused string
}{
	// git: options before the command that change configuration,
	// repository or programs.
	{"git", []string{"-c", "core.sshCommand=evil", "push"}, nil, "-c"},
	{"git", []string{"-c", "alias.p=!sh -c evil", "p"}, nil, "-c"},
	{"git", []string{"--config-env=core.pager=X", "log"}, nil, "--config-env"},
	{"git", []string{"-C", "/tmp/evil", "push"}, nil, "-C"},
	{"git", []string{"--exec-path=/tmp/evil", "push"}, nil, "--exec-path"},
	{"git", []string{"--git-dir=/tmp/evil/.git", "status"}, nil, "--git-dir"},
	{"git", []string{"--work-tree", "/", "status"}, nil, "--work-tree"},
	{"git", []string{"-p", "log"}, nil, "-p"},
	{"git", []string{"--bare", "log"}, nil, "--bare"},
	{"git", []string{"-cfoo=bar", "log"}, nil, "not one coily knows"},
	{"git", []string{"--no-pager", "log", "-1"}, []string{"log", "-1"}, ""},
	// Not git's own commands: aliases, git-NAME programs, autocorrect.
	{"git", []string{"psuh", "origin", "main"}, nil, "not a git command"},
	{"git", []string{"lfs", "push"}, nil, "not a git command"},
	{"git", []string{"credential", "fill"}, nil, "not a git command"},
	{"git", []string{"hook", "run", "pre-push"}, nil, "not a git command"},
	// Push forms that rewrite or delete.
	{"git", []string{"push", "origin", "+main"}, []string{"push", "origin", "main", "--force"}, ""},
	{"git", []string{"push", "origin", "+HEAD:refs/heads/main"}, []string{"push", "origin", "HEAD:refs/heads/main", "--force"}, ""},
	{"git", []string{"push", "origin", ":main"}, []string{"push", "origin", ":main", "--delete"}, ""},
	{"git", []string{"push", "-u", "origin", "main"}, []string{"push", "-u", "origin", "main"}, ""},
	{"git", []string{"push", "--mirror", "origin"}, []string{"push", "--mirror", "origin", "--force", "--delete"}, ""},
	{"git", []string{"push", "--prune", "origin", "refs/heads/*:refs/heads/*"}, []string{"push", "--prune", "origin", "refs/heads/*:refs/heads/*", "--delete"}, ""},
	{"git", []string{"push", "--mirr", "origin"}, []string{"push", "--mirr", "origin", "--force", "--delete"}, ""},
	{"git", []string{"push", "origin", "--", "+main"}, []string{"push", "origin", "--force", "--", "main"}, ""},
	{"git", []string{"push", "--", "origin", "+main", ":old"}, []string{"push", "--force", "--delete", "--", "origin", "main", ":old"}, ""},
	{"git", []string{"push", "origin", "--", "--", "+main"}, []string{"push", "origin", "--force", "--", "--", "main"}, ""},
	// Remotes and options that run code.
	{"git", []string{"push", "ext::sh -c evil", "main"}, nil, "remote helpers"},
	{"git", []string{"push", "fd::3", "main"}, nil, "remote helpers"},
	{"git", []string{"push", "evil::x", "main"}, nil, "remote helpers"},
	{"git", []string{"push", "/tmp/evil.git", "main"}, nil, "local repository"},
	{"git", []string{"push", "./evil", "main"}, nil, "local repository"},
	{"git", []string{"push", "../evil", "main"}, nil, "local repository"},
	{"git", []string{"push", "file:///tmp/evil", "main"}, nil, "local repository"},
	{"git", []string{"push", "~/evil", "main"}, nil, "local repository"},
	{"git", []string{"fetch", "/tmp/evil"}, nil, "local repository"},
	{"git", []string{"clone", "ext::sh", "x"}, nil, "remote helpers"},
	{"git", []string{"push", "--receive-pack=/tmp/evil", "origin"}, nil, "--receive-pack"},
	{"git", []string{"push", "--exec", "/tmp/evil", "origin"}, nil, "--exec"},
	{"git", []string{"fetch", "--upload-pack=/tmp/evil", "origin"}, nil, "--upload-pack"},
	{"git", []string{"clone", "--template=/tmp/hooks", "https://example.com/x"}, nil, "--template"},
	{"git", []string{"clone", "-u", "/tmp/evil", "https://example.com/x"}, nil, "-u"},
	{"git", []string{"clone", "-c", "core.hooksPath=/tmp", "https://example.com/x"}, nil, "-c"},
	{"git", []string{"clone", "--config=core.fsmonitor=evil", "https://example.com/x"}, nil, "--config"},
	{"git", []string{"init", "--template", "/tmp/hooks"}, nil, "--template"},
	{"git", []string{"rebase", "-x", "sh evil", "main"}, nil, "-x"},
	{"git", []string{"rebase", "-xsh", "main"}, nil, "-x"},
	{"git", []string{"rebase", "--exec=evil", "main"}, nil, "--exec"},
	{"git", []string{"bisect", "run", "sh", "-c", "evil"}, nil, "runs a command"},
	{"git", []string{"submodule", "foreach", "evil"}, nil, "runs a command"},
	{"git", []string{"grep", "-O", "evil", "x"}, nil, "-O"},
	// Abbreviated long options and bundled short ones (git accepts both).
	{"git", []string{"clone", "--templ=/tmp/hooks", "https://example.com/x"}, nil, "--template"},
	{"git", []string{"clone", "--conf=core.fsmonitor=evil", "https://example.com/x"}, nil, "--config"},
	{"git", []string{"clone", "-qc", "core.fsmonitor=evil", "https://example.com/x"}, nil, "-c"},
	{"git", []string{"fetch", "--upload-p=/tmp/evil", "origin"}, nil, "--upload-pack"},
	{"git", []string{"rebase", "--exe=evil", "main"}, nil, "--exec"},
	{"git", []string{"rebase", "-qx", "evil", "main"}, nil, "-x"},
	{"git", []string{"grep", "--open-files=evil", "x"}, nil, "--open-files-in-pager"},
	{"git", []string{"difftool", "--extc=evil"}, nil, "--extcmd"},
	// One letter is an abbreviation too, where no other option starts so.
	{"git", []string{"clone", "--u=touch x", "remote.git", "c"}, nil, "--upload-pack"},
	{"git", []string{"ls-remote", "--u=touch x", "remote.git"}, nil, "--upload-pack"},
	{"git", []string{"archive", "--e=touch x", "HEAD"}, nil, "--exec"},
	{"git", []string{"push", "--e=touch x", "origin"}, nil, "--exec"},
	{"git", []string{"init", "--t=/tmp/hooks"}, nil, "--template"},
	// The transfer protocol beneath push and fetch: refused whole.
	{"git", []string{"send-pack", "--force", "git@github.com:alice/x.git", "main"}, nil, "not a git command"},
	{"git", []string{"send-pack", "https://github.com/alice/x", "+main"}, nil, "not a git command"},
	{"git", []string{"fetch-pack", "--exec=touch x", "remote.git"}, nil, "not a git command"},
	{"git", []string{"upload-pack", "."}, nil, "not a git command"},
	{"git", []string{"receive-pack", "."}, nil, "not a git command"},
	{"gh", []string{"repo", "clone", "o/r", "--", "--template=/tmp/hooks"}, nil, "after --"},
	{"gh", []string{"repo", "fork", "o/r", "--clone", "--", "-c", "core.hooksPath=x"}, nil, "after --"},
	{"git", []string{"remote", "add", "x", "ext::sh -c evil"}, nil, "remote helpers"},
	{"git", []string{"remote", "set-url", "origin", "/tmp/evil"}, nil, "local repository"},
	{"git", []string{"push", "git@github.com:alice/x.git", "main"}, []string{"push", "git@github.com:alice/x.git", "main"}, ""},
	{"git", []string{"push", "https://github.com/alice/x", "main"}, []string{"push", "https://github.com/alice/x", "main"}, ""},
	{"git", []string{"status", "--short"}, []string{"status", "--short"}, ""},
	{"git", []string{"--version"}, []string{"--version"}, ""},
	{"git", nil, nil, ""},
	// gh: what prints or hands out the token, or runs unvetted code.
	{"gh", []string{"auth", "token"}, nil, "hands out the token"},
	{"gh", []string{"auth", "token", "--hostname", "github.com"}, nil, "hands out the token"},
	{"gh", []string{"auth", "--hostname=github.com", "token"}, nil, "hands out the token"},
	{"gh", []string{"auth", "git-credential", "get"}, nil, "hands out the token"},
	{"gh", []string{"auth", "status", "-t"}, nil, "--show-token"},
	{"gh", []string{"auth", "status", "--show-token"}, nil, "--show-token"},
	{"gh", []string{"auth", "status", "-at"}, nil, "--show-token"},
	{"gh", []string{"extension", "exec", "x"}, nil, "extensions"},
	{"gh", []string{"ext", "install", "evil/gh-x"}, nil, "extensions"},
	{"gh", []string{"alias", "set", "x", "!sh -c evil", "--shell"}, nil, "--shell"},
	{"gh", []string{"alias", "set", "-s", "x", "evil"}, nil, "--shell"},
	{"gh", []string{"auth", "status"}, []string{"auth", "status"}, ""},
	{"gh", []string{"issue", "create", "--title", "auth token", "--body", "-t"}, []string{"issue", "create", "--title", "auth token", "--body", "-t"}, ""},
	// Other binaries pass unchanged.
	{"echo", []string{"-c", "x", "+y", ":z"}, []string{"-c", "x", "+y", ":z"}, ""},
}

func TestToolVet(t *testing.T) {
	for _, c := range toolCases {
		got, reason := toolVet("/usr/bin/"+c.bin, "/usr/bin/"+c.bin, c.args)
		switch {
		case c.refused != "":
			if reason == "" || !strings.Contains(reason, c.refused) || got != nil {
				t.Errorf("%s %q: got %q, reason %q; want a refusal naming %q", c.bin, c.args, got, reason, c.refused)
			}
		case reason != "" || !slices.Equal(got, c.want):
			t.Errorf("%s %q: got %q, reason %q; want %q", c.bin, c.args, got, reason, c.want)
		}
	}
	// The tool is known by the binary's name or argv[0]'s.
	if _, reason := toolVet("/usr/lib/git-core/git", "/usr/local/bin/g", []string{"-c", "x=y", "log"}); reason == "" {
		t.Error("git found by its resolved name was not vetted")
	}
}

// FuzzToolVet: never panics; a refusal returns no arguments; what passes
// never carries an option git refuses before its command, and a push's
// forced or deleting refspec always shows as the flag.
func FuzzToolVet(f *testing.F) {
	for _, c := range toolCases {
		f.Add(c.bin, strings.Join(c.args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, bin, joined string) {
		var args []string
		if joined != "" {
			args = strings.Split(joined, "\x00")
		}
		got, reason := toolVet("/usr/bin/"+bin, bin, args)
		if reason != "" {
			if got != nil {
				t.Fatalf("refused with arguments %q", got)
			}
			return
		}
		if toolName("/usr/bin/"+bin, bin) != "git" || len(got) == 0 {
			return
		}
		if gitGlobalRefused[strings.SplitN(got[0], "=", 2)[0]] {
			t.Fatalf("%q passed with a refused option first", got)
		}
		if got[0] == "push" {
			positional := 0
			for _, a := range got[1:] {
				if a == "--" {
					break
				}
				if strings.HasPrefix(a, "-") {
					continue
				}
				// The first positional is the remote; refspecs follow.
				if positional++; positional > 1 && strings.HasPrefix(a, "+") && !slices.Contains(got, "--force") {
					t.Fatalf("%q: a forced refspec without --force", got)
				}
			}
		}
	})
}

func TestEnvForbidden(t *testing.T) {
	for _, name := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "PATH", "HOME", "BASH_ENV", "ENV",
		"GIT_SSH_COMMAND", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_COUNT", "GIT_EXEC_PATH", "GIT_ASKPASS", "GIT_DIR",
		"NODE_OPTIONS", "PYTHONPATH", "PYTHONSTARTUP", "PERL5OPT", "RUBYOPT", "GLIBC_TUNABLES", "npm_config_script_shell",
		"NPM_CONFIG_USERCONFIG", "AWS_PAGER", "AWS_PROFILE", "AWS_DATA_PATH", "PAGER", "EDITOR", "BROWSER", "GH_CONFIG_DIR", "GH_BROWSER", "GH_DEBUG", "SSL_CERT_FILE",
		"AWS_CONFIG_FILE", "XDG_CONFIG_HOME", "BASH_FUNC_x%%", "pythonpath", "MAKEFLAGS", "CC", "CGO_CFLAGS", "RUSTC",
		"RUSTC_WORKSPACE_WRAPPER", "GOTOOLCHAIN", "GOPROXY", "MAVEN_OPTS", "GRADLE_OPTS", "KUBE_EDITOR", "AWS_ENDPOINT_URL",
		"AWS_ENDPOINT_URL_S3", "VAULT_ADDR", "HTTPS_PROXY", "https_proxy", "DOCKER_HOST", "PS1", "PROMPT_COMMAND"} {
		if envForbiddenReason(name) == "" {
			t.Errorf("%s may be passed", name)
		}
	}
	for _, name := range []string{"NO_COLOR", "GH_PROMPT_DISABLED", "GIT_AUTHOR_NAME", "GIT_COMMITTER_EMAIL", "GIT_TERMINAL_PROMPT", "CI", "LANG_X"} {
		if why := envForbiddenReason(name); why != "" {
			t.Errorf("%s refused: %s", name, why)
		}
	}
}
