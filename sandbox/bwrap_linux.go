package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Wrap implements Sandbox: cmd becomes bwrap running the original command
// under p. bwrap itself starts as the first process of a new PID namespace
// (in a user namespace of its own), so that when it dies — and it dies with
// the server — the kernel kills every process of the sandbox, even one
// still being set up. The returned Confinement must be started (Start)
// once cmd has started: the sandbox waits for it before running the
// command.
func (b Bwrap) Wrap(_ context.Context, cmd *exec.Cmd, p Profile) (*Confinement, error) {
	bwrap, err := b.path()
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Network == NetworkProxied && p.ProxySocket == "" {
		return nil, fmt.Errorf("proxied network needs the egress proxy's unix socket (bubblewrap bridges it into the namespace)")
	}
	version, err := BwrapVersion(bwrap)
	if err != nil {
		return nil, err
	}
	arch, err := HostSeccompArch()
	if err != nil {
		return nil, err
	}
	if p.Network == NetworkProxied && b.Bridge == "" {
		return nil, fmt.Errorf("%w: proxied network needs the coily bridge executable", ErrUnavailable)
	}
	if p.KnownHosts != "" && !regularFile(p.KnownHosts) {
		return nil, fmt.Errorf("%w: known hosts %s is not a regular file", ErrUnavailable, p.KnownHosts)
	}
	if p.SSHAgent != "" && !unixSocket(p.SSHAgent) {
		return nil, fmt.Errorf("%w: ssh agent %s is not a unix socket", ErrUnavailable, p.SSHAgent)
	}
	prog, err := SeccompFilter(arch, SeccompOptions{AllowUnixSockets: len(p.UnixSockets) > 0 || p.Network == NetworkProxied,
		AllowGroupWrite: groupWritable()})
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp filter: %v", ErrUnavailable, err)
	}
	runAs, err := sandboxUser(p.User)
	if err != nil {
		return nil, err
	}
	procUser := runAs // who bwrap and the command run as on the host
	if d := p.Dynamic; d != nil {
		if runAs == nil || d.User.IsZero() || d.MountDir == "" {
			return nil, fmt.Errorf("%w: a uid of its own is for a root caller's sandbox, with a mount directory", ErrUnavailable)
		}
		procUser = &d.User
	}
	p.Limits = p.Limits.WithDefaults()
	// Nothing the server holds open reaches the sandbox but what is passed
	// below: descriptors inherited or opened without O_CLOEXEC included.
	if err := closeOnExecFrom(3); err != nil {
		return nil, fmt.Errorf("%w: mark descriptors close-on-exec: %v", ErrUnavailable, err)
	}
	c := &Confinement{limits: p.Limits, writable: p.Writable, user: runAs, budget: p.ScanBudget, fleet: b.Fleet, dynamic: p.Dynamic}
	b.Fleet.add(c)
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if b.Cgroups != nil {
		cg, err := b.Cgroups.create(p.Limits)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.cgroup = cg
	}
	mounts, err := b.mounts(&p, c)
	if err != nil {
		return nil, err
	}
	argv := append([]string{cmd.Args[0]}, cmd.Args[1:]...)
	execPath := cmd.Path
	if p.Exec != nil {
		execPath = p.ExecPath
		mounts = append(mounts, mount{op: "--ro-bind-fd", file: p.Exec, dst: p.ExecPath, rank: rankProtect, reach: "the program"})
	}
	if p.CAFile != nil {
		mounts = append(mounts, mount{op: "--ro-bind-fd", file: p.CAFile, dst: CAPath, rank: rankProtect, reach: "the CA bundle"})
	}
	if d := p.Dynamic; d != nil {
		m, err := passwdFor(d.User, p.Home)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.childFiles = append(c.childFiles, m.file)
		mounts = append(mounts, m)
	}
	if err := reachableBy(mounts, procUser); err != nil {
		return nil, err
	}
	hasArgv0 := atLeast(version, bwrapArgv0)
	if by := runBy(argv[0], p.ExecName); !hasArgv0 && by != execPath && p.Network != NetworkProxied && sameInside(by, execPath, p.special()) {
		// Without --argv0, bwrap's argv[0] is the path it runs: the path
		// the caller gave (or, for a bare name, the rule's), but only when
		// every step of it lies in root's system directories, so that it
		// resolves inside the sandbox as on the host, now and later, to
		// the bound program. Anything else runs by the bound program's
		// own path.
		execPath = by
	}
	if p.Network == NetworkProxied {
		argv = bridgeArgv(&p, execPath, argv)
		execPath, hasArgv0 = bridgePath, false
	}
	args, binds := bwrapArgs(&p, mounts, execPath, argv, hasArgv0)

	filter, err := pipeWith(prog)
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp program: %v", ErrUnavailable, err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		filter.Close()
		return nil, fmt.Errorf("bwrap status pipe: %w", err)
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		filter.Close()
		statusR.Close()
		statusW.Close()
		return nil, fmt.Errorf("bwrap gate pipe: %w", err)
	}
	c.status, c.release = statusR, blockW
	c.childFiles = append([]*os.File{filter, statusW, blockR}, c.childFiles...)
	run, runArgs := bwrap, args
	cmd.SysProcAttr = outerNamespaces(procUser, p.Dynamic != nil)
	if needOwnProc() {
		// A PID namespace of the container's: bwrap needs a /proc of its
		// own outer namespace (ownproc_linux.go).
		unshare, err := UnsharePath()
		if err != nil {
			return nil, fmt.Errorf("%w: a sandbox outside the host's PID namespace needs unshare(1) (util-linux): %v", ErrUnavailable, err)
		}
		uid, gid := os.Getuid(), os.Getgid()
		if procUser != nil {
			uid, gid = procUser.UID, procUser.GID
		}
		u := ownProcArgv(unshare, uid, gid)
		run, runArgs = unshare, append(append(u[1:], bwrap), args...)
		cmd.SysProcAttr = ownProcAttr(procUser)
		c.ownProc = true
	}
	cmd.Path, cmd.Args = run, append([]string{filepath.Base(run)}, runArgs...)
	switch {
	case p.Dynamic != nil:
		cmd.Path, cmd.Args = rlimitArgs(p.Dynamic.Pool.prlimit, p.Limits, run, runArgs)
	case c.ownProc:
		// The namespaces are the sandbox user's, not coily's: coily has
		// no capability over their processes to set limits at the gate.
		prlimit, err := exec.LookPath("prlimit")
		if err != nil {
			return nil, fmt.Errorf("%w: a sandbox outside the host's PID namespace needs prlimit(1) (util-linux): %v", ErrUnavailable, err)
		}
		cmd.Path, cmd.Args = rlimitArgs(prlimit, p.Limits, run, runArgs)
	}
	cmd.Env, cmd.Dir = slices.Clone(p.Env), "" // bwrap passes its environment on: exactly p.Env
	cmd.ExtraFiles = append([]*os.File{filter, statusW, blockR, blockW}, binds...)
	if c.cgroup != nil {
		// bwrap is born in the command's cgroup (clone3's CLONE_INTO_CGROUP):
		// moving a process later costs the kernel an RCU grace period.
		dir, err := os.Open(c.cgroup.dir)
		if err != nil {
			return nil, fmt.Errorf("%w: cgroup: %v", ErrUnavailable, err)
		}
		c.childFiles = append(c.childFiles, dir)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
	}
	ok = true
	return c, nil
}

