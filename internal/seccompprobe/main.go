//go:build linux

// Command seccompprobe is run inside bubblewrap under coily's seccomp
// filter by the sandbox package's tests. For each check named on its
// command line it prints "name ok" or "name errno N".
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func raw(nr uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := syscall.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	return nil
}

// modeProbe runs f on a fresh file in /dev/shm (bwrap's --dev makes it
// writable).
func modeProbe(f func(string) error) error {
	path := "/dev/shm/probe-mode"
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return err
	}
	defer os.Remove(path)
	return f(path)
}

func main() {
	checks := map[string]func() error{
		"unix-socket": func() error {
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		},
		"inet-socket": func() error {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		},
		"socketpair": func() error {
			fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err == nil {
				syscall.Close(fds[0])
				syscall.Close(fds[1])
			}
			return err
		},
		"vsock-socket": func() error {
			fd, err := syscall.Socket(40, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		},
		"netlink-route": func() error {
			fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		},
		"netlink-audit": func() error {
			fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, 9)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		},
		"chmod-plain":  func() error { return modeProbe(func(p string) error { return syscall.Chmod(p, 0o755) }) },
		"chmod-setuid": func() error { return modeProbe(func(p string) error { return syscall.Chmod(p, 0o4755) }) },
		"fchmod-setgid": func() error {
			return modeProbe(func(p string) error {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				return syscall.Fchmod(int(f.Fd()), 0o2755)
			})
		},
		"create-setuid": func() error {
			fd, err := syscall.Open("/dev/shm/probe-suid", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o4755)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		},
		"mkdir-setgid": func() error { return syscall.Mkdir("/dev/shm/probe-sgid", 0o2755) },
		"openat2":      func() error { return raw(437, uintptr(0xffffff9c) /* AT_FDCWD */, 0, 0, 0) },
		"unshare-user": func() error { return syscall.Unshare(syscall.CLONE_NEWUSER) },
		"clone-newuser": func() error {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
			return cmd.Run()
		},
		"fork-exec": func() error { return exec.Command("/bin/true").Run() },
		// PEEKDATA on a process we are not attached to: ESRCH without the
		// filter, and it never stops anyone.
		"ptrace": func() error { return raw(syscall.SYS_PTRACE, syscall.PTRACE_PEEKDATA, uintptr(os.Getppid()), 0, 0) },
		"keyctl": func() error {
			return raw(syscall.SYS_KEYCTL, 0 /* KEYCTL_GET_KEYRING_ID */, uintptr(0xfffffffd) /* session */, 0)
		},
		"io-uring":             func() error { return raw(425, 1, 0) },
		"clone3":               func() error { return raw(435, 0, 0) },
		"mount":                func() error { return syscall.Mount("none", "/tmp", "tmpfs", 0, "") },
		"personality-query":    func() error { return raw(syscall.SYS_PERSONALITY, 0xffffffff) },
		"personality-norandom": func() error { return raw(syscall.SYS_PERSONALITY, 0x0040000) },
	}
	for _, name := range os.Args[1:] {
		f, ok := checks[name]
		if !ok {
			fmt.Printf("%s unknown\n", name)
			continue
		}
		var errno syscall.Errno
		switch err := f(); {
		case err == nil:
			fmt.Printf("%s ok\n", name)
		case errors.As(err, &errno):
			fmt.Printf("%s errno %d\n", name, int(errno))
		default:
			fmt.Printf("%s error %v\n", name, err)
		}
	}
}
