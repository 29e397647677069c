package sandbox

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// In proxied mode the command runs behind the bridge; with pinned ssh
// host keys the bridge is told where they are and the file is bound
// read-only there, never writable. Each is bound by a descriptor of the
// file named, checked for its kind, so that bubblewrap (running as the
// sandbox's user) walks no path of the server's.
func TestBwrapProxiedBridge(t *testing.T) {
	dir := t.TempDir()
	bridge, sock, known := filepath.Join(dir, "coily"), filepath.Join(dir, "proxy.sock"), filepath.Join(dir, "known_hosts")
	for _, f := range []string{bridge, known} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := Bwrap{Bridge: bridge}
	p := Profile{Network: NetworkProxied, ProxySocket: sock}
	argv := []string{"git", "clone", "--", "ssh://h/r"}
	want := []string{bridgePath, BridgeCommand, "--proxy-socket", ProxySocketPath, "--argv0", "git", "--", "/usr/bin/git", "clone", "--", "ssh://h/r"}
	if got := bridgeArgv(&p, "/usr/bin/git", argv); !slices.Equal(got, want) {
		t.Errorf("without known hosts: %q, want %q", got, want)
	}
	mounts := proxiedMounts(t, b, &p)
	if len(mounts) != 2 || slices.ContainsFunc(mounts, func(m mount) bool { return m.dst == KnownHostsPath }) {
		t.Errorf("without known hosts, mounts %+v", mounts)
	}
	p.KnownHosts = known
	want = append(want[:4:4], append([]string{"--known-hosts", KnownHostsPath}, want[4:]...)...)
	if got := bridgeArgv(&p, "/usr/bin/git", argv); !slices.Equal(got, want) {
		t.Errorf("with known hosts: %q, want %q", got, want)
	}
	mounts = proxiedMounts(t, b, &p)
	for _, want := range []struct{ op, dst, src string }{
		{"--ro-bind-fd", bridgePath, bridge}, {"--bind-fd", ProxySocketPath, sock}, {"--ro-bind-fd", KnownHostsPath, known},
	} {
		i := slices.IndexFunc(mounts, func(m mount) bool { return m.dst == want.dst })
		if i < 0 || mounts[i].op != want.op || !sameFile(t, mounts[i].file, want.src) {
			t.Errorf("%s: want %s of %s, got %+v", want.dst, want.op, want.src, mounts)
		}
	}
	// The wrong kind of file is refused: a regular file as the socket, a
	// socket as the known hosts file, a missing bridge.
	for name, bad := range map[string]func(*Profile, *Bwrap){
		"socket is a file":        func(p *Profile, _ *Bwrap) { p.ProxySocket = known },
		"known hosts is a socket": func(p *Profile, _ *Bwrap) { p.KnownHosts = sock },
		"bridge missing":          func(_ *Profile, b *Bwrap) { b.Bridge = filepath.Join(dir, "none") },
	} {
		pp, bb := p, b
		bad(&pp, &bb)
		c := &Confinement{}
		if _, err := bb.proxiedMounts(&pp, c); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v", name, err)
		}
		c.Close()
	}
	p.Network, p.ProxySocket = NetworkLoopback, ""
	if got := proxiedMounts(t, b, &p); got != nil {
		t.Errorf("loopback network, mounts %+v", got)
	}
}

