//go:build !linux

package policy

import (
	"syscall"
	"time"
)

const defaultSandbox = SandboxSandboxExec

// statCtime is the file's inode change time.
func statCtime(st *syscall.Stat_t) time.Time {
	return time.Unix(int64(st.Ctimespec.Sec), int64(st.Ctimespec.Nsec))
}
