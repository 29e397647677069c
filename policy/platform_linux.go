package policy

import (
	"syscall"
	"time"
)

const defaultSandbox = SandboxBwrap

// statCtime is the file's inode change time.
func statCtime(st *syscall.Stat_t) time.Time {
	return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
}