func proxiedMounts(t *testing.T, b Bwrap, p *Profile) []mount {
	t.Helper()
	c := &Confinement{}
	t.Cleanup(c.Close)
	m, err := b.proxiedMounts(p, c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameFile(t *testing.T, f *os.File, path string) bool {
	t.Helper()
	var a, b unix.Stat_t
	if f == nil || unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// The outer user namespace maps exactly one id: the caller's own, or, for
// a root caller, the sandbox user's, which the child switches to with no
// supplementary groups (setgroups allowed in that namespace only to empty
// them). Never host uid 0 for a root caller.
func TestBwrapOuterNamespaces(t *testing.T) {
	attr := outerNamespaces(nil, false)
	uid, gid := os.Getuid(), os.Getgid()
	if attr.Credential != nil || attr.GidMappingsEnableSetgroups ||
		!slices.Equal(attr.UidMappings, []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}) ||
		!slices.Equal(attr.GidMappings, []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}) {
		t.Errorf("unprivileged: %+v", attr)
	}
	u := &User{Name: "nobody", UID: 65534, GID: 65533}
	attr = outerNamespaces(u, false)
	if c := attr.Credential; c == nil || c.Uid != 65534 || c.Gid != 65533 || c.Groups == nil || len(c.Groups) != 0 || c.NoSetGroups ||
		!attr.GidMappingsEnableSetgroups ||
		!slices.Equal(attr.UidMappings, []syscall.SysProcIDMap{{ContainerID: 65534, HostID: 65534, Size: 1}}) ||
		!slices.Equal(attr.GidMappings, []syscall.SysProcIDMap{{ContainerID: 65533, HostID: 65533, Size: 1}}) {
		t.Errorf("root, as %v: %+v %+v", u, attr, attr.Credential)
	}
	if attr.Cloneflags&(syscall.CLONE_NEWUSER|syscall.CLONE_NEWPID) != syscall.CLONE_NEWUSER|syscall.CLONE_NEWPID ||
		attr.Pdeathsig != syscall.SIGKILL || !attr.Setpgid {
		t.Errorf("namespaces, death signal or group lost: %+v", attr)
	}
}

// A root caller never runs a sandbox as root: the default is nobody, uid
// or gid 0 is refused; an unprivileged caller runs as itself and may not
// name another user.
func TestBwrapSandboxUser(t *testing.T) {
	if os.Geteuid() != 0 {
		if u, err := sandboxUser(User{}); u != nil || err != nil {
			t.Errorf("unprivileged, no user: %v %v", u, err)
		}
		if _, err := sandboxUser(User{UID: 65534, GID: 65534}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("unprivileged, a user named: %v", err)
		}
		return
	}
	u, err := sandboxUser(User{})
	if err != nil || u == nil || *u != DefaultUser() || u.UID == 0 || u.GID == 0 {
		t.Errorf("root, default: %v %v", u, err)
	}
	for _, bad := range []User{{UID: 0, GID: 5}, {Name: "x", UID: 5, GID: 0}, {UID: -1, GID: 5}} {
		if _, err := sandboxUser(bad); !errors.Is(err, ErrUnavailable) {
			t.Errorf("root, %+v: %v", bad, err)
		}
	}
}

// Access is the kernel's rule for a user without supplementary groups:
// the owner's bits for the owner (even when the group's or the others'
// would allow), then the group's, then the others'.
func TestModeAllows(t *testing.T) {
	u := User{UID: 100, GID: 200}
	for _, c := range []struct {
		mode     uint32
		uid, gid int
		want     uint32 // 1 search, 3 write and search
		ok       bool
	}{
		{0o700, 100, 0, 3, true}, {0o755, 100, 0, 3, true}, {0o500, 100, 200, 3, false}, {0o577, 100, 200, 3, false},
		{0o770, 0, 200, 3, true}, {0o750, 0, 200, 3, false}, {0o707, 0, 200, 3, false},
		{0o777, 0, 0, 3, true}, {0o1777, 0, 0, 3, true}, {0o755, 0, 0, 3, false}, {0o775, 0, 0, 3, false},
		{0o702, 0, 0, 3, false}, {0o701, 0, 0, 3, false},
		{0o711, 0, 0, 1, true}, {0o700, 0, 0, 1, false}, {0o710, 0, 200, 1, true}, {0o701, 0, 200, 1, false},
		{0o600, 100, 0, 1, false}, {0o077, 100, 200, 1, false},
	} {
		if got := modeAllows(c.mode, c.uid, c.gid, u, c.want); got != c.ok {
			t.Errorf("mode %04o owner %d:%d want %o: %v, want %v", c.mode, c.uid, c.gid, c.want, got, c.ok)
		}
	}
}

// A workspace the sandbox's user cannot write is refused with a message
// naming it, its owner, the user, and the fixes; nil (unprivileged) is not
// checked.
func TestWritableBy(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writableBy(f, dir, nil); err != nil {
		t.Errorf("unprivileged: %v", err)
	}
	other := User{UID: os.Geteuid() + 1, GID: os.Getegid() + 1}
	err = writableBy(f, dir, &other)
	var ae *AccessError
	if !errors.As(err, &ae) || !errors.Is(err, ErrUnavailable) || !ae.Write || ae.What != "workspace" {
		t.Fatalf("another user's 0700 directory: %v", err)
	}
	for _, want := range []string{dir, "uid " + strconv.Itoa(os.Geteuid()), other.String(), "chown -R", "unprivileged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	other.UID = os.Geteuid()
	if err := writableBy(f, dir, &other); err != nil {
		t.Errorf("own directory: %v", err)
	}
}

// Every directory above a file bound for a root caller must be searchable
// by the sandbox's user: bubblewrap walks the path again as that user.
func TestSearchable(t *testing.T) {
	top := t.TempDir()
	deep := filepath.Join(top, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(deep, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := User{UID: os.Geteuid() + 1, GID: os.Getegid() + 1}
	for _, d := range []string{top, filepath.Dir(top)} {
		if err := os.Chmod(d, 0o711); err != nil && d == top {
			t.Fatal(err)
		}
	}
	if os.Geteuid() != 0 {
		// t.TempDir's parent is this user's: searchable or not by others,
		// the walk is what is checked below.
		if err := searchable("x", file, User{UID: os.Geteuid(), GID: os.Getegid()}); err != nil {
			t.Errorf("own path: %v", err)
		}
	}
	if err := os.Chmod(filepath.Join(top, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := searchable("the CA bundle", file, other)
	var ae *AccessError
	if !errors.As(err, &ae) || ae.Dir != filepath.Join(top, "a") || ae.Write || !strings.Contains(err.Error(), "chmod o+x "+ae.Dir) ||
		!strings.Contains(err.Error(), "the CA bundle "+file) {
		t.Fatalf("a 0700 directory on the way: %v", err)
	}
}
