//go:build linux

package netnstest_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"coily.dev/coily/internal/netnstest"
)

func require(t *testing.T) {
	t.Helper()
	if err := netnstest.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: CI runs this package's tests as root", err)
		}
		t.Skip(err)
	}
}

// Two namespaces joined by a veth pair: a listener made in one is reached
// from the other and not from the test's own namespace; with one end of
// the pair down a dial goes unanswered (silent: no refusal), and with it
// up again it is answered.
func TestVeth(t *testing.T) {
	require(t)
	a, b := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, a, "va", "10.99.0.2/30", b, "vb", "10.99.0.1/30")
	ln, err := b.Listen("tcp", "10.99.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	dial := func(ns *netnstest.NS) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var c net.Conn
		var err error
		if ns == nil {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		} else {
			c, err = ns.DialContext(ctx, "tcp", addr)
		}
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(a); err != nil {
		t.Fatalf("dial across the pair: %v", err)
	}
	if err := dial(nil); err == nil {
		t.Fatal("the listener in a namespace of the test's is reached from the test's own")
	}
	b.IP(t, "link", "set", "vb", "down")
	// Unanswered: the dial times out (as the context's deadline, or as the
	// socket's own deadline set from it: which one wins is a race).
	if err := dial(a); !timedOut(err) {
		t.Fatalf("dial with the pair's far end down: %v, want it unanswered", err)
	}
	b.IP(t, "link", "set", "vb", "up")
	// The link comes up (carrier) after ip returns, and a SYN sent before
	// is retransmitted only a second later: poll with a deadline.
	deadline := time.Now().Add(15 * time.Second)
	for err := dial(a); err != nil; err = dial(a) {
		if time.Now().After(deadline) {
			t.Fatalf("dial with the pair up again: %v", err)
		}
	}
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
