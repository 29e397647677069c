package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// runNetBridge runs inside a sandbox in proxied network mode (hidden
// command `__netbridge`): it serves the egress proxy's unix socket on the
// sandbox's own loopback, points the proxy variables at it, runs the
// command and exits with its status. Nothing else leaves the namespace.
func runNetBridge(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("__netbridge", flag.ContinueOnError)
	socket := fs.String("proxy-socket", "", "the egress proxy's unix socket")
	argv0 := fs.String("argv0", "", "argv[0] of the command (default: its path)")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	if *socket == "" || fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "usage: coily __netbridge --proxy-socket PATH -- ARGV...")
		return 2
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		printLine(e.stderr, "coily: bridge: %v", err)
		return 125
	}
	var wg sync.WaitGroup
	go serveBridge(l, *socket, &wg)
	proxy := "http://" + l.Addr().String()
	cmd := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
	if *argv0 != "" {
		cmd.Args[0] = *argv0
	}
	cmd.Env = append(os.Environ(), "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy,
		"https_proxy="+proxy, "ALL_PROXY="+proxy, "NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	err = cmd.Run()
	l.Close()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	case err != nil:
		printLine(e.stderr, "coily: bridge: %v", err)
		return 127
	}
	return 0
}

// serveBridge splices every loopback connection to the proxy socket.
func serveBridge(l net.Listener, socket string, wg *sync.WaitGroup) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			up, err := net.Dial("unix", socket)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}
