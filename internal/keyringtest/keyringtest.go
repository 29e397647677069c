// Package keyringtest runs a private freedesktop Secret Service
// (gnome-keyring on its own D-Bus session bus) for tests of code that uses
// the OS keychain through github.com/zalando/go-keyring, so that
// `go test` needs no wrapper script and never touches the user's keyring.
//
// It needs dbus-daemon and gnome-keyring-daemon on PATH (Debian: apt-get
// install -y --no-install-recommends gnome-keyring dbus); without them the
// test is skipped, or fails when CI=true. On other systems than Linux it
// skips: there go-keyring uses the user's own keychain.
//
// # One Secret Service per test, not in parallel
//
// Start gives the calling test a fresh service and points
// DBUS_SESSION_BUS_ADDRESS at it with t.Setenv, so a test that calls it
// cannot be parallel (t.Setenv panics). godbus keeps one session-bus
// connection per process (dbus.SessionBus, which go-keyring uses) and
// dials a new one only when it is closed; so Start must run before the
// test's first keyring call. Start closes a shared connection left on
// another bus, and the test's cleanup closes it before stopping the
// daemons, so the next test's Start is picked up; a keyring call still
// blocked then fails (go-keyring may panic in it: a nil D-Bus signal).
//
// The bus activates nothing (no prompter, no second keyring daemon), and
// every connection's first message to gnome-keyring is a Ping: its client
// registration races a client's first call and, when it loses, the
// daemon aborts (gnome-keyring issues #183, #190, #194; seen here about
// once in 200 starts before the Ping).
//
// Every process Start starts is killed and reaped by the test's cleanup.
// As a backstop for a test binary that dies without running cleanups (a
// test timeout, a crash), they are started with Pdeathsig SIGKILL from an
// OS thread that lives as long as they do.
package keyringtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"coily.dev/coily/internal/testlog"
)

// StartTimeout bounds starting the bus and the Secret Service.
const StartTimeout = 10 * time.Second

// callTimeout bounds one D-Bus call of Lock, Unlock and the start checks.
const callTimeout = 5 * time.Second

const (
	secretService     = "org.freedesktop.secrets"
	secretServicePath = "/org/freedesktop/secrets"
	serviceIface      = "org.freedesktop.Secret.Service"
	collectionLocked  = "org.freedesktop.Secret.Collection.Locked"
	defaultAlias      = "/org/freedesktop/secrets/aliases/default"
	// systemPrompter is where gnome-keyring asks gcr-prompter to show a
	// prompt (the test bus activates nothing, so normally no one is there
	// and an unlock fails at once).
	systemPrompter = "org.gnome.keyring.SystemPrompter"

	aptHint = "apt-get install -y --no-install-recommends gnome-keyring dbus"
)

var (
	mu     sync.Mutex
	active *service
)

// service is a running bus (and Secret Service).
type service struct {
	dir      string
	secrets  bool // a Secret Service runs on the bus
	addr     string
	password string
	conn     *dbus.Conn // private connection of this package
	spawn    *spawner
	procs    []*proc
	stopOnce sync.Once
}

// proc is a started child.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *testlog.Head
	exited chan struct{} // closed once reaped
}

// Start starts a session bus with gnome-keyring's Secret Service on it,
// its login collection unlocked, for the calling test (and its subtests)
// and points DBUS_SESSION_BUS_ADDRESS at it. Calling it again while that
// service runs does nothing. See the package documentation.
func Start(t testing.TB) {
	t.Helper()
	start(t, true)
}

// StartBus is Start without the Secret Service: a session bus on which
// no one owns org.freedesktop.secrets (and nothing is activated).
func StartBus(t testing.TB) {
	t.Helper()
	start(t, false)
}

