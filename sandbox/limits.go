package sandbox

import (
	"fmt"
	"time"
)

// Limits bound one sandboxed command and everything it starts. Zero fields
// take the DefaultLimits value.
type Limits struct {
	// Memory caps memory: memory.max of the command's cgroup when the server
	// has a delegated cgroup v2 subtree with the memory controller, else
	// RLIMIT_DATA of each process (writable private memory, per process).
	Memory int64
	// Processes caps processes and threads: pids.max, else RLIMIT_NPROC
	// (counted in the sandbox's own user namespace; the kernel does not
	// apply it to root, and a root caller's sandboxes run as the sandbox
	// user for that reason too).
	Processes int64
	// OpenFiles is RLIMIT_NOFILE; FileSize is RLIMIT_FSIZE.
	OpenFiles int64
	FileSize  int64
	// CPU is RLIMIT_CPU of each process; zero means the command's timeout.
	CPU time.Duration
	// Tmp sizes each private tmpfs: /tmp and the private home (the
	// temporary workspace). Shm sizes /dev/shm; the rest of /dev is
	// read-only.
	Tmp int64
	Shm int64
}

// DefaultLimits are what a fork bomb or a memory balloon meets when the
// policy says nothing: 512 processes, 2 GiB, 256 MiB of /tmp.
var DefaultLimits = Limits{
	Memory:    2 << 30,
	Processes: 512,
	OpenFiles: 4096,
	FileSize:  4 << 30,
	Tmp:       256 << 20,
	Shm:       64 << 20,
}

// WithDefaults fills the zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.Processes == 0 {
		l.Processes = d.Processes
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	if l.FileSize == 0 {
		l.FileSize = d.FileSize
	}
	if l.Tmp == 0 {
		l.Tmp = d.Tmp
	}
	if l.Shm == 0 {
		l.Shm = d.Shm
	}
	return l
}

// Check reports a negative or absurdly small limit.
func (l Limits) Check() error {
	for _, f := range []struct {
		name string
		v    int64
		min  int64
	}{
		{"memory", l.Memory, 16 << 20}, {"processes", l.Processes, 8}, {"open_files", l.OpenFiles, 16},
		{"file_size", l.FileSize, 1 << 20}, {"tmp", l.Tmp, 1 << 20}, {"shm", l.Shm, 1 << 20},
	} {
		if f.v != 0 && f.v < f.min {
			return fmt.Errorf("limit %s %d is below the minimum %d", f.name, f.v, f.min)
		}
	}
	if l.CPU < 0 {
		return fmt.Errorf("limit cpu %s is negative", l.CPU)
	}
	return nil
}
