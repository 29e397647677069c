package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// withMirrored makes dir one of the system directories the sandbox
// mirrors, for the test's lifetime (it stands for /opt).
func withMirrored(t *testing.T, dir string) {
	t.Helper()
	saved := SystemReadPaths
	SystemReadPaths = append(slices.Clone(saved), dir)
	t.Cleanup(func() { SystemReadPaths = saved })
}

// A path is run by (for argv[0], without --argv0) only when it names the
// bound program inside the sandbox as on the host: every step in root's
// system directories, nothing the caller, a repository or another command
// could re-point.
func TestSameInside(t *testing.T) {
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	check := func(path string, special []string, want bool) {
		t.Helper()
		if got := sameInside(path, sh, special); got != want {
			t.Errorf("sameInside(%q) = %v, want %v", path, got, want)
		}
	}
	check("/bin/sh", nil, true)
	check(sh, nil, true)
	check("bin/sh", nil, false)
	check("/usr/bin/../bin/sh", nil, false) // unclean
	check("/usr//bin/sh", nil, false)
	check("/proc/self/exe", nil, false)
	check("/proc/self/root"+sh, nil, false)
	check("/etc/passwd", nil, false)                    // not the program
	check("/bin/sh", []string{filepath.Dir(sh)}, false) // through a root the profile mounts
	// Outside the mirrored directories (a temporary directory): never.
	tmp := t.TempDir()
	if err := os.Symlink(sh, filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(tmp, "link"), nil, false)
	if os.Geteuid() != 0 {
		t.Log("the cases of links inside a mirrored directory need root to make it (CI runs them as root)")
		return
	}
	// Inside /opt (mirrored), in a directory of root's: each way a step
	// could differ inside the sandbox, or change after the check.
	base, err := os.MkdirTemp("/opt", "coily-sameinside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, shared := filepath.Join(base, "ws"), filepath.Join(base, "shared")
	for _, d := range []string{ws, shared} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(shared, 0o775); err != nil { // its group may re-point what is in it
		t.Fatal(err)
	}
	links := map[string]string{
		"link": sh, "up": "../.." + sh, "proc": "/proc/self/cwd" + sh, "loop": "loop", "theirs": sh,
		"ws/link": sh, "shared/link": sh, "via-ws": "ws/link",
	}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(base, "theirs"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"link":        true,  // root's link in root's directory
		"up":          true,  // .. back out to the same program
		"proc":        false, // through /proc: the server here, bwrap there
		"loop":        false, // a loop
		"theirs":      false, // a link another user owns
		"ws/link":     false, // inside a root the profile mounts (the workspace)
		"via-ws":      false, // through it
		"shared/link": false, // in a directory its group may write
		"missing":     false,
	} {
		check(filepath.Join(base, name), []string{ws}, want)
	}
}

// A caller's argv[0] that resolved to the allowed program when the policy
// checked it, but names something else inside the sandbox (a link in a
// workspace under a mirrored directory, re-pointed after the check, or
// one through /proc/self), never runs: the bound program does.
func TestBwrapArgv0PathNeverRerun(t *testing.T) {
	if _, err := BwrapPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	const allowed = "/usr/bin/true"
	for _, how := range []string{"re-pointed", "through /proc/self"} {
		t.Run(how, func(t *testing.T) {
			mirror := t.TempDir()
			if err := os.Chmod(mirror, 0o755); err != nil {
				t.Fatal(err)
			}
			if os.Geteuid() == 0 {
				if err := os.Chmod(filepath.Dir(mirror), 0o711); err != nil {
					t.Fatal(err)
				}
			}
			withMirrored(t, mirror)
			ws := filepath.Join(mirror, "ws")
			if err := os.MkdirAll(filepath.Join(ws, "usr/bin"), 0o777); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{ws, filepath.Join(ws, "usr"), filepath.Join(ws, "usr/bin")} {
				if err := os.Chmod(d, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			evil := filepath.Join(ws, "usr/bin/true")
			if err := os.WriteFile(evil, []byte("#!/bin/sh\necho EVIL TOKEN=$TOKEN\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(ws, "link")
			target := allowed
			if how != "re-pointed" {
				target = "/proc/self/cwd" + allowed
				wd, _ := os.Getwd()
				if err := os.Chdir("/"); err != nil { // as under systemd
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chdir(wd) })
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			if r, err := filepath.EvalSymlinks(link); err != nil || r != allowed {
				t.Fatalf("the policy's view: %s resolves to %q (%v)", link, r, err)
			}
			exe, err := os.Open(allowed)
			if err != nil {
				t.Fatal(err)
			}
			defer exe.Close()
			home := t.TempDir()
			if os.Geteuid() == 0 {
				if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(allowed)
			cmd.Args[0] = link
			p := DefaultProfile(ProfileInput{Workspace: ws, Home: home, Dir: ws, Env: []string{"TOKEN=s3cret", "PATH=" + DefaultPath},
				Network: NetworkDeny, Exec: exe, ExecPath: allowed, ExecName: allowed})
			if how == "re-pointed" {
				// Another command in the workspace re-points the link
				// between the check and bwrap's exec.
				if err := os.Remove(link); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("usr/bin/true", link); err != nil {
					t.Fatal(err)
				}
			}
			out, err := runWrapped(t, cmd, p)
			if strings.Contains(out, "EVIL") || err != nil {
				t.Fatalf("ran %q (%v): the caller's path was run, not the bound program", out, err)
			}
		})
	}
}
