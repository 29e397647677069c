//go:build linux

package standin

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/procs"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/toolbin"
)

// SSHHint says how to install the ssh tools.
const SSHHint = "install the Debian packages openssh-server and openssh-client"

// NeedSSH skips t (fails it under CI=true) unless sshd, ssh and
// ssh-keygen are installed and sshd can log in as the test's user: as
// root, or as a user whose login shell runs commands (sshd runs every
// command through it, and only root's sshd may log in as another user).
// It returns that user's name.
func NeedSSH(t testing.TB) string {
	t.Helper()
	Need(t, "/usr/sbin/sshd", SSHHint)
	Need(t, "ssh", SSHHint)
	Need(t, "ssh-keygen", SSHHint)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 && !hasLoginShell(me.Username) {
		Missing(t, "root, or a login shell for "+me.Username+" (sshd runs commands through it)")
	}
	return me.Username
}

// hasLoginShell reports whether name's login shell (from /etc/passwd)
// runs commands.
func hasLoginShell(name string) bool {
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name {
			base := filepath.Base(f[6])
			return f[6] != "" && base != "nologin" && base != "false"
		}
	}
	return false
}

// SSHKeygen makes an unencrypted Ed25519 key pair at path and path.pub.
func SSHKeygen(t testing.TB, path string) {
	t.Helper()
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
}

// SSHD runs a real sshd on 127.0.0.1 in the foreground until the test
// ends, with dir/host_key as its host key and dir/authorized_keys as the
// keys it accepts (public keys only: no password, no keyboard), and
// returns its port. At the end it checks that no process of the
// connections it served outlived them.
func SSHD(t testing.TB, dir string) int {
	t.Helper()
	if os.Geteuid() == 0 {
		// root's sshd checks its privilege separation directory.
		if _, err := os.Stat("/run/sshd"); os.IsNotExist(err) {
			if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove("/run/sshd") })
		}
	}
	for attempt := 0; ; attempt++ {
		port := sshdPort(t)
		if sshdUp(t, dir, port) {
			return port
		}
		if attempt == 2 {
			t.Fatal("sshd did not start")
		}
	}
}

// sshdUp starts sshd on port and waits for its banner; false when it
// exited first (the port was taken meanwhile).
func sshdUp(t testing.TB, dir string, port int) bool {
	t.Helper()
	conf := filepath.Join(dir, fmt.Sprintf("sshd_config.%d", port))
	config := fmt.Sprintf(`ListenAddress 127.0.0.1
Port %d
HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
LogLevel DEBUG1
`, port, filepath.Join(dir, "host_key"), filepath.Join(dir, fmt.Sprintf("sshd.%d.pid", port)), filepath.Join(dir, "authorized_keys"))
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	log := new(testlog.Buffer)
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", conf)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		waitSessions(t, log.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if sshBanner(port) {
			t.Cleanup(stop)
			return true
		}
		select {
		case <-exited:
			t.Logf("sshd on port %d exited: %s", port, log)
			return false
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("sshd did not answer on port %d: %s", port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sshBanner reports whether an ssh server answers on 127.0.0.1:port.
func sshBanner(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

// waitSessions waits until no process is left alive in the sessions of
// the connections sshd logged ("Forked child N": each one calls setsid,
// and its privilege-separated children stay in its session, even when
// orphaned); any left at the deadline is killed, and the test fails.
func waitSessions(t testing.TB, log string) {
	t.Helper()
	sids := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		if _, pid, ok := strings.Cut(line, "Forked child "); ok {
			sids[strings.TrimSuffix(strings.TrimSpace(pid), ".")] = true
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := sessionProcs(sids)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("sshd's connection processes %v outlived their clients", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionProcs lists the live (not zombie) processes whose session is
// one of sids.
func sessionProcs(sids map[string]bool) []int {
	return procs.Live(func(p procs.Proc) bool { return sids[p.Session] })
}

func sshdPort(t testing.TB) int {
	t.Helper()
	ports, err := toolbin.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}
