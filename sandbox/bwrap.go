package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Bwrap confines commands with bubblewrap (Linux): new user, pid, ipc,
// uts, cgroup and (except in open mode) network namespaces, a filesystem
// assembled from read-only system directories and the profile's paths,
// no capabilities, a seccomp filter, a new session, and death with the
// parent.
type Bwrap struct {
	// Path is the bwrap executable; empty means the first of the usual
	// places (BwrapPath).
	Path string
	// Bridge is the coily executable, run inside the sandbox in proxied
	// mode as `coily __netbridge`: it serves the egress proxy's socket as
	// an HTTP(S) proxy on the sandbox's loopback. Empty: proxied mode is
	// unavailable.
	Bridge string
}

// In proxied mode, where the bridge and the proxy socket appear.
const (
	bridgePath = "/run/coily/bridge"
	// BridgeCommand is the hidden coily subcommand the bridge runs.
	BridgeCommand = "__netbridge"
)

// Name implements Sandbox.
func (Bwrap) Name() string { return "bwrap" }

// Confined implements Sandbox.
func (Bwrap) Confined() bool { return true }

// SystemReadPaths are the host directories every sandbox sees read-only.
var SystemReadPaths = []string{"/usr", "/etc", "/opt"}

// systemLinks are top-level directories that merged-/usr systems make
// symbolic links (reproduced as links) and others keep as directories
// (bound read-only).
var systemLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// Fixed descriptors in the child: the seccomp program and bwrap's status.
const (
	seccompFD = 3
	statusFD  = 4
)

// bind is one filesystem operation, ordered shallowest first.
type bind struct {
	op, src, dst string // op: --ro-bind, --bind, --tmpfs, --ro-bind-data...
	rank         int    // tie-break at equal depth: read < write < protect < deny
}

// bwrapArgs returns bwrap's arguments for running argv under p. exists
// reports whether a host path exists and whether it is a directory, and
// readlink resolves symbolic links; they are parameters so tests can fake
// the host.
func bwrapArgs(p Profile, argv []string, fs hostFS, bridge string) ([]string, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Network == NetworkProxied {
		if bridge == "" {
			return nil, fmt.Errorf("%w: proxied network needs the coily bridge executable", ErrUnavailable)
		}
		argv = append([]string{bridgePath, BridgeCommand, "--proxy-socket", ProxySocketPath, "--"}, argv...)
	}
	args := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
	}
	if p.Network != NetworkOpen {
		args = append(args, "--unshare-net")
	}
	for _, l := range systemLinks {
		switch target, isLink, isDir := fs.link(l); {
		case isLink:
			args = append(args, "--symlink", target, l)
		case isDir:
			args = append(args, "--ro-bind", l, l)
		}
	}
	var binds []bind
	add := func(op string, rank int, paths ...string) {
		for _, path := range paths {
			binds = append(binds, bind{op: op, src: path, dst: path, rank: rank})
		}
	}
	for _, path := range SystemReadPaths {
		if ok, _ := fs.exists(path); ok {
			add("--ro-bind", 0, path)
		}
	}
	for dst, src := range p.Files {
		binds = append(binds, bind{op: "--ro-bind", src: src, dst: dst, rank: 0})
	}
	add("--ro-bind", 0, p.ReadPaths...)
	add("--bind", 1, p.WritePaths...)
	if p.Home != "" {
		add("--bind", 1, p.Home)
	}
	for _, path := range p.ProtectPaths {
		if ok, _ := fs.exists(path); ok {
			add("--ro-bind", 2, path)
		}
	}
	visible := append(slices.Clone(SystemReadPaths), p.ReadPaths...)
	visible = append(append(visible, p.WritePaths...), p.Home)
	for _, path := range p.DenyPaths {
		if !under(path, visible) {
			continue // not visible anyway; binding it would reveal that it exists
		}
		switch ok, dir := fs.exists(path); {
		case ok && dir:
			binds = append(binds, bind{op: "--tmpfs", dst: path, rank: 3})
		case ok:
			binds = append(binds, bind{op: "--ro-bind", src: "/dev/null", dst: path, rank: 3})
		}
	}
	add("--bind", 1, p.UnixSockets...)
	if p.Network == NetworkProxied {
		binds = append(binds, bind{op: "--ro-bind", src: bridge, dst: bridgePath, rank: 1},
			bind{op: "--bind", src: p.ProxySocket, dst: ProxySocketPath, rank: 1})
	}
	binds = dedupe(binds)
	sort.SliceStable(binds, func(i, j int) bool {
		di, dj := depth(binds[i].dst), depth(binds[j].dst)
		if di != dj {
			return di < dj
		}
		return binds[i].rank < binds[j].rank
	})
	for _, b := range binds {
		if b.op == "--tmpfs" {
			// An empty private tmpfs hides what is there; it stays writable
			// so deeper binds (a workspace inside a denied tree) can be
			// mounted on it.
			args = append(args, "--tmpfs", b.dst)
			continue
		}
		args = append(args, b.op, b.src, b.dst)
	}
	// The environment is not in these arguments: it reaches the command
	// through bwrap's own environment (Wrap sets it to exactly p.Env), so
	// that no value — credentials included — ever appears in an argv,
	// bwrap's own included (visible as /proc/1/cmdline in the sandbox).
	if p.Dir != "" {
		args = append(args, "--chdir", p.Dir)
	}
	args = append(args, "--seccomp", strconv.Itoa(seccompFD), "--json-status-fd", strconv.Itoa(statusFD), "--")
	return append(args, argv...), nil
}

func depth(path string) int { return strings.Count(filepath.Clean(path), "/") }

// under reports whether path is one of roots or inside one.
func under(path string, roots []string) bool {
	for _, r := range roots {
		if r != "" && (path == r || strings.HasPrefix(path, r+"/")) {
			return true
		}
	}
	return false
}

// dedupe drops repeated binds of the same destination, keeping the first.
func dedupe(binds []bind) []bind {
	seen := map[string]bool{}
	out := binds[:0]
	for _, b := range binds {
		key := b.op + "\x00" + b.dst
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, b)
	}
	return out
}

// hostFS is the view of the host filesystem bwrapArgs needs.
type hostFS interface {
	exists(path string) (ok, dir bool)
	link(path string) (target string, isLink, isDir bool)
}

type realFS struct{}

func (realFS) exists(path string) (bool, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, false
	}
	return true, fi.IsDir()
}

func (realFS) link(path string) (string, bool, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", false, false
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		t, err := os.Readlink(path)
		return t, err == nil, false
	}
	return "", false, fi.IsDir()
}

// path returns the bwrap executable to use.
func (b Bwrap) path() (string, error) {
	if b.Path == "" {
		return BwrapPath()
	}
	if fi, err := os.Stat(b.Path); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: bubblewrap not found at %s: apt-get install bubblewrap", ErrUnavailable, b.Path)
	}
	return b.Path, nil
}

// BwrapPath finds the bwrap binary.
func BwrapPath() (string, error) {
	for _, p := range []string{"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: bubblewrap (bwrap) is not installed: apt-get install bubblewrap", ErrUnavailable)
}
