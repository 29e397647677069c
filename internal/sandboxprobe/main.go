//go:build linux

// Command sandboxprobe makes, from inside a sandbox, the attempts a shell
// cannot: connect to a unix socket, ptrace a process, dial TCP, create a
// socket of a given family, make a file setuid, list its descriptors. It
// prints "ok" (or what it found) or the error, and exits 0 only when the
// attempt succeeded. Tests build it into a sandbox's workspace.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: sandboxprobe unix|tcp|ptrace|socket|socketpair|setuid|fds|inotify [ARGS...]")
		os.Exit(2)
	}
	out, err := probe(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func probe(what string, args []string) (string, error) {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	num := func(i int) int {
		n, _ := strconv.Atoi(arg(i))
		return n
	}
	switch what {
	case "unix", "tcp":
		c, err := net.DialTimeout(what, arg(0), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return "ok", err
	case "ptrace":
		err := syscall.PtraceAttach(num(0))
		if err == nil {
			_ = syscall.PtraceDetach(num(0))
		}
		return "ok", err
	case "socket": // FAMILY TYPE PROTO, as numbers
		fd, err := syscall.Socket(num(0), num(1)|syscall.SOCK_CLOEXEC, num(2))
		if err == nil {
			syscall.Close(fd)
		}
		return "ok", err
	case "socketpair": // FAMILY
		fds, err := syscall.Socketpair(num(0), syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
		}
		return "ok", err
	case "setuid": // PATH: create it with the setuid bit, else chmod it so
		if fd, err := syscall.Open(arg(0), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o4755); err == nil {
			syscall.Close(fd)
			var st syscall.Stat_t
			if syscall.Stat(arg(0), &st) == nil && st.Mode&syscall.S_ISUID != 0 {
				return "ok", nil
			}
		}
		return "ok", syscall.Chmod(arg(0), 0o4755)
	case "inotify": // N [HOLD]: make N inotify instances, print how many it got, keep them HOLD (a duration) after
		got := 0
		var err error
		for range num(0) {
			if _, err = syscall.InotifyInit1(syscall.IN_CLOEXEC); err != nil {
				break
			}
			got++
		}
		fmt.Printf("inotify %d of %d\n", got, num(0))
		if d, perr := time.ParseDuration(arg(1)); perr == nil {
			time.Sleep(d) // held until the test kills it
		}
		return "done", err
	case "fds": // the descriptors open in this process, but the one listing them
		// Raw calls: the os package would open descriptors of its own
		// (the runtime's poller).
		dir, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer syscall.Close(dir)
		buf := make([]byte, 8192)
		n, err := syscall.ReadDirent(dir, buf)
		if err != nil {
			return "", err
		}
		var names []string
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
		var fds []string
		for _, name := range names {
			if name != strconv.Itoa(dir) {
				fds = append(fds, name)
			}
		}
		return strings.Join(fds, " "), nil
	}
	return "", fmt.Errorf("unknown probe %q", what)
}
