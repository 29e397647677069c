package testserver

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/sandbox"
)

// SandboxWorkspace readies dir, a test's named workspace, for a server
// running as root, whose sandboxes run as sandbox.DefaultUser (nobody): dir
// and everything in it become that user's, and the temporary directories
// above it searchable by it (bubblewrap, running as that user, reaches
// the workspace by path). As any other user it does nothing: the sandbox
// runs as the test's own user. Call it once the test has put in dir what
// it needs, before the server runs commands there; files the test adds
// later stay root's (read-only to the sandbox) unless it is called again.
//
// The test's own git, running as root in a repository now owned by
// another user, refuses it ("dubious ownership"): run it with GitSafe.
func SandboxWorkspace(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	u := sandbox.DefaultUser()
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, u.UID, u.GID)
	})
	if err != nil {
		t.Fatal(err)
	}
	SandboxReachable(t, filepath.Dir(dir))
}

// SandboxReachable lets the sandbox user of a server running as root
// through dir and the temporary directories above it (o+x: search, not
// list), as bubblewrap, running as that user, walks the path to what it
// binds: a proxy socket or known hosts file given to `coily sandbox
// exec`, the temporary directory its own proxy goes in. As any other user
// it does nothing.
func SandboxReachable(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for d := filepath.Clean(dir); strings.HasPrefix(d, tempRoot+string(filepath.Separator)); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tempRoot is the temporary directory of the test process as it started
// (before a test's own TMPDIR).
var tempRoot = filepath.Clean(os.TempDir())

// GitSafe are git's arguments that let the test's own git (as root) work
// in a workspace SandboxWorkspace gave to the sandbox's user: git refuses
// a repository owned by someone else otherwise.
var GitSafe = []string{"-c", "safe.directory=*"}