// outerNamespaces puts bwrap in a new user and PID namespace: bwrap is its
// init, so the kernel kills everything in it when bwrap dies. The user
// namespace maps one id, the one bwrap runs as: the caller's own, or, for
// a root caller, runAs's, which the child switches to (all supplementary
// groups dropped) before it runs bwrap. Either way bwrap starts without
// capabilities and builds the sandbox as it does for any user, in a
// user namespace of its own inside this one; a root caller's sandbox holds
// runAs's credentials on the host, never root's.
//
// A command with a uid of its own (dynamic) gets no user namespace here:
// root makes the PID namespace alone and the child switches to runAs, so
// that the user namespace bwrap makes is owned by runAs. The kernel counts
// per-user limits of a namespace's processes against its owner, all the
// way up: under a namespace root made, every sandbox would share root's.
func outerNamespaces(runAs *User, dynamic bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL, // set after the switch, which would clear it
	}
	if dynamic {
		attr.Cloneflags = syscall.CLONE_NEWPID
		attr.Credential = &syscall.Credential{Uid: uint32(runAs.UID), Gid: uint32(runAs.GID), Groups: []uint32{}}
		return attr
	}
	uid, gid := os.Getuid(), os.Getgid()
	if runAs != nil {
		uid, gid = runAs.UID, runAs.GID
		// setgroups must be allowed in the namespace to empty the groups
		// (bwrap's own namespace, inside, denies it again).
		attr.GidMappingsEnableSetgroups = true
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	return attr
}

