package sandbox

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups is a cgroup v2 subtree the server may manage: its own cgroup,
// when writable (systemd's Delegate=yes, or root). Each command gets a
// child cgroup there: membership of every process it starts, cgroup.kill
// for timeout, cancel and lockout, and memory.max and pids.max when those
// controllers are available to the subtree.
type Cgroups struct {
	// Dir is the server's cgroup directory.
	Dir string
	// Memory and Pids report whether children can be given memory.max and
	// pids.max.
	Memory, Pids bool
	// Prefix names this server's command cgroups (it distinguishes servers
	// sharing a cgroup, such as tests in one process).
	Prefix string
}

// FindCgroups returns the server's delegated cgroup v2 subtree, or an
// error saying why there is none (then limits are rlimits only). prefix
// names this server's command cgroups.
func FindCgroups(prefix string) (*Cgroups, error) {
	g, err := InspectCgroups()
	if err != nil {
		return nil, err
	}
	g.Prefix = "coily-" + prefix + "-"
	dir := g.Dir
	want := []string{}
	if g.Memory {
		want = append(want, "+memory")
	}
	if g.Pids {
		want = append(want, "+pids")
	}
	g.Memory, g.Pids = false, false
	if len(want) > 0 {
		if err := enableControllers(dir, want); err == nil {
			enabled, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			on := strings.Fields(string(enabled))
			g.Memory, g.Pids = contains(on, "memory"), contains(on, "pids")
		}
	}
	return g, nil
}

// InspectCgroups finds the server's cgroup v2 directory and the memory
// and pids controllers it could hand to children, changing nothing
// (`coily sandbox check`).
func InspectCgroups() (*Cgroups, error) {
	dir, err := ownCgroupDir()
	if err != nil {
		return nil, err
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return nil, fmt.Errorf("cgroup %s is not writable by this user (run under systemd with Delegate=yes)", dir)
	}
	controllers, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	have := strings.Fields(string(controllers))
	return &Cgroups{Dir: dir, Memory: contains(have, "memory"), Pids: contains(have, "pids")}, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// enableControllers turns controllers on for dir's children. A cgroup with
// processes of its own cannot (the kernel's no-internal-processes rule),
// so the server first moves itself into a leaf, as systemd's delegation
// documentation describes.
func enableControllers(dir string, want []string) error {
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	err := os.WriteFile(ctl, []byte(strings.Join(want, " ")), 0)
	if err == nil || !errors.Is(err, unix.EBUSY) {
		return err
	}
	leaf := filepath.Join(dir, "coily-server")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return err
	}
	return os.WriteFile(ctl, []byte(strings.Join(want, " ")), 0)
}

// ownCgroupDir finds this process's cgroup v2 directory.
func ownCgroupDir() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var path string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			path = rest
		}
	}
	if path == "" {
		return "", errors.New("no cgroup v2 hierarchy (cgroup v1 only)")
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(mnt, path)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("cgroup %s is not visible here (a cgroup namespace or a private mount)", dir)
	}
	return dir, nil
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted, at its root.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fields[sep+1] == "cgroup2" && fields[3] == "/" {
			return unescapeMount(fields[4]), nil
		}
	}
	return "", errors.New("no cgroup2 filesystem mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space…).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// execCgroup is one command's cgroup.
type execCgroup struct {
	dir          string
	memory, pids bool // memory.max and pids.max set
}

// create makes a command's cgroup with the limits the subtree supports.
func (g *Cgroups) create(l Limits) (*execCgroup, error) {
	if g == nil {
		return nil, nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(g.Dir, g.Prefix+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	e := &execCgroup{dir: dir, memory: g.Memory, pids: g.Pids}
	set := func(file string, v int64) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0)
	}
	var err error
	if g.Memory {
		err = set("memory.max", l.Memory)
		if serr := set("memory.swap.max", 0); serr != nil && !errors.Is(serr, os.ErrNotExist) {
			err = errors.Join(err, serr) // absent without swap accounting
		}
	}
	if g.Pids {
		err = errors.Join(err, set("pids.max", l.Processes))
	}
	if err != nil {
		e.remove()
		return nil, fmt.Errorf("cgroup limits: %w", err)
	}
	return e, nil
}

// describe says what the cgroup bounds, for the audit record.
func (e *execCgroup) describe() string {
	switch {
	case e.memory && e.pids:
		return "cgroup(memory,pids,kill)+rlimit"
	case e.memory:
		return "cgroup(memory,kill)+rlimit"
	case e.pids:
		return "cgroup(pids,kill)+rlimit"
	}
	return "cgroup(kill)+rlimit"
}

// kill kills every process in the cgroup (Linux 5.14's cgroup.kill), or
// each listed process on older kernels.
func (e *execCgroup) kill() {
	if e == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(e.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for _, pid := range e.procs() {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// pids lists the cgroup's processes.
func (e *execCgroup) procs() []int {
	data, _ := os.ReadFile(filepath.Join(e.dir, "cgroup.procs"))
	var out []int
	for _, f := range bytes.Fields(data) {
		if n, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// remove kills what is left and deletes the cgroup, waiting (bounded) for
// the kernel to empty it.
func (e *execCgroup) remove() {
	if e == nil {
		return
	}
	removeCgroup(e.dir)
}

func removeCgroup(dir string) {
	e := &execCgroup{dir: dir}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) || time.Now().After(deadline) {
			return
		}
		e.kill()
		time.Sleep(2 * time.Millisecond) // the kernel empties a killed cgroup asynchronously
	}
}

// killAll kills every process of every command cgroup of this server
// (same Prefix): what the kernel holds, whatever the server remembers.
func (g *Cgroups) killAll() {
	if g == nil {
		return
	}
	entries, err := os.ReadDir(g.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), g.Prefix) {
			(&execCgroup{dir: filepath.Join(g.Dir, e.Name())}).kill()
		}
	}
}

// Cleanup kills and removes command cgroups a previous run of this server
// (same Prefix) left behind.
func (g *Cgroups) Cleanup() int {
	if g == nil {
		return 0
	}
	entries, err := os.ReadDir(g.Dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), g.Prefix) {
			removeCgroup(filepath.Join(g.Dir, e.Name()))
			n++
		}
	}
	return n
}
