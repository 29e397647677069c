package sandbox

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// bwrap's --json-status-fd reports the namespaces of the sandbox's first
// process by reading /proc/PID/ns, PID as bwrap sees it: 2, in the PID
// namespace coily starts bwrap in as its init (outerNamespaces). bwrap
// opens /proc before it starts, so it reads the /proc mounted where coily
// runs: on a host that is the initial PID namespace's, whose pid 2 is
// kthreadd (harmlessly read), but inside a container with a PID namespace
// of its own pid 2 is some other process or none, and bwrap fails ("open
// /proc/2/ns/ns failed"). There, coily starts bwrap through unshare(1),
// which makes the outer user, PID and mount namespaces and mounts a /proc
// of the new PID namespace before it runs bwrap as that namespace's init:
// pid 2 is then the sandbox's own first process.

// ownProcForced makes every sandbox take the unshare path (tests, so that
// the path containers take runs on hosts too).
var ownProcForced bool

var ownProc = sync.OnceValue(func() bool { return !initialPIDNamespace(readFile) })

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return string(b)
}

// initialPIDNamespace reports whether /proc is the initial PID namespace's
// (its pid 2 is kthreadd, whose parent is 0).
func initialPIDNamespace(read func(string) string) bool {
	stat := read("/proc/2/stat")
	rest, ok := strings.CutPrefix(stat, "2 (kthreadd) ")
	if !ok {
		return false
	}
	f := strings.Fields(rest)
	return len(f) >= 2 && f[1] == "0"
}

// needOwnProc reports whether bwrap must be started with a /proc of its own.
func needOwnProc() bool { return ownProcForced || ownProc() }

// UnsharePath finds unshare(1) (util-linux).
func UnsharePath() (string, error) {
	for _, p := range []string{"/usr/bin/unshare", "/bin/unshare"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return exec.LookPath("unshare")
}

// ownProcArgv is unshare's argv (from its path) that runs bwrap, as uid and
// gid both outside and inside, as the init of new user, PID and mount
// namespaces with a /proc of its own; unshare waits for it and, killed,
// kills it (and so the whole sandbox: bwrap is its PID namespace's init).
func ownProcArgv(unshare string, uid, gid int) []string {
	return []string{unshare, "--user", "--map-user=" + strconv.Itoa(uid), "--map-group=" + strconv.Itoa(gid),
		"--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--propagation", "private", "--"}
}

// ownProcAttr starts unshare in no namespace of coily's making, as runAs
// when coily is root (its groups dropped), so that the namespaces unshare
// makes are runAs's.
func ownProcAttr(runAs *User) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if runAs != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(runAs.UID), Gid: uint32(runAs.GID), Groups: []uint32{}}
	}
	return attr
}

// OwnProc reports whether sandboxes here start bwrap through unshare(1)
// with a /proc of its own: outside the host's initial PID namespace.
func OwnProc() bool { return needOwnProc() }