// sandboxUser is who the sandbox runs as on the host: nil for an
// unprivileged caller (its own user, which u must leave zero); for root,
// u or DefaultUser, never root itself.
func sandboxUser(u User) (*User, error) {
	if os.Geteuid() != 0 {
		if !u.IsZero() {
			return nil, fmt.Errorf("%w: a sandbox user (%s) applies to a caller running as root; this one runs as uid %d, and so do its sandboxes", ErrUnavailable, u, os.Geteuid())
		}
		return nil, nil
	}
	if u.IsZero() {
		u = DefaultUser()
	}
	if err := u.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return &u, nil
}

// runBy is the path a command asked for as argv0 is run by when argv[0]
// cannot be passed on: argv0 itself when it is a path, else the program's
// name in the policy.
func runBy(argv0, execName string) string {
	if strings.HasPrefix(argv0, "/") || execName == "" {
		return argv0
	}
	return execName
}

// mirrored reports whether path lies in the system directories, which the
// sandbox shows as the host has them.
func mirrored(path string) bool {
	return under(path, SystemReadPaths) || under(path, systemLinks)
}

// maxLinks bounds the symbolic links followed in one path, as the kernel
// does (MAXSYMLINKS).
const maxLinks = 40

// sameInside reports whether path names target inside the sandbox exactly
// as it does on the host, whatever the caller, a repository or a command
// running beside it does: every step of the path, links followed, lies in
// the system directories the sandbox mirrors, outside every root the
// profile mounts specially (special), and is owned by root and not
// writable by group or others (so only root could change it between this
// check and bwrap's exec). A path through /proc (/proc/self is the server
// here and bwrap there), a workspace under /opt, or a link anyone but root
// could re-point is not the same inside.
func sameInside(path, target string, special []string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	rest := strings.Split(path[1:], "/")
	cur := "/" // always a path with no link in it
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		if !mirrored(next) || under(next, special) {
			return false
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid != 0 {
			return false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if fi.Mode().Perm()&0o022 != 0 {
				return false
			}
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return false
		}
		to, err := os.Readlink(next)
		if err != nil || to == "" {
			return false
		}
		if strings.HasPrefix(to, "/") {
			cur = "/"
		}
		rest = append(strings.Split(to, "/"), rest...)
	}
	return cur == target
}