func start(t testing.TB, secrets bool) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("keyringtest: no private Secret Service on %s (go-keyring would use the user's keychain)", runtime.GOOS)
	}
	mu.Lock()
	defer mu.Unlock()
	if active != nil {
		if active.secrets != secrets {
			t.Fatal("keyringtest: Start and StartBus in one test")
		}
		return
	}
	bins := []string{"dbus-daemon"}
	if secrets {
		bins = append(bins, "gnome-keyring-daemon")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			msg := fmt.Sprintf("keyringtest: %s is not on PATH: %s", b, aptHint)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	begin := time.Now()
	deadline := begin.Add(StartTimeout)
	// Not t.TempDir: the bus socket's path must fit in sun_path (108
	// bytes), and a long test name would not.
	dir, err := os.MkdirTemp("", "keyringtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &service{dir: dir, secrets: secrets, spawn: newSpawner()}
	// Cleanups run last-registered first: stop (kill and reap) runs after
	// the environment is restored, closeShared before it.
	t.Cleanup(s.stop)
	if err := s.startBus(deadline); err != nil {
		t.Fatalf("keyringtest: %v", err)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", s.addr)
	t.Cleanup(s.closeShared)
	if secrets {
		if err := s.startSecrets(deadline); err != nil {
			t.Fatalf("keyringtest: %v", err)
		}
	}
	if err := s.checkShared(); err != nil {
		t.Fatalf("keyringtest: %v", err)
	}
	active = s
	t.Logf("keyringtest: %s ready in %v", map[bool]string{true: "Secret Service", false: "session bus"}[secrets], time.Since(begin).Round(time.Millisecond))
}

// startBus starts dbus-daemon on a socket in s.dir with a configuration
// that activates nothing, and connects to it.
func (s *service) startBus(deadline time.Time) error {
	var conf bytes.Buffer
	conf.WriteString(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`)
	if err := xml.EscapeText(&conf, []byte(filepath.Join(s.dir, "bus"))); err != nil {
		return err
	}
	conf.WriteString(`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`)
	confPath := filepath.Join(s.dir, "bus.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.Command("dbus-daemon", "--config-file="+confPath, "--nofork", "--print-address=3")
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p, err := s.start("dbus-daemon", cmd)
	pw.Close()
	if err != nil {
		return err
	}
	if err := pr.SetReadDeadline(deadline); err != nil {
		return err
	}
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		return fmt.Errorf("dbus-daemon printed no address: %v%s", err, p.output())
	}
	s.addr = strings.TrimSpace(line)
	if s.conn, err = dbus.Connect(s.addr); err != nil {
		return fmt.Errorf("connect to the test bus: %v%s", err, p.output())
	}
	return nil
}

// startSecrets starts gnome-keyring-daemon with a fresh home and a
// random login password, and waits until it owns org.freedesktop.secrets
// and its default collection is unlocked.
func (s *service) startSecrets(deadline time.Time) error {
	home := filepath.Join(s.dir, "home")
	run := filepath.Join(s.dir, "run")
	for _, d := range []string{home, run} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	var pw [16]byte
	rand.Read(pw[:])
	s.password = hex.EncodeToString(pw[:])

	// Watch for the name before starting the daemon, so its arrival
	// cannot be missed.
	owned := make(chan *dbus.Signal, 8)
	s.conn.Signal(owned)
	defer s.conn.RemoveSignal(owned)
	match := []dbus.MatchOption{
		dbus.WithMatchSender("org.freedesktop.DBus"),
		dbus.WithMatchInterface("org.freedesktop.DBus"),
		dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, secretService),
	}
	if err := s.conn.AddMatchSignal(match...); err != nil {
		return fmt.Errorf("watch the bus: %v", err)
	}
	defer s.conn.RemoveMatchSignal(match...)

	cmd := exec.Command("gnome-keyring-daemon", "--unlock", "--components=secrets", "--foreground",
		"--control-directory="+filepath.Join(run, "keyring"))
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_RUNTIME_DIR=" + run,
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"DBUS_SESSION_BUS_ADDRESS=" + s.addr,
	}
	cmd.Stdin = strings.NewReader(s.password) // --unlock reads it to EOF
	p, err := s.start("gnome-keyring-daemon", cmd)
	if err != nil {
		return err
	}

	var has bool
	if err := s.call(s.conn.BusObject(), "org.freedesktop.DBus.NameHasOwner", secretService).Store(&has); err != nil {
		return fmt.Errorf("NameHasOwner: %v", err)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for !has {
		select {
		case sig := <-owned:
			if sig != nil && len(sig.Body) == 3 && sig.Body[0] == secretService {
				has = sig.Body[2] != ""
			}
		case <-p.exited:
			return fmt.Errorf("gnome-keyring-daemon exited before owning %s: %v%s", secretService, p.cmd.ProcessState, p.output())
		case <-timer.C:
			return fmt.Errorf("no %s on the test bus after %v%s", secretService, StartTimeout, p.output())
		}
	}
	// gnome-keyring registers a client on its first message in an idle
	// callback that a method needing the client can overtake, and then
	// aborts (gnome-keyring issues #183, #190, #194): let a Ping, which
	// GDBus answers itself, be every connection's first message.
	if err := s.ping(s.conn); err != nil {
		return fmt.Errorf("ping %s: %v%s", secretService, err, p.output())
	}
	if locked, err := s.locked(); err != nil || locked {
		return fmt.Errorf("the default collection is not open and unlocked (locked %v, error %v)%s", locked, err, p.output())
	}
	return nil
}

// checkShared makes sure godbus's process-wide session-bus connection,
// the one go-keyring uses, is connected to this bus (closing one left
// connected to another bus by code that ran before Start), and with a
// Secret Service pings it on that connection too (see startSecrets).
func (s *service) checkShared() error {
	var want string
	if err := s.call(s.conn.BusObject(), "org.freedesktop.DBus.GetId").Store(&want); err != nil {
		return fmt.Errorf("bus id: %v", err)
	}
	for range 2 {
		shared, err := dbus.SessionBus()
		if err != nil {
			return fmt.Errorf("connect to the test bus: %v", err)
		}
		var id string
		if err := s.call(shared.BusObject(), "org.freedesktop.DBus.GetId").Store(&id); err == nil && id == want {
			if s.secrets {
				return s.ping(shared)
			}
			return nil
		}
		shared.Close() // a connection to another bus: the next SessionBus dials anew
	}
	return errors.New("dbus.SessionBus does not connect to the test bus")
}

func (s *service) ping(c *dbus.Conn) error {
	return s.call(c.Object(secretService, secretServicePath), "org.freedesktop.DBus.Peer.Ping").Err
}

// start starts cmd from the spawner's thread, with Pdeathsig, its output
// captured, and reaps it in the background.
func (s *service) start(name string, cmd *exec.Cmd) (*proc, error) {
	p := &proc{name: name, cmd: cmd, out: testlog.NewHead(64 << 10), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = sysProcAttr()
	if err := s.spawn.do(cmd.Start); err != nil {
		return nil, fmt.Errorf("start %s: %v", name, err)
	}
	s.procs = append(s.procs, p)
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// closeShared closes godbus's process-wide session-bus connection (the
// one go-keyring uses) while DBUS_SESSION_BUS_ADDRESS still names this
// bus and it still runs, so that the next dbus.SessionBus dials anew.
func (s *service) closeShared() {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") != s.addr {
		return
	}
	if c, err := dbus.SessionBus(); err == nil {
		c.Close()
	}
}

// stop kills and reaps every process, newest first.
func (s *service) stop() {
	s.stopOnce.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		for _, p := range slices.Backward(s.procs) {
			p.cmd.Process.Kill()
			<-p.exited
		}
		s.spawn.close()
		mu.Lock()
		if active == s {
			active = nil
		}
		mu.Unlock()
	})
}

func (s *service) call(obj dbus.BusObject, method string, args ...any) *dbus.Call {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return obj.CallWithContext(ctx, method, 0, args...)
}

func (s *service) locked() (bool, error) {
	var v dbus.Variant
	err := s.call(s.conn.Object(secretService, defaultAlias), "org.freedesktop.DBus.Properties.Get",
		"org.freedesktop.Secret.Collection", "Locked").Store(&v)
	if err != nil {
		return false, err
	}
	locked, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%s is %s, not a boolean", collectionLocked, v.Signature())
	}
	return locked, nil
}

// current returns the running service Start started, or fails t.
func current(t testing.TB) *service {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if active == nil || active.password == "" {
		t.Fatal("keyringtest: call Start first")
	}
	return active
}

// Lock locks the default (login) collection, as a screen lock or
// `secret-tool lock` would (org.freedesktop.Secret.Service.Lock).
func Lock(t testing.TB) {
	t.Helper()
	s := current(t)
	var locked []dbus.ObjectPath
	var prompt dbus.ObjectPath
	err := s.call(s.conn.Object(secretService, secretServicePath), serviceIface+".Lock",
		[]dbus.ObjectPath{defaultAlias}).Store(&locked, &prompt)
	if err != nil {
		t.Fatalf("keyringtest: Lock: %v", err)
	}
	if prompt != "/" {
		t.Fatalf("keyringtest: Lock wants a prompt (%s)", prompt)
	}
	if l, err := s.locked(); err != nil || !l {
		t.Fatalf("keyringtest: after Lock: locked %v, error %v", l, err)
	}
}

// Unlock unlocks the default (login) collection with its password,
// without a prompt (gnome-keyring's UnlockWithMasterPassword: the
// standard Unlock would need a prompter).
func Unlock(t testing.TB) {
	t.Helper()
	s := current(t)
	svc := s.conn.Object(secretService, secretServicePath)
	var coll dbus.ObjectPath
	if err := s.call(svc, serviceIface+".ReadAlias", "default").Store(&coll); err != nil {
		t.Fatalf("keyringtest: ReadAlias: %v", err)
	}
	var out dbus.Variant
	var session dbus.ObjectPath
	if err := s.call(svc, serviceIface+".OpenSession", "plain", dbus.MakeVariant("")).Store(&out, &session); err != nil {
		t.Fatalf("keyringtest: OpenSession: %v", err)
	}
	defer s.call(s.conn.Object(secretService, session), "org.freedesktop.Secret.Session.Close")
	secret := struct {
		Session     dbus.ObjectPath
		Parameters  []byte
		Value       []byte
		ContentType string
	}{session, []byte{}, []byte(s.password), "text/plain"}
	if err := s.call(svc, "org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface.UnlockWithMasterPassword", coll, secret).Err; err != nil {
		t.Fatalf("keyringtest: UnlockWithMasterPassword: %v", err)
	}
	if l, err := s.locked(); err != nil || l {
		t.Fatalf("keyringtest: after Unlock: locked %v, error %v", l, err)
	}
}

// StallPrompter makes unlock prompts hang, as a desktop prompt that no
// one answers does: it owns org.gnome.keyring.SystemPrompter on the test
// bus and never answers a call. gnome-keyring then gives up on the
// prompt after its D-Bus call timeout (25 s) and the unlock fails. The
// stall ends with the test.
func StallPrompter(t testing.TB) {
	t.Helper()
	s := current(t)
	release := make(chan struct{})
	h := stallHandler{release: release}
	c, err := dbus.Connect(s.addr, dbus.WithHandler(h))
	if err != nil {
		t.Fatalf("keyringtest: StallPrompter: %v", err)
	}
	t.Cleanup(func() {
		close(release)
		c.Close()
	})
	reply, err := c.RequestName(systemPrompter, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("keyringtest: StallPrompter: own %s: %v %v", systemPrompter, reply, err)
	}
}

// stallHandler answers no method call until release is closed (godbus
// runs each call in its own goroutine).
type stallHandler struct{ release chan struct{} }

func (h stallHandler) LookupObject(dbus.ObjectPath) (dbus.ServerObject, bool) { return h, true }
func (h stallHandler) LookupInterface(string) (dbus.Interface, bool)          { return h, true }
func (h stallHandler) LookupMethod(string) (dbus.Method, bool)                { return stallMethod(h), true }

type stallMethod stallHandler

func (m stallMethod) Call(...any) ([]any, error) {
	<-m.release
	return nil, errors.New("keyringtest: stalled prompter released")
}

// gcr's prompter methods take an object path first (BeginPrompting(o),
// PerformPrompt(o, ...)); godbus decodes that many arguments.
func (stallMethod) NumArguments() int     { return 1 }
func (stallMethod) ArgumentValue(int) any { return dbus.ObjectPath("/") }
func (stallMethod) NumReturns() int       { return 0 }
func (stallMethod) ReturnValue(int) any   { return nil }

// spawner starts processes from one locked OS thread that lives until
// close, so Pdeathsig (sent when the thread that started a child dies)
// fires when the test binary dies, not when Go retires a thread.
type spawner struct{ reqs chan func() }

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		// Return still locked: the thread exits with the goroutine.
		for f := range s.reqs {
			f()
		}
	}()
	return s
}

func (s *spawner) do(f func() error) error {
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- f() }
	return <-errc
}

func (s *spawner) close() { close(s.reqs) }

// output is the first 64 KiB of the child's output, for failure
// messages.
func (p *proc) output() string {
	out := p.out.String()
	if out == "" {
		return ""
	}
	return "\n" + p.name + " output:\n" + out
}
