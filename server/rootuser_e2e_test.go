package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/server"
)

// The containment of a server running as root (`coily serve --allow-root`,
// `coily dev`): its sandboxes run as an unprivileged user, never with
// root's credentials. Every test here runs in both passes of CI: as root it
// checks the sandbox user, as an unprivileged user that the sandbox runs as
// the server's own user and nothing else changes.

// sandboxIDs are the uid and gid a sandbox of this process's server runs
// as on the host.
func sandboxIDs() (uid, gid int) {
	if os.Geteuid() == 0 {
		u := sandbox.DefaultUser()
		return u.UID, u.GID
	}
	return os.Geteuid(), os.Getegid()
}

// statusField reads one field of /proc/self/status as the sandbox printed it.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "<missing>"
}

// A sandbox of a root server holds the sandbox user's credentials and
// nothing of root's: its uid and gid, no supplementary groups, no
// capabilities, no_new_privs and seccomp as for any server; the files it
// creates in the workspace are that user's on the host.
func TestContainmentRootServerRunsAsSandboxUser(t *testing.T) {
	c := startContainment(t, "")
	r := c.sh(t, "cat /proc/self/status; touch made-here")
	if r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("%+v", r)
	}
	uid, gid := sandboxIDs()
	ids := func(n int) string { s := strconv.Itoa(n); return s + "\t" + s + "\t" + s + "\t" + s }
	inside := uid
	if os.Geteuid() == 0 {
		// A uid of its own, from the server's range; its group the
		// sandbox user's.
		fields := strings.Fields(statusField(r.stdout, "Uid"))
		inside, _ = strconv.Atoi(fields[0])
		if inside < sandbox.DefaultUIDFirst || inside >= sandbox.DefaultUIDFirst+sandbox.DefaultUIDCount {
			t.Errorf("uid %d: not one of the server's range", inside)
		}
		if rec := lastResult(t, c.in); rec.Details["sandbox_uid"] != strconv.Itoa(inside) {
			t.Errorf("the audit record names sandbox uid %q, want %d", rec.Details["sandbox_uid"], inside)
		}
	}
	for field, want := range map[string]string{
		"Uid": ids(inside), "Gid": ids(gid), "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	} {
		if got := statusField(r.stdout, field); got != want {
			t.Errorf("%s: %q, want %q", field, got, want)
		}
	}
	if os.Geteuid() == 0 {
		if got := statusField(r.stdout, "Groups"); got != "" {
			t.Errorf("supplementary groups %q: a root server's sandbox has none", got)
		}
	}
	fi, err := os.Lstat(filepath.Join(c.ws, "made-here"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("a file the sandbox made is owned by %d:%d on the host, want %d:%d", st.Uid, st.Gid, uid, gid)
	}
}

// Root's files are not the sandbox's: a 0600 file of root's planted in
// /etc (which every sandbox sees read-only, and which no deny list can
// name in full), and /etc/ssl/private where the host has it, cannot be
// read by a root server's sandbox.
func TestContainmentRootServerCannotReadRootFiles(t *testing.T) {
	c := startContainment(t, "")
	var probes []string
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("/etc", "coily-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(dir, "secret")
		if err := os.WriteFile(secret, []byte("SECRET-ROOT-ONLY\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		probes = append(probes, "cat "+secret)
	}
	if fi, err := os.Stat("/etc/ssl/private"); err == nil && fi.Mode().Perm()&0o004 == 0 {
		probes = append(probes, "ls /etc/ssl/private", "cat /etc/ssl/private/*")
	}
	for _, f := range rootOnlyEtcFiles(t, 3) {
		if !slices.Contains(probes, "cat "+f) {
			probes = append(probes, "cat "+f)
		}
	}
	t.Logf("probes: %q", probes)
	for _, p := range probes {
		r := c.sh(t, p)
		if r.err != nil {
			t.Fatalf("%s: refused instead of run: %v", p, r.err)
		}
		if r.exit.GetExitCode() == 0 || strings.Contains(r.stdout, "SECRET-") || strings.Contains(r.stdout, "PRIVATE KEY") {
			t.Errorf("%s: read: %+v", p, r)
		}
	}
}

// A named workspace a root server's sandbox user cannot write (owned by
// root here) is refused before anything runs, with a message naming the
// workspace, its owner, the user and the fix. coily never changes who owns
// a workspace. One the sandbox user cannot reach (a directory above it
// closed to others) runs when each command has a uid of its own (the
// server binds it through an idmapped mount of its own, which bubblewrap
// reaches), and is refused likewise when commands share the sandbox user's
// uid (bubblewrap, running as that user, walks the path again). An
// unprivileged server's sandboxes run as itself: its own workspace is no
// refusal.
func TestContainmentRootServerWorkspaceOwner(t *testing.T) {
	requireBwrap(t)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared uid %v", shared), func(t *testing.T) {
			rootServerWorkspaceOwner(t, server.UIDRange{Off: shared})
		})
	}
}

