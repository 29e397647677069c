package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UIDPool gives each sandbox of a server running as root a host uid of its
// own, from a range reserved for it, as systemd's DynamicUser does: the
// kernel's per-user limits (inotify instances and watches, user
// namespaces, processes, pending signals, keyrings) then never couple two
// commands, nor a command and the server. What a command writes in its
// workspace is still the sandbox user's on disk: the workspace is bound
// through an idmapped mount that shows the sandbox user's files as the
// command's uid's and stores the command's as the sandbox user's
// (idmap_linux.go). A uid goes back to the pool only once no process of
// it is left.
//
// Servers (and tests) on one host may share a range: a uid is held under
// an exclusive lock on a file of its own in a root-only directory
// (LockDir), so no two of them ever hand out the same uid at once, and
// each kills only the processes of the uids it holds.
type UIDPool struct {
	first, count int
	owner        User // the sandbox user: who owns what sandboxes write
	lockDir      string
	prlimit      string // prlimit(1): sets the rlimits bwrap starts under

	mu     sync.Mutex
	free   []int            // last released first: few idmap namespaces are ever made
	next   int              // uids first..next-1 have been tried once
	inUse  map[int]*os.File // the uids held, by their lock
	userns map[int]*os.File // idmap namespace of each uid (idmapNS)
	wg     sync.WaitGroup   // releases under way
}

// DefaultUIDs is the range a server running as root takes its sandboxes'
// uids from unless told otherwise: 4096 uids from 0x70000000, above the
// ranges Linux distributions and container tools hand out (systemd's
// dynamic users, nspawn's container ranges end below it).
const (
	DefaultUIDFirst = 0x70000000
	DefaultUIDCount = 4096
)

// NewUIDPool reserves first..first+count-1 for sandboxes whose files owner
// owns. It refuses a range that holds a user or group of /etc/passwd or
// /etc/group, root's, or owner's.
func NewUIDPool(first, count int, owner User) (*UIDPool, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a uid per sandbox needs a server running as root")
	}
	last := first + count - 1
	switch {
	case first <= 0 || count <= 0 || last >= 1<<32-1:
		return nil, fmt.Errorf("sandbox uid range %d+%d: out of bounds", first, count)
	case owner.UID >= first && owner.UID <= last, owner.GID >= first && owner.GID <= last:
		return nil, fmt.Errorf("sandbox uid range %d-%d holds the sandbox user %s", first, last, owner)
	}
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		if name, id, ok := idInRange(f, first, last); ok {
			return nil, fmt.Errorf("sandbox uid range %d-%d holds %s of %s (id %d): choose another (coily serve --sandbox-uids)", first, last, name, f, id)
		}
	}
	dir := uidLockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox uid locks: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		return nil, fmt.Errorf("sandbox uid locks: %s must be a directory of root's alone (mode 0700)", dir)
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		return nil, fmt.Errorf("a uid per sandbox needs prlimit(1) (util-linux): %w", err)
	}
	return &UIDPool{first: first, count: count, owner: owner, lockDir: dir, prlimit: prlimit, next: first,
		inUse: map[int]*os.File{}, userns: map[int]*os.File{}}, nil
}

// uidLockDir is where the locks of held uids are: /run's, where /run is
// root's alone, else the temporary directory's.
func uidLockDir() string {
	base := os.TempDir()
	if fi, err := os.Lstat("/run"); err == nil && fi.IsDir() && fi.Mode().Perm()&0o022 == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 {
			base = "/run"
		}
	}
	return base + "/coily-uids"
}

// idInRange finds an entry of a passwd or group file whose id lies in
// first..last.
func idInRange(file string, first, last int) (string, int, bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		if id, err := strconv.Atoi(fields[2]); err == nil && id >= first && id <= last {
			return fields[0], id, true
		}
	}
	return "", 0, false
}

// Range says which uids the pool hands out.
func (p *UIDPool) Range() (first, count int) { return p.first, p.count }

// Owner is the sandbox user, who owns on disk what sandboxes write.
func (p *UIDPool) Owner() User { return p.owner }