// mounts builds the sandbox's filesystem: system directories and files by
// path (the host's, owned by root), writable roots and everything
// protected or denied inside them by descriptor, the private home as a
// sized tmpfs, and the kernel's interfaces read-only or masked. The files
// it opens are recorded in c (closed in the parent once bwrap started).
func (b Bwrap) mounts(p *Profile, c *Confinement) ([]mount, error) {
	var out []mount
	add := func(op string, rank int, paths ...string) {
		for _, path := range paths {
			out = append(out, mount{op: op, src: path, dst: path, rank: rank})
		}
	}
	for _, l := range systemLinks {
		fi, err := os.Lstat(l)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(l); err == nil {
				out = append(out, mount{op: "--symlink", src: target, dst: l})
			}
		case fi.IsDir():
			add("--ro-bind", rankRead, l)
		}
	}
	for _, path := range SystemReadPaths {
		if exists(path) {
			add("--ro-bind", rankRead, path)
		}
	}
	for dst, src := range p.Files {
		out = append(out, mount{op: "--ro-bind", src: src, dst: dst, rank: rankRead})
	}
	add("--ro-bind", rankRead, p.ReadPaths...)
	roots, err := c.openRoots(p)
	if err != nil {
		return nil, err
	}
	for _, r := range roots {
		out = append(out, mount{op: "--bind-fd", file: r.dir, dst: r.path, rank: rankWrite, reach: "workspace"},
			mount{op: "--tmpfs", dst: filepath.Join(r.path, QuarantineDir), size: denyTmpfsBytes, rank: rankDeny})
		for _, e := range r.found {
			op := "--ro-bind-fd"
			switch {
			case e.writable && (!e.dir || e.link):
				// The root's bind covers it: a mount of its own would
				// refuse the rename git and editors write it by.
				continue
			case e.writable:
				op = "--bind-fd"
			}
			out = append(out, mount{op: op, file: e.file, dst: filepath.Join(r.path, e.rel), rank: rankProtect})
		}
	}
	if p.Home != "" {
		out = append(out, mount{op: "--tmpfs", dst: p.Home, size: p.Limits.Tmp, rank: rankWrite})
	}
	masks, err := c.denyMasks(p, roots)
	if err != nil {
		return nil, err
	}
	out = append(out, masks...)
	out = append(out, kernelMasks()...)
	add("--bind", rankWrite, p.UnixSockets...)
	proxied, err := b.proxiedMounts(p, c)
	if err != nil {
		return nil, err
	}
	return append(out, proxied...), nil
}

// openRoots opens and scans every host-backed writable root (the private
// home is a tmpfs, not the host directory), making its quarantine
// directory first.
func (c *Confinement) openRoots(p *Profile) ([]*writableRoot, error) {
	c.since = time.Now().Add(-time.Second)
	for _, path := range p.WritePaths {
		if path == p.Home {
			continue
		}
		dir, err := openRoot(path)
		if err != nil {
			return nil, fmt.Errorf("%w: workspace %s: %v", ErrUnavailable, path, err)
		}
		r := &writableRoot{path: path, dir: dir}
		c.roots = append(c.roots, r)
		if err := writableBy(dir, path, c.user); err != nil {
			return nil, err
		}
		if err := c.idmap(r, len(c.roots)); err != nil {
			return nil, fmt.Errorf("%w: workspace %s: %v", ErrUnavailable, path, err)
		}
		dir = r.dir // the idmapped one, for a uid of its own
		if r.quarantine, err = openQuarantine(dir); err != nil {
			return nil, fmt.Errorf("%w: workspace %s: %v", ErrUnavailable, path, err)
		}
		found, err := scanRoot(dir, path, p.Writable, true, p.ScanBudget)
		if err != nil {
			return nil, fmt.Errorf("%w: workspace %s: %v", ErrUnavailable, path, err)
		}
		r.found = found
		dropUnmoved(r.quarantine) // what an earlier check could not move is gone
		for _, e := range found {
			if e.file != nil {
				c.childFiles = append(c.childFiles, e.file)
			}
		}
	}
	return c.roots, nil
}

// denyMasks hides each denied path that would be visible: an empty
// read-only tmpfs over a directory, /dev/null over a file. Inside a
// writable root the path is resolved by descriptor; a symbolic link there
// is refused (masking would follow it).
func (c *Confinement) denyMasks(p *Profile, roots []*writableRoot) ([]mount, error) {
	visible := append(slices.Clone(SystemReadPaths), p.ReadPaths...)
	visible = append(append(visible, p.WritePaths...), p.Home)
	var out []mount
	for _, path := range p.DenyPaths {
		if !under(path, visible) {
			continue // not visible anyway; masking it would reveal that it exists
		}
		if path == p.Home || under(path, []string{p.Home}) {
			continue // a fresh tmpfs: nothing to hide
		}
		isDir, found, err := denyTarget(path, roots)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		case !found:
		case isDir:
			out = append(out, mount{op: "--tmpfs", dst: path, size: denyTmpfsBytes, rank: rankDeny})
		default:
			out = append(out, mount{op: "--ro-bind", src: "/dev/null", dst: path, rank: rankDeny})
		}
	}
	return out, nil
}

