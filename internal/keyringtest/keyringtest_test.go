package keyringtest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/zalando/go-keyring"
)

// pids returns the processes of the running service.
func pids(t *testing.T) []int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if active == nil {
		t.Fatal("no service")
	}
	var out []int
	for _, p := range active.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still there after the test (kill 0: %v)", pid, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if active != nil {
		t.Error("service still registered as active")
	}
}

func TestStartSetGetLockUnlock(t *testing.T) {
	var started []int
	var addr string
	t.Run("first", func(t *testing.T) {
		begin := time.Now()
		Start(t)
		t.Logf("Start took %v", time.Since(begin))
		Start(t) // a no-op while it runs
		started = pids(t)
		if len(started) != 2 {
			t.Fatalf("%d processes, want dbus-daemon and gnome-keyring-daemon", len(started))
		}
		addr = os.Getenv("DBUS_SESSION_BUS_ADDRESS")
		if err := keyring.Set("keyringtest", "acct", "first-value"); err != nil {
			t.Fatal(err)
		}
		if v, err := keyring.Get("keyringtest", "acct"); err != nil || v != "first-value" {
			t.Fatalf("Get = %q, %v", v, err)
		}
		Lock(t)
		// No prompter on the test bus: go-keyring's unlock fails at once.
		if _, err := keyring.Get("keyringtest", "acct"); err == nil {
			t.Fatal("Get of a locked collection succeeded")
		}
		Unlock(t)
		if v, err := keyring.Get("keyringtest", "acct"); err != nil || v != "first-value" {
			t.Fatalf("Get after Unlock = %q, %v", v, err)
		}
	})
	assertGone(t, started)
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == addr {
		t.Error("DBUS_SESSION_BUS_ADDRESS not restored")
	}

	// A second service in the same process: godbus's shared connection
	// was closed, so go-keyring reaches the new one, whose keyring is
	// fresh.
	t.Run("second", func(t *testing.T) {
		Start(t)
		started = pids(t)
		if _, err := keyring.Get("keyringtest", "acct"); !errors.Is(err, keyring.ErrNotFound) {
			t.Fatalf("Get in a fresh keyring: %v, want ErrNotFound", err)
		}
		if err := keyring.Set("keyringtest", "acct", "second-value"); err != nil {
			t.Fatal(err)
		}
		if v, err := keyring.Get("keyringtest", "acct"); err != nil || v != "second-value" {
			t.Fatalf("Get = %q, %v", v, err)
		}
	})
	assertGone(t, started)
}

func TestStartBus(t *testing.T) {
	var started []int
	t.Run("bus", func(t *testing.T) {
		StartBus(t)
		started = pids(t)
		c, err := dbus.Connect(os.Getenv("DBUS_SESSION_BUS_ADDRESS"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var has bool
		if err := c.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, secretService).Store(&has); err != nil || has {
			t.Fatalf("NameHasOwner(%s) = %v, %v; want false", secretService, has, err)
		}
		// Nothing is activated on the test bus.
		err = c.Object(secretService, secretServicePath).Call("org.freedesktop.DBus.Peer.Ping", 0).Err
		var de dbus.Error
		if !errors.As(err, &de) || de.Name != "org.freedesktop.DBus.Error.ServiceUnknown" {
			t.Fatalf("Ping %s: %v, want ServiceUnknown", secretService, err)
		}
	})
	assertGone(t, started)
}

func TestLockWithoutStart(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Lock(ft)
	}()
	<-done
	if !ft.failed {
		t.Fatal("Lock without Start did not fail")
	}
}

// fatalRecorder records a Fatal instead of failing the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatal(args ...any) {
	f.failed = true
	runtime.Goexit()
}

// TestStartAfterForeignConnection: code that ran before Start left
// godbus's shared connection on another bus; Start replaces it, so
// go-keyring reaches the test's Secret Service.
func TestStartAfterForeignConnection(t *testing.T) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command("dbus-daemon", "--session", "--nofork", "--print-address=1")
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", strings.TrimSpace(addr))
	foreign, err := dbus.SessionBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { foreign.Close() })

	t.Run("start", func(t *testing.T) {
		Start(t)
		if foreign.Connected() {
			t.Error("the foreign shared connection is still open")
		}
		if err := keyring.Set("keyringtest", "acct", "v"); err != nil {
			t.Fatal(err)
		}
		if v, err := keyring.Get("keyringtest", "acct"); err != nil || v != "v" {
			t.Fatalf("Get = %q, %v", v, err)
		}
	})
}
