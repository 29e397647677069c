package canary

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// memChunk bounds one read of a process's memory; chunks overlap by
// memOverlap so that a form cut by a chunk's end is whole in the next.
const (
	memChunk   = 16 << 20
	memOverlap = 4 << 10
)

// CheckMemory fails the test when the memory of any of pids holds a
// secret: every readable mapping of /proc/PID/maps, read through
// /proc/PID/mem (which takes the right to ptrace the process: root, or
// the process's own user where Yama lets an ancestor). A mapping the
// kernel will not read ([vvar], a guard page) is passed over; a process
// that cannot be opened fails the test, one that exited meanwhile does
// not. It reports whether proof, a string the processes are known to
// hold, was seen in any of them, so that a read that saw nothing cannot
// pass for a clean one, and how many bytes were read.
func (c *Canary) CheckMemory(pids []int, proof []byte) (bool, int64) {
	c.t.Helper()
	seen, total := false, int64(0)
	for _, pid := range pids {
		s, n, err := c.scanMemory(pid, proof)
		seen, total = seen || s, total+n
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
			c.t.Errorf("canary: the memory of pid %d: %v", pid, err)
		}
	}
	return seen, total
}

func (c *Canary) scanMemory(pid int, proof []byte) (bool, int64, error) {
	c.t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false, 0, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false, 0, err
	}
	defer mem.Close()
	seen, total := false, int64(0)
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		start, end, ok := readableRange(sc.Text())
		if !ok {
			continue
		}
		for off := start; off < end; off += memChunk - memOverlap {
			buf := make([]byte, min(memChunk, end-off))
			n, _ := mem.ReadAt(buf, int64(off)) // a mapping the kernel will not read gives EIO
			total += int64(n)
			if name := c.found(buf[:n]); name != "" {
				c.t.Errorf("canary: the memory of pid %d (%s) holds %s", pid, sc.Text(), name)
			}
			seen = seen || (len(proof) > 0 && bytes.Contains(buf[:n], proof))
			if off+memChunk >= end {
				break
			}
		}
	}
	return seen, total, nil
}

// readableRange is a maps line's address range when it is readable.
func readableRange(line string) (uint64, uint64, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[1], "r") {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(a, 16, 64)
	end, err2 := strconv.ParseUint(b, 16, 64)
	if !ok || err1 != nil || err2 != nil || end <= start || (len(f) >= 6 && f[5] == "[vsyscall]") {
		return 0, 0, false
	}
	return start, end, true
}

// PIDNamespace lists the processes in the PID namespace of pid (the
// sandbox of a process found in it), pid among them.
func PIDNamespace(pid int) ([]int, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, p)
		}
	}
	return out, nil
}
