package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testlog"
)

var (
	coilyExecOnce sync.Once
	coilyExecBin  string
	coilyExecErr  error
)

// buildCoilyExec builds coily-exec (as scripts/release.sh does) into a
// directory of its own, beside the coily under test (hard-linked there):
// the binary it hands other cases to, and whose shims link to it.
func buildCoilyExec(t testing.TB) string {
	t.Helper()
	coilyExecOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coily-exec-bin-")
		if err != nil {
			coilyExecErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			coilyExecErr = err
			return
		}
		coilyExecBin = filepath.Join(dir, "coily-exec")
		if prebuilt := os.Getenv("COILY_TEST_COILY_EXEC"); prebuilt != "" {
			// Prebuilt by scripts/test.sh for the run as an unprivileged user.
			coilyExecErr = copyExecutable(prebuilt, coilyExecBin)
		} else {
			build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", coilyExecBin, "../coily-exec")
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				coilyExecErr = errors.New(string(out))
				return
			}
		}
		if coilyExecErr == nil {
			coilyExecErr = linkOrCopy(coilyBin, filepath.Join(dir, "coily"))
		}
	})
	if coilyExecErr != nil {
		t.Fatalf("build coily-exec: %v", coilyExecErr)
	}
	return coilyExecBin
}

type procResult struct {
	code           int
	stdout, stderr string
}