// Acquire hands out a uid no running sandbox of any server has, with the
// sandbox user's group, until Release.
func (p *UIDPool) Acquire() (User, error) {
	if p == nil {
		return User{}, errors.New("no sandbox uid pool")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for tries := 0; tries < p.count; tries++ {
		var uid int
		switch {
		case len(p.free) > 0:
			uid = p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
		case p.next < p.first+p.count:
			uid = p.next
			p.next++
		default:
			return User{}, fmt.Errorf("%w: all %d sandbox uids are in use", ErrUnavailable, p.count)
		}
		lock, err := p.lock(uid)
		if err != nil {
			continue // another server's: the next
		}
		p.inUse[uid] = lock
		return User{UID: uid, GID: p.owner.GID, Name: "coily-" + strconv.Itoa(uid)}, nil
	}
	return User{}, fmt.Errorf("%w: all %d sandbox uids are in use", ErrUnavailable, p.count)
}

// lock takes uid's lock, or fails when another process holds it.
func (p *UIDPool) lock(uid int) (*os.File, error) {
	f, err := os.OpenFile(p.lockDir+"/"+strconv.Itoa(uid), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Release gives u back once none of its processes is left, in the
// background: a sandbox whose PID namespace's init was reaped has none (the
// kernel reaps every process of a namespace before its init), but the
// check, a walk of /proc, costs the command's answer nothing. A uid whose
// processes do not all die within 5 s is kept, never handed out again, and
// reported to onStuck.
func (p *UIDPool) Release(u User, onStuck func(error)) {
	if p == nil || u.IsZero() {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		deadline := time.Now().Add(5 * time.Second)
		for killUIDs(u.UID, u.UID) > 0 {
			if time.Now().After(deadline) {
				if onStuck != nil {
					onStuck(fmt.Errorf("sandbox uid %d still has processes after 5 s: it is not handed out again", u.UID))
				}
				return
			}
			time.Sleep(5 * time.Millisecond) // the kernel reaps killed processes asynchronously
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if lock := p.inUse[u.UID]; lock != nil {
			lock.Close()
			delete(p.inUse, u.UID)
			p.free = append(p.free, u.UID)
		}
	}()
}

// Wait waits for the releases under way.
func (p *UIDPool) Wait() {
	if p != nil {
		p.wg.Wait()
	}
}

// KillAll SIGKILLs every process of every uid the pool holds: no process
// of this server's sandbox users remains, whatever its tables say.
func (p *UIDPool) KillAll() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	held := make([]int, 0, len(p.inUse))
	for uid := range p.inUse {
		held = append(held, uid)
	}
	p.mu.Unlock()
	n := 0
	for _, uid := range held {
		n += killUIDs(uid, uid)
	}
	return n
}

// killUIDs SIGKILLs every live process with a real, effective, saved or
// file-system uid in first..last, through a pidfd opened before its uid is
// read again (a pid reused in between is never signalled), and returns how
// many it signalled.
func killUIDs(first, last int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !uidsInRange(pid, first, last) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		if uidsInRange(pid, first, last) && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
			n++
		}
		unix.Close(fd)
	}
	return n
}

// uidsInRange reports whether a live (not zombie) pid has a uid in
// first..last.
func uidsInRange(pid, first, last int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "State:") && strings.Contains(line, "zombie"):
			return false
		case strings.HasPrefix(line, "Uid:"):
			for _, f := range strings.Fields(line)[1:] {
				if id, err := strconv.Atoi(f); err == nil && id >= first && id <= last {
					in = true
				}
			}
		}
	}
	return in
}

// idmapNS returns the user namespace of uid's idmapped mounts (made once,
// kept open): on-disk ids map to themselves, but the sandbox user's, which
// maps to uid (and uid to none).
func (p *UIDPool) idmapNS(uid int) (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.userns[uid]; f != nil {
		return f, nil
	}
	f, err := newIdmapNS(p.owner.UID, uid)
	if err != nil {
		return nil, err
	}
	p.userns[uid] = f
	return f, nil
}

// newIdmapNS makes a user namespace whose uid map takes owner to uid and
// every other id to itself (uid itself has no id in it), and whose gid map
// is the identity: a process is started in it only to hold it while it is
// opened.
func newIdmapNS(owner, uid int) (*os.File, error) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, fmt.Errorf("idmap namespace: %w", err)
	}
	cmd := exec.Command(sleep, "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL,
		UidMappings: idmapExtents(owner, uid),
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: maxID}}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("idmap namespace: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("idmap namespace: %w", err)
	}
	return f, nil
}

// maxID bounds the ids a map covers (4294967295 is no id).
const maxID = 1<<32 - 2

// idmapExtents maps every id to itself but owner to uid (and uid to none).
func idmapExtents(owner, uid int) []syscall.SysProcIDMap {
	var out []syscall.SysProcIDMap
	identity := func(from, to int) { // from..to-1
		if to > from {
			out = append(out, syscall.SysProcIDMap{ContainerID: from, HostID: from, Size: to - from})
		}
	}
	lo, hi := min(owner, uid), max(owner, uid)
	identity(0, lo)
	identity(lo+1, hi)
	identity(hi+1, maxID+1)
	return append(out, syscall.SysProcIDMap{ContainerID: owner, HostID: uid, Size: 1})
}