func rootServerWorkspaceOwner(t *testing.T, uids server.UIDRange) {
	top := t.TempDir()
	ws, hidden := filepath.Join(top, "ws"), filepath.Join(top, "closed", "ws")
	for _, d := range []string{ws, hidden} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// All the sandbox user's, the directories above searchable; then ws
	// and the directory above hidden back to this process's user, that
	// one closed to others.
	testserver.SandboxWorkspace(t, top)
	for _, d := range []string{ws, filepath.Dir(hidden)} {
		if err := os.Lchown(d, os.Geteuid(), os.Getegid()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(hidden), 0o700); err != nil {
		t.Fatal(err)
	}
	in := testserver.Start(t, testserver.Options{SandboxUIDs: uids, Policy: fmt.Sprintf(`version: 1
workspaces: {owned-by-root: %s, out-of-reach: %s}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands:
  - {name: touch, binary: /usr/bin/touch, args: ["*"], workspace: owned-by-root}
  - {name: ls, binary: /bin/ls, workspace: out-of-reach}
`, ws, hidden)})
	r := execArgv(t, in, "/usr/bin/touch", "planted")
	if os.Geteuid() != 0 {
		if r.err != nil || r.exit.GetExitCode() != 0 {
			t.Fatalf("an unprivileged server's own workspace: %+v", r)
		}
		return
	}
	wantCode(t, r.err, refusal.SandboxUnavailable)
	u := sandbox.DefaultUser()
	for _, want := range []string{`"owned-by-root"`, ws, "uid 0 (root)", u.String(), fmt.Sprintf("chown -R %d:%d %s", u.UID, u.GID, ws), "unprivileged user"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, r.err)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, "planted")); err == nil {
		t.Error("the command ran")
	}
	if fi, _ := os.Stat(ws); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("the workspace's owner was changed")
	}
	r = execArgv(t, in, "/bin/ls")
	if !uids.Off {
		if r.err != nil || r.exit.GetExitCode() != 0 {
			t.Fatalf("a workspace out of the sandbox user's reach, through an idmapped mount: %+v", r)
		}
		return
	}
	wantCode(t, r.err, refusal.SandboxUnavailable)
	for _, want := range []string{`"out-of-reach"`, hidden, "cannot be reached", filepath.Dir(hidden), "chmod o+x"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, r.err)
		}
	}
}

// rootOnlyEtcFiles finds up to n of the host's files in /etc (two levels
// deep) that only root may read (0600 and the like) and that no deny rule
// masks: what a root server's sandbox used to read.
func rootOnlyEtcFiles(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			fi, err := os.Lstat(path)
			switch {
			case len(out) >= n || err != nil || slices.ContainsFunc(sandbox.SystemDenyPaths, func(d string) bool {
				return path == d || strings.HasPrefix(path, d+"/")
			}):
			case fi.IsDir() && depth < 2 && fi.Mode().Perm()&0o005 == 0o005:
				walk(path, depth+1)
			case fi.Mode().IsRegular() && fi.Mode().Perm()&0o044 == 0 && fi.Sys().(*syscall.Stat_t).Uid == 0 && fi.Size() > 0:
				out = append(out, path)
			}
		}
	}
	walk("/etc", 1)
	return out
}
