package keyringtest

import "syscall"

// sysProcAttr kills a child when the thread that started it dies (see
// spawner), and gives it its own process group so a terminal's signals
// reach only the test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
