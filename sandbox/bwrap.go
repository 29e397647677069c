package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Bwrap confines commands with bubblewrap (Linux): new user, pid, ipc,
// uts, cgroup and (except in open mode) network namespaces, a filesystem
// assembled from read-only system directories and the profile's paths
// (writable roots and protected entries bound by descriptor), the kernel's
// interfaces read-only or masked, no capabilities, a seccomp filter, a new
// session, resource limits, and death with the server.
type Bwrap struct {
	// Path is the bwrap executable; empty means the first of the usual
	// places (BwrapPath).
	Path string
	// Bridge is the coily executable, run inside the sandbox in proxied
	// mode as `coily __netbridge`: it serves the egress proxy's socket as
	// an HTTP(S) proxy on the sandbox's loopback. Empty: proxied mode is
	// unavailable.
	Bridge string
	// Cgroups is where per-command cgroups are made (see FindCgroups);
	// nil: resource limits are rlimits only.
	Cgroups *Cgroups
	// Fleet holds every sandbox from Wrap to Close, for a lockout to kill
	// (nil: none is held).
	Fleet *Fleet
}

// In proxied mode, where the bridge and the proxy socket appear.
const (
	bridgePath = "/run/coily/bridge"
	// BridgePath is where the coily executable appears inside a proxied
	// sandbox (other coily helpers run from there too: gitcred).
	BridgePath = bridgePath
	// BridgeCommand is the hidden coily subcommand the bridge runs.
	BridgeCommand = "__netbridge"
)

// bridgeArgv is the argv that runs the command (execPath, with argv)
// behind the bridge in proxied mode: the bridge gets the proxy socket and,
// when the rule pins ssh host keys, the known hosts file.
func bridgeArgv(p *Profile, execPath string, argv []string) []string {
	out := []string{bridgePath, BridgeCommand, "--proxy-socket", ProxySocketPath}
	if p.KnownHosts != "" {
		out = append(out, "--known-hosts", KnownHostsPath)
	}
	out = append(out, "--argv0", argv[0], "--", execPath)
	return append(out, argv[1:]...)
}

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

// Kernel interfaces, as container runtimes treat them (runc's defaults):
// read-only, or masked (an empty read-only tmpfs over directories,
// /dev/null over files). /sys is not mounted at all. Only those present on
// the host and open to the server's user are named (see maskNeeded).
var (
	procReadOnly   = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	procMaskFiles  = []string{"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/kmsg"}
	procMaskDirs   = []string{"/proc/acpi", "/proc/asound", "/proc/scsi"}
	denyTmpfsBytes = int64(64 << 10) // a denied directory's (read-only) mask
)

// Fixed descriptors in bwrap: the seccomp program, its status pipe, the
// start gate (bwrap blocks on it after building the sandbox, before the
// command) and the gate's write end kept open inside (so that the gate
// never reads end-of-file if the server dies: the sandbox then never
// starts the command). Bind sources follow from firstBindFD.
const (
	seccompFD   = 3
	statusFD    = 4
	blockFD     = 5
	syncFD      = 6
	firstBindFD = 7
)

// mount is one bubblewrap filesystem operation.
type mount struct {
	op   string   // --ro-bind, --bind, --ro-bind-fd, --bind-fd, --tmpfs, --remount-ro
	src  string   // host path (path ops)
	file *os.File // bind source (fd ops)
	dst  string
	size int64 // --tmpfs size
	rank int   // tie-break at equal depth: read < write < protect < deny
	// reach names, for a descriptor bound for a root caller, what the file
	// is for: its path must be reachable by the sandbox's user (reachableBy).
	reach string
}

