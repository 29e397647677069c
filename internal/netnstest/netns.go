//go:build linux

// Package netnstest makes network namespaces for tests: anonymous ones,
// each held by an open file of the test's (no name under /run/netns, so
// two runs never collide and none outlives the test's process and the
// processes it started inside), joined by veth pairs that iproute2's ip
// configures, and sockets and processes made inside them from a goroutine
// locked to a thread that has joined the namespace (a socket keeps the
// namespace it was made in; a process starts in its parent thread's).
//
// It needs root (CAP_SYS_ADMIN to join a namespace, CAP_NET_ADMIN in it)
// and ip on PATH: Available says whether the process has both.
package netnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Available reports why namespaces cannot be made here (nil: they can).
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("network namespaces need root (uid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("network namespaces are configured with iproute2's ip: %w", err)
	}
	return nil
}

// NS is a network namespace of the test's, held open until the test ends
// (then gone once no process is left inside).
type NS struct{ f *os.File }

// New makes a namespace holding only a loopback interface, set up.
func New(t testing.TB) *NS {
	t.Helper()
	f, err := unshared()
	if err != nil {
		t.Fatalf("netnstest: %v", err)
	}
	n := &NS{f: f}
	t.Cleanup(func() { f.Close() })
	n.IP(t, "link", "set", "lo", "up")
	return n
}

// unshared makes a namespace on a locked thread and returns a file of it,
// the thread back in the namespace it was in.
func unshared() (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	out := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			out <- result{err: err}
			return
		}
		defer home.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			out <- result{err: fmt.Errorf("unshare: %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked: the goroutine's end ends it.
			if f != nil {
				f.Close()
			}
			out <- result{err: fmt.Errorf("back to the test's namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		out <- result{f, err}
	}()
	r := <-out
	return r.f, r.err
}

// Do runs f on a thread inside n: the sockets it makes and the processes
// it starts are n's.
func (n *NS) Do(f func() error) error {
	out := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			out <- err
			return
		}
		defer home.Close()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			out <- fmt.Errorf("netnstest: join: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked: the goroutine's end ends it.
			out <- errors.Join(ferr, fmt.Errorf("netnstest: back to the test's namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		out <- ferr
	}()
	return <-out
}

// IP runs ip with args inside n, failing the test if it fails.
func (n *NS) IP(t testing.TB, args ...string) {
	t.Helper()
	if err := n.ip(nil, args...); err != nil {
		t.Fatal(err)
	}
}

// ip runs ip with args inside n, the files extra open in it from fd 3 on.
func (n *NS) ip(extra []*os.File, args ...string) error {
	var out []byte
	err := n.Do(func() error {
		cmd := exec.Command("ip", args...)
		cmd.ExtraFiles = extra
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("netnstest: ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Veth joins a and b by a veth pair, its ends aName in a with address
// aAddr and bName in b with bAddr (CIDR, e.g. 10.99.0.2/30), both up. The
// pair never appears in the test's namespace; it is deleted when the test
// ends.
func Veth(t testing.TB, a *NS, aName, aAddr string, b *NS, bName, bAddr string) {
	t.Helper()
	// ip opens a namespace named by a path (one holding a /) as is: the
	// peer is made in b, through b's file passed as fd 3.
	if err := a.ip([]*os.File{b.f}, "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", "/proc/self/fd/3"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.ip(nil, "link", "del", aName); err != nil {
			t.Errorf("delete the veth pair: %v", err)
		}
	})
	a.IP(t, "addr", "add", aAddr, "dev", aName)
	b.IP(t, "addr", "add", bAddr, "dev", bName)
	a.IP(t, "link", "set", aName, "up")
	b.IP(t, "link", "set", bName, "up")
}

// Listen listens on addr inside n.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// DialContext dials addr from inside n (for an http.Transport).
func (n *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Start starts cmd inside n.
func (n *NS) Start(cmd *exec.Cmd) error { return n.Do(cmd.Start) }