// runWith runs a client process with env and stdin, as an agent's shell
// would.
func runWith(t *testing.T, env []string, stdin []byte, name string, args ...string) procResult {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return procResult{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// TestCoilyExecSameAsCoilyExec: coily-exec, the shims' lean client, does
// what `coily exec --` does, case by case against a real server: output on
// both streams and the command's exit code, a large output and a 1 MiB
// standard input (HTTP/2 flow control both ways), a refusal, an
// unreachable server, a bare name; named after a command it runs that
// command; a COILY_* setting of coily exec's hands the command to coily
// exec; Ctrl-C stops the command on the server.
func TestCoilyExecSameAsCoilyExec(t *testing.T) {
	fast := buildCoilyExec(t)
	dir := shortDir(t)
	p := startServe(t, dir, writePolicy(t, dir, `version: 1
roles: {operator: {permissions: [exec], commands: [sh, cat]}}
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native}
  - {name: cat, binary: /bin/cat, sandbox: native}
`))
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "COILY_SOCKET=" + p.socket}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for _, tc := range []struct {
		name  string
		argv  []string
		stdin []byte
		env   []string
	}{
		{"output and exit code", []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, nil, nil},
		{"bare name", []string{"sh", "-c", "echo bare"}, nil, nil},
		{"large output", []string{"/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"}, nil, nil},
		{"1 MiB stdin", []string{"/bin/cat"}, big, nil},
		{"too much stdin", []string{"/bin/cat"}, append(big, 'x'), nil},
		{"signal", []string{"/bin/sh", "-c", "kill -TERM $$"}, nil, nil},
		{"refused", []string{"/bin/echo", "hi"}, nil, nil},
		{"control characters in a refusal", []string{"/bin/echo\x1b[31m"}, nil, nil},
		{"unreachable", []string{"/bin/true"}, nil, []string{"COILY_SOCKET=" + filepath.Join(dir, "nobody.sock")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := append(append([]string{}, env...), tc.env...)
			want := runWith(t, e, tc.stdin, coilyBin, append([]string{"exec", "--"}, tc.argv...)...)
			got := runWith(t, e, tc.stdin, fast, append([]string{"--"}, tc.argv...)...)
			if got != want {
				t.Errorf("coily-exec: exit %d, stdout %d bytes %.80q, stderr %q\ncoily exec: exit %d, stdout %d bytes %.80q, stderr %q",
					got.code, len(got.stdout), got.stdout, got.stderr, want.code, len(want.stdout), want.stdout, want.stderr)
			}
		})
	}

	t.Run("named after a command", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "sh")
		if err := os.Symlink(fast, link); err != nil {
			t.Fatal(err)
		}
		got := runWith(t, env, nil, link, "-c", "echo $0 --help")
		if got.code != 0 || got.stdout != "sh --help\n" {
			t.Errorf("sh -> coily-exec: %+v", got)
		}
	})

	t.Run("hand-off", func(t *testing.T) {
		e := append(append([]string{}, env...), "COILY_NOTE=handed to coily exec")
		if got := runWith(t, e, nil, fast, "/bin/sh", "-c", "exit 4"); got.code != 4 {
			t.Fatalf("with COILY_NOTE: %+v", got)
		}
		recs, err := audit.Tail(filepath.Join(dir, "audit"), 50)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range recs {
			found = found || r.Details["note"] == "handed to coily exec"
		}
		if !found {
			t.Error("the note COILY_NOTE set never reached the audit: coily-exec did not hand the command to coily exec")
		}
		if got := runWith(t, env, nil, fast, "--timeout", "1s", "/bin/true"); got.code != 2 || !strings.Contains(got.stderr, "takes none") {
			t.Errorf("a flag: %+v", got)
		}
	})

	t.Run("shims link to coily-exec", func(t *testing.T) {
		shims := filepath.Join(t.TempDir(), "shims")
		coily := filepath.Join(filepath.Dir(fast), "coily")
		inst := runWith(t, env, nil, coily, "shim", "install", "--dir", shims, "cat", "sh")
		if inst.code != 0 || !strings.Contains(inst.stdout, filepath.Join(shims, "cat")+" -> "+fast) {
			t.Fatalf("shim install: %+v", inst)
		}
		got := runWith(t, append(env, "PATH="+shims+":/usr/bin:/bin"), []byte("through a link\n"), "/bin/sh", "-c", "cat && sh -c 'exit 5'")
		if got.code != 5 || got.stdout != "through a link\n" {
			t.Errorf("cat and sh through linked shims: %+v", got)
		}
		if l := runWith(t, env, nil, coily, "shim", "list", "--dir", shims); !strings.Contains(l.stdout, "cat          "+fast) {
			t.Errorf("shim list: %+v", l)
		}
	})

	t.Run("as coily, beside coily-client", func(t *testing.T) {
		dir := t.TempDir()
		if err := linkOrCopy(coilyBin, filepath.Join(dir, "coily-client")); err != nil {
			t.Fatal(err)
		}
		coily := filepath.Join(dir, "coily")
		if err := os.Symlink(fast, coily); err != nil {
			t.Fatal(err)
		}
		argv := []string{"exec", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"}
		if got, want := runWith(t, env, nil, coily, argv...), runWith(t, env, nil, coilyBin, argv...); got != want {
			t.Errorf("coily exec through the dispatcher: %+v, want %+v", got, want)
		}
		// Everything else is coily-client's, the command line unchanged.
		if got := runWith(t, env, nil, coily, "--socket", p.socket, "status"); got.code != 0 || !strings.Contains(got.stdout, "lockout:") {
			t.Errorf("coily status through the dispatcher: %+v", got)
		}
		if got := runWith(t, env, nil, coily, "exec", "--timeout", "9s", "--", "/bin/sh", "-c", "exit 6"); got.code != 6 {
			t.Errorf("coily exec --timeout through the dispatcher: %+v", got)
		}
		// An unstamped build: "coily dev", and the commit when Go recorded one.
		if got := runWith(t, env, nil, coily, "version"); got.code != 0 || (got.stdout != "coily dev\n" && !strings.HasPrefix(got.stdout, "coily dev (commit ")) {
			t.Errorf("coily version through the dispatcher: %+v", got)
		}
		// Without coily-client beside it, and only itself on PATH, it says so
		// instead of running itself again.
		lonely := t.TempDir()
		body, err := os.ReadFile(fast)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lonely, "coily"), body, 0o755); err != nil {
			t.Fatal(err)
		}
		e := append(append([]string{}, env...), "PATH="+lonely)
		if got := runWith(t, e, nil, filepath.Join(lonely, "coily"), "status"); got.code != 125 || !strings.Contains(got.stderr, "no coily-client") {
			t.Errorf("a dispatcher with nothing to hand to: %+v", got)
		}
		// Another copy of it as the coily on PATH: handed once, not round
		// and round.
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, "coily"), body, 0o755); err != nil {
			t.Fatal(err)
		}
		e = append(append([]string{}, env...), "PATH="+other)
		if got := runWith(t, e, nil, filepath.Join(lonely, "coily"), "status"); got.code != 125 || !strings.Contains(got.stderr, "handed on by another coily-exec") {
			t.Errorf("two copies handing to each other: %+v", got)
		}
	})

	t.Run("ctrl-c", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "still-running")
		cmd := exec.Command(fast, "/bin/sh", "-c", "echo started; sleep 30; touch "+marker)
		cmd.Env = env
		out := new(testlog.Buffer)
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), "started") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		running := func() bool { return strings.Contains(p.run(t, "status").stdout, "running:     1") }
		if !running() {
			t.Fatalf("status does not show the running command:\n%s", p.run(t, "status").stdout)
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("coily-exec after Ctrl-C: %v, want exit 130", err)
		}
		for time.Now().Before(deadline) && running() {
			time.Sleep(50 * time.Millisecond)
		}
		if running() {
			t.Error("the command still runs on the server after Ctrl-C")
		}
	})
}

// linkOrCopy hard-links from as to, or copies it where a link is not
// allowed (another user's file, with protected hard links).
func linkOrCopy(from, to string) error {
	if os.Link(from, to) == nil {
		return nil
	}
	return copyExecutable(from, to)
}

// copyExecutable copies the executable from to a new file to.
func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
