package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// podmanOrSkip returns podman's path, skipping (outside CI) where podman
// or root is missing: scripts/test.sh installs podman.
func podmanOrSkip(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	switch {
	case err != nil && os.Getenv("CI") == "true":
		t.Fatal("no podman (scripts/test.sh installs it)")
	case err != nil:
		t.Skip("no podman (scripts/test.sh installs it)")
	case os.Geteuid() != 0:
		t.Skip("needs root: podman builds and runs the image as root")
	case runtime.GOARCH != "amd64":
		t.Skip("the release the tests build is linux/amd64's")
	}
	return p
}

// containerRoot is the image's Debian root: debootstrap's minbase with
// bubblewrap, git and ca-certificates, made once and kept in the user's
// cache directory beside debianRoot's (build.sh only reads it).
func containerRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatal("no debootstrap (scripts/test.sh installs it)")
	}
	cacheHome, err := os.UserCacheDir()
	if err != nil {
		cacheHome = os.TempDir()
	}
	suite := hostSuite()
	cache := filepath.Join(cacheHome, "coily-test", "container-"+suite+"-"+runtime.GOARCH)
	if _, err := os.Stat(filepath.Join(cache, "complete")); err != nil {
		makeDebianRoot(t, cache, suite, "bubblewrap,git,ca-certificates")
	}
	return filepath.Join(cache, "root")
}

// podmanRun runs podman with args, failing the test on an error.
func podmanRun(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, tail(out, 3000))
	}
	return strings.TrimSpace(string(out))
}

// runFlags are podman run's flags for this host besides the image's own
// requirement (--security-opt unmask=/proc/*): podman's default runtime
// (crun) refuses a hybrid cgroup hierarchy, where runc works, and podman
// asks for higher rlimits than a process without CAP_SYS_RESOURCE (this
// CI's) may set: the test's own are passed.
func runFlags(t *testing.T) []string {
	var flags []string
	if b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil && len(bytes.TrimSpace(b)) > 0 {
		flags = append(flags, "--runtime", "runc")
	}
	return append(flags, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")
}

func buildImage(t *testing.T, root, coily, tag string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("container/build.sh", root, coily, tag)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("build.sh: %v\n%s", err, tail(stderr, 3000))
	}
	t.Logf("build %s: %v", tag, time.Since(start).Round(100*time.Millisecond))
	return strings.TrimSpace(string(out))
}

// The image, end to end: built twice from the release binary to the same
// digest; without --security-opt unmask=/proc/* `coily sandbox check`
// fails and names that flag, with it the sandbox works; the server starts
// on the image's defaults, answers `coily status` through the socket on
// its volume, runs a sandboxed command, a lockout kills a running one, and
// the lockout survives a restart of the container.
func TestContainerImage(t *testing.T) {
	podmanOrSkip(t)
	start := time.Now()
	root := containerRoot(t)
	t.Logf("debian root: %v", time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	files := readArchive(t, filepath.Join(release(t), "coily_"+testVersion+"_linux_amd64.tar.gz"))
	coily := extract(t, files, "coily")
	t.Logf("release: %v", time.Since(start).Round(100*time.Millisecond))
	if err := os.Chmod(filepath.Dir(coily), 0o755); err != nil {
		t.Fatal(err)
	}
	unique := "coily-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	tag := "localhost/" + unique + ":latest"
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", tag).Run() })

	first := buildImage(t, root, coily, tag)
	podmanRun(t, "rmi", "-f", tag) // no cached layer serves the second build
	second := buildImage(t, root, coily, tag)
	if first == "" || first != second {
		t.Fatalf("two builds of the same root and binary: %q and %q", first, second)
	}

	run := append([]string{"run", "--rm"}, runFlags(t)...)
	out, err := exec.Command("podman", append(run, "--entrypoint", "/usr/bin/coily", tag, "sandbox", "check")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run it with --security-opt unmask=/proc/*") {
		t.Fatalf("sandbox check without unmask: %v, want a failure naming the flag:\n%s", err, out)
	}
	run = append(run, "--security-opt", "unmask=/proc/*")
	if out := podmanRun(t, append(run, "--entrypoint", "/usr/bin/coily", tag, "sandbox", "check")...); !strings.Contains(out, "the sandbox works on this host") {
		t.Fatalf("sandbox check with unmask:\n%s", out)
	}

	name, vol := unique, unique
	t.Cleanup(func() {
		_ = exec.Command("podman", "rm", "-f", "-t", "0", name).Run()
		_ = exec.Command("podman", "volume", "rm", "-f", vol).Run()
	})
	start = time.Now()
	serve := append([]string{"run", "-d", "--name", name, "-v", vol + ":/var/lib/coily"}, runFlags(t)...)
	// The shipped seccomp profile (podman's default, for runtimes whose
	// own refuses user namespaces) works as podman's own does.
	profile, err := filepath.Abs("container/seccomp.json")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	readYAML(t, "container/compose.yaml", &c)
	health := c.Services["coily"].Healthcheck.Test
	if len(health) != 2 || health[0] != "CMD" {
		t.Fatalf("compose.yaml's health check %q: want [CMD, program]", health)
	}
	podmanRun(t, append(serve, "--security-opt", "unmask=/proc/*", "--security-opt", "seccomp="+profile,
		"--health-cmd", health[1], "--health-interval", "disable", tag)...)
	sock := filepath.Join(podmanRun(t, "volume", "inspect", "--format", "{{.Mountpoint}}", vol), "coily.sock")
	client := func(args ...string) *exec.Cmd {
		return exec.Command(coily, append([]string{"--socket", sock}, args...)...)
	}
	status := waitStatus(t, client, "lockout:     off")
	t.Logf("serve until status answers: %v\n%s", time.Since(start).Round(100*time.Millisecond), status)
	// compose.yaml's health check (/readyz) passes.
	podmanRun(t, "healthcheck", "run", name)

	if out, err := client("exec", "--", "/bin/echo", "hi from the container").CombinedOutput(); err != nil || string(out) != "hi from the container\n" {
		t.Fatalf("sandboxed exec: %v %q", err, out)
	}

	sleep := client("exec", "--", "/bin/sleep", "300")
	var sleepOut bytes.Buffer
	sleep.Stdout, sleep.Stderr = &sleepOut, &sleepOut
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleep.Wait() }()
	waitStatus(t, client, "running:     1")
	if out, err := client("lockout", "--reason", "container test").CombinedOutput(); err != nil {
		t.Fatalf("lockout: %v\n%s", err, out)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the locked-out command exited 0: %s", sleepOut.String())
		}
	case <-time.After(time.Minute):
		_ = sleep.Process.Kill()
		t.Fatal("the lockout did not end the running command within a minute")
	}

	start = time.Now()
	podmanRun(t, "restart", "-t", "10", name)
	waitStatus(t, client, "lockout:     ACTIVE")
	t.Logf("restart until status answers: %v", time.Since(start).Round(100*time.Millisecond))
	out, err = client("exec", "--", "/bin/echo", "after").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || strings.Contains(string(out), "after") {
		t.Fatalf("exec after the restart: %v %q, want refused (125)", err, out)
	}
}

// waitStatus polls `coily status` until its output holds want, for up to a
// minute, and returns it.
func waitStatus(t *testing.T, client func(...string) *exec.Cmd, want string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last []byte
	for time.Now().Before(deadline) {
		out, err := client("status").CombinedOutput()
		if err == nil && bytes.Contains(out, []byte(want)) {
			return string(out)
		}
		last = out
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("coily status never said %q; last:\n%s", want, last)
	return ""
}
