package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// writableBy refuses a writable root (open as dir) that the sandbox's user
// u cannot write: for a root caller, whose sandboxes run as u, a root-owned
// workspace would fail every write, and coily does not change who owns a
// user's files. nil u (an unprivileged caller, whose sandboxes run as
// itself) is not checked.
func writableBy(dir *os.File, path string, u *User) error {
	if u == nil {
		return nil
	}
	st, err := statFD(dir)
	if err != nil {
		return fmt.Errorf("%w: workspace %s: %v", ErrUnavailable, path, err)
	}
	if modeAllows(st.Mode, int(st.Uid), int(st.Gid), *u, 0o3) || hasACL(dir) {
		return nil
	}
	return &AccessError{What: "workspace", Path: path, Dir: path, UID: int(st.Uid), GID: int(st.Gid),
		Mode: st.Mode & 0o7777, Write: true, User: *u}
}

// modeAllows applies the permission bits as the kernel does for a user
// with no supplementary groups: the owner's bits for the owner, the
// group's for the group, the others' for anyone else. want is in the
// others' position (1 search, 2 write, 3 both).
func modeAllows(mode uint32, uid, gid int, u User, want uint32) bool {
	switch {
	case uid == u.UID:
		want <<= 6
	case gid == u.GID:
		want <<= 3
	}
	return mode&want == want
}

// hasACL reports whether f carries a POSIX access ACL, which may grant
// more than its mode bits say: coily then leaves the verdict to the
// kernel rather than refuse.
func hasACL(f *os.File) bool {
	n, err := unix.Fgetxattr(int(f.Fd()), "system.posix_acl_access", nil)
	return err == nil && n > 0
}

// reachableBy checks, for a root caller, that bubblewrap, running as the
// sandbox's user u, can reach each file bound by descriptor that is
// marked with what it is for (mount.reach): bubblewrap resolves a bound
// descriptor to its path and walks that path again, so every directory
// above it must be searchable by u.
func reachableBy(mounts []mount, u *User) error {
	if u == nil {
		return nil
	}
	for _, m := range mounts {
		if m.reach == "" || m.file == nil {
			continue
		}
		path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(m.file.Fd())))
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrUnavailable, m.reach, err)
		}
		if err := searchable(m.reach, path, *u); err != nil {
			return err
		}
	}
	return nil
}

// searchable checks every directory above path (a resolved path) for
// search permission by u.
func searchable(what, path string, u User) error {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return fmt.Errorf("%w: %s %s: %v", ErrUnavailable, what, path, err)
		}
		if !modeAllows(st.Mode, int(st.Uid), int(st.Gid), u, 0o1) && !dirHasACL(dir) {
			return &AccessError{What: what, Path: path, Dir: dir, UID: int(st.Uid), GID: int(st.Gid), Mode: st.Mode & 0o7777, User: u}
		}
		if dir == "/" {
			return nil
		}
	}
}

func dirHasACL(path string) bool {
	n, err := unix.Getxattr(path, "system.posix_acl_access", nil)
	return err == nil && n > 0
}

// proxiedMounts binds, in proxied mode, the bridge and the proxy socket,
// the known hosts file read-only and the ssh agent's socket when the
// profile has them: each by a
// descriptor opened here, so that bubblewrap, running as the sandbox's
// user, needs no access to the directories that hold them (the server's
// private scratch directory). The descriptors are recorded in c.
func (b Bwrap) proxiedMounts(p *Profile, c *Confinement) ([]mount, error) {
	if p.Network != NetworkProxied {
		return nil, nil
	}
	binds := []struct {
		op, path, dst string
		kind          uint32
		what          string
	}{
		{"--ro-bind-fd", b.Bridge, bridgePath, unix.S_IFREG, "the coily bridge"},
		{"--bind-fd", p.ProxySocket, ProxySocketPath, unix.S_IFSOCK, "the egress proxy's socket"},
	}
	if p.KnownHosts != "" {
		binds = append(binds, struct {
			op, path, dst string
			kind          uint32
			what          string
		}{"--ro-bind-fd", p.KnownHosts, KnownHostsPath, unix.S_IFREG, "the known hosts file"})
	}
	if p.SSHAgent != "" {
		binds = append(binds, struct {
			op, path, dst string
			kind          uint32
			what          string
		}{"--bind-fd", p.SSHAgent, SSHAgentPath, unix.S_IFSOCK, "the ssh agent's socket"})
	}
	var out []mount
	for _, bd := range binds {
		f, err := openBound(bd.path, bd.kind)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", ErrUnavailable, bd.what, bd.path, err)
		}
		c.childFiles = append(c.childFiles, f)
		out = append(out, mount{op: bd.op, file: f, dst: bd.dst, rank: rankWrite, reach: bd.what})
	}
	return out, nil
}

// openBound opens path (O_PATH: a socket cannot be opened otherwise) to be
// bound by descriptor, checking that it is of the kind expected.
func openBound(path string, kind uint32) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := statFD(f)
	switch {
	case err != nil:
		f.Close()
		return nil, err
	case st.Mode&unix.S_IFMT != kind:
		f.Close()
		return nil, fmt.Errorf("not a %s", fileKindName(kind))
	}
	return f, nil
}

func fileKindName(kind uint32) string {
	if kind == unix.S_IFSOCK {
		return "unix socket"
	}
	return "regular file"
}

// CheckReachable reports, as an *AccessError, a directory above path that
// u cannot search: for a root caller, bubblewrap (running as u) could not
// bind path. what says what path is for.
func CheckReachable(what, path string, u User) error {
	return searchable(what, path, u)
}