// bwrapArgs renders bubblewrap's arguments: namespaces and process
// options, the base filesystem, mounts shallowest first, then exec
// (the path bwrap runs) with argv (argv[0] passed with --argv0 when the
// installed bwrap has it). It returns the descriptors to pass, in order,
// from firstBindFD.
func bwrapArgs(p *Profile, mounts []mount, exec string, argv []string, argv0 bool) ([]string, []*os.File) {
	args := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--proc", "/proc", "--dev", "/dev",
		"--size", strconv.FormatInt(p.Limits.Shm, 10), "--tmpfs", "/dev/shm",
		"--size", strconv.FormatInt(p.Limits.Tmp, 10), "--tmpfs", "/tmp",
	}
	if p.Network != NetworkOpen {
		args = append(args, "--unshare-net")
	}
	mounts = dedupe(mounts)
	sort.SliceStable(mounts, func(i, j int) bool {
		di, dj := depth(mounts[i].dst), depth(mounts[j].dst)
		if di != dj {
			return di < dj
		}
		return mounts[i].rank < mounts[j].rank
	})
	var files []*os.File
	var remount []string
	for _, m := range mounts {
		switch m.op {
		case "--tmpfs":
			// An empty private tmpfs hides what is there; it stays writable
			// until every deeper bind (a workspace inside a denied tree) is
			// in place, then is made read-only.
			if m.size > 0 {
				args = append(args, "--size", strconv.FormatInt(m.size, 10))
			}
			args = append(args, "--tmpfs", m.dst)
			if m.rank >= rankDeny {
				remount = append(remount, m.dst)
			}
		case "--symlink":
			args = append(args, m.op, m.src, m.dst)
		case "--ro-bind-fd", "--bind-fd", "--ro-bind-data":
			args = append(args, m.op, strconv.Itoa(firstBindFD+len(files)), m.dst)
			files = append(files, m.file)
		default:
			args = append(args, m.op, m.src, m.dst)
		}
	}
	for _, dst := range remount {
		args = append(args, "--remount-ro", dst)
	}
	args = append(args, "--remount-ro", "/dev")
	// The environment is not in these arguments: it reaches the command
	// through bwrap's own environment (Wrap sets it to exactly p.Env), so
	// that no value — credentials included — ever appears in an argv,
	// bwrap's own included (visible as /proc/1/cmdline in the sandbox).
	if p.Dir != "" {
		args = append(args, "--chdir", p.Dir)
	}
	args = append(args, "--seccomp", strconv.Itoa(seccompFD), "--json-status-fd", strconv.Itoa(statusFD),
		"--block-fd", strconv.Itoa(blockFD), "--sync-fd", strconv.Itoa(syncFD))
	if argv0 {
		args = append(args, "--argv0", argv[0])
	}
	args = append(args, "--", exec)
	return append(args, argv[1:]...), files
}

// Ranks of mounts at equal depth.
const (
	rankRead = iota
	rankWrite
	rankProtect
	rankDeny
)

func depth(path string) int { return strings.Count(filepath.Clean(path), "/") }

// under reports whether path is one of roots or inside one.
func under(path string, roots []string) bool {
	for _, r := range roots {
		if r != "" && (path == r || r == "/" || strings.HasPrefix(path, r+"/")) {
			return true
		}
	}
	return false
}

// dedupe drops repeated mounts of the same destination by the same
// operation, keeping the first.
func dedupe(mounts []mount) []mount {
	seen := map[string]bool{}
	out := mounts[:0]
	for _, m := range mounts {
		key := m.op + "\x00" + m.dst
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, m)
	}
	return out
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

// bwrapArgv0 is the first bubblewrap release with --argv0.
var bwrapArgv0 = [3]int{0, 9, 0}

// bwrapVersions caches `bwrap --version` by path.
var bwrapVersions sync.Map // path → [3]int

// BwrapVersion returns the installed bubblewrap's version (major, minor,
// patch), asking it once per path.
func BwrapVersion(path string) ([3]int, error) {
	if v, ok := bwrapVersions.Load(path); ok {
		return v.([3]int), nil
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return [3]int{}, fmt.Errorf("%w: %s --version: %v", ErrUnavailable, path, err)
	}
	v, err := parseBwrapVersion(string(out))
	if err != nil {
		return v, err
	}
	bwrapVersions.Store(path, v)
	return v, nil
}

// parseBwrapVersion reads "bubblewrap 0.8.0".
func parseBwrapVersion(s string) ([3]int, error) {
	var v [3]int
	f := strings.Fields(s)
	if len(f) < 2 || f[0] != "bubblewrap" {
		return v, fmt.Errorf("%w: unexpected bwrap --version output %q", ErrUnavailable, strings.TrimSpace(s))
	}
	for i, part := range strings.SplitN(f[1], ".", 3) {
		n, err := strconv.Atoi(strings.TrimFunc(part, func(r rune) bool { return r < '0' || r > '9' }))
		if err != nil {
			return v, fmt.Errorf("%w: unexpected bwrap version %q", ErrUnavailable, f[1])
		}
		v[i] = n
	}
	return v, nil
}

// atLeast reports whether v ≥ want.
func atLeast(v, want [3]int) bool {
	for i := range v {
		if v[i] != want[i] {
			return v[i] > want[i]
		}
	}
	return true
}