// denyTarget says whether a denied path exists and is a directory,
// resolving it by descriptor when it lies in a writable root.
func denyTarget(path string, roots []*writableRoot) (isDir, found bool, err error) {
	for _, r := range roots {
		rel, err := filepath.Rel(r.path, path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		f, err := openBeneath(r.dir, rel, unix.O_PATH)
		switch {
		case errors.Is(err, errSymlink):
			return false, false, fmt.Errorf("denied path %s is a symbolic link inside the workspace: coily does not follow it", path)
		case err != nil:
			return false, false, nil
		}
		defer f.Close()
		st, err := statFD(f)
		if err != nil {
			return false, false, nil
		}
		return st.Mode&unix.S_IFMT == unix.S_IFDIR, true, nil
	}
	if !maskNeeded(path) {
		return false, false, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, false, nil
	}
	return fi.IsDir(), true, nil
}

// kernelMasks makes the kernel's interfaces read-only or hidden: /proc's
// writable interfaces (sysctls, sysrq-trigger, irq affinity…) read-only
// for a root caller (only root may write them: its sandboxes run as the
// sandbox user, so this is a second wall), its readable secrets masked.
func kernelMasks() []mount {
	var out []mount
	if os.Geteuid() == 0 {
		for _, p := range procReadOnly {
			if exists(p) {
				out = append(out, mount{op: "--ro-bind", src: p, dst: p, rank: rankProtect})
			}
		}
	}
	for _, p := range procMaskFiles {
		if maskNeeded(p) {
			out = append(out, mount{op: "--ro-bind", src: "/dev/null", dst: p, rank: rankDeny})
		}
	}
	for _, p := range procMaskDirs {
		if maskNeeded(p) {
			out = append(out, mount{op: "--tmpfs", dst: p, size: denyTmpfsBytes, rank: rankDeny})
		}
	}
	return out
}

// maskNeeded reports whether path exists and the sandbox could read it.
// An unprivileged caller's sandbox runs as the caller (bubblewrap maps it
// to itself), with the same groups and no capabilities, so what the
// caller may not read (a root-only file) the sandbox may not either, and
// needs no mask: each mask costs a mount on every command. A root caller's
// sandbox runs as the sandbox user, whose access is not checked file by
// file here: everything that exists is masked.
func maskNeeded(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if os.Geteuid() == 0 {
		return true
	}
	mode := uint32(unix.R_OK)
	if fi.IsDir() {
		mode = unix.X_OK
	}
	return unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS) == nil
}

func regularFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// unixSocket reports whether path is a unix socket itself (not a link to
// one).
func unixSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == os.ModeSocket
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// closeOnExecFrom marks every descriptor from low up close-on-exec.
func closeOnExecFrom(low int) error {
	err := unix.CloseRange(uint(low), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	// Before Linux 5.11: one by one.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil || fd < low {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
	}
	return nil
}

// pipeWith returns the read end of a pipe holding data (bwrap reads the
// seccomp program from it to EOF).
func pipeWith(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// The program is small (under a pipe buffer): write it all, then close.
	if _, err := w.Write(data); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	return r, nil
}

// special lists the roots the profile mounts at a path of its own choosing
// (writable and read-only roots, the home, masks and protected paths,
// single files): what lies under them inside the sandbox is not what the
// host's system directories hold there.
func (p *Profile) special() []string {
	out := slices.Concat(p.WritePaths, p.ReadPaths, p.ProtectPaths, p.DenyPaths, p.UnixSockets, []string{p.Home})
	for dst := range p.Files {
		out = append(out, dst)
	}
	return out
}
