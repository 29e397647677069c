// Command sandboxprobe makes, from inside a sandbox, the attempts a shell
// cannot: connect to a unix socket, ptrace a process, dial TCP. It prints
// "ok" or the error, and exits 0 only when the attempt succeeded. Tests
// build it into a sandbox's workspace.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Println("usage: sandboxprobe unix|tcp|ptrace TARGET")
		os.Exit(2)
	}
	var err error
	switch target := os.Args[2]; os.Args[1] {
	case "unix":
		var c net.Conn
		if c, err = net.DialTimeout("unix", target, 2*time.Second); err == nil {
			c.Close()
		}
	case "tcp":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", target, 2*time.Second); err == nil {
			c.Close()
		}
	case "ptrace":
		pid, _ := strconv.Atoi(target)
		if err = syscall.PtraceAttach(pid); err == nil {
			_ = syscall.PtraceDetach(pid)
		}
	default:
		err = fmt.Errorf("unknown probe %q", os.Args[1])
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("ok")
}
