package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testlog"
)

// TestServeNotifyConsoleLinks runs `coily serve --tailnet` with an ntfy
// sink, without and with --web, and locks it out: a server that serves no
// console sends the command that unlocks it and no button; one that
// serves it links the console it logged.
func TestServeNotifyConsoleLinks(t *testing.T) {
	net, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	base, err := os.ReadFile(examplePolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, web := range []bool{false, true} {
		name := map[bool]string{false: "no console", true: "web"}[web]
		t.Run(name, func(t *testing.T) {
			ntfy := standin.NtfyServer(t, "")
			sub := standin.Subscribe(t, ntfy.URL, "coily", "")
			dir := shortDir(t)
			pol := filepath.Join(dir, "policy.yaml")
			block := "\nnotify:\n  events: [lockout]\n  ntfy: {url: \"" + ntfy.URL + "\", topic: coily}\n"
			if err := os.WriteFile(pol, append(append([]byte{}, base...), block...), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"serve", "--tailnet", "--hostname", "coily", "--control-url", net.ControlURL,
				"--state-dir", dir, "--policy", pol}
			if web {
				args = append(args, "--web", "--web-http")
			}
			var log testlog.Buffer
			srv := exec.Command(coilyBin, args...)
			srv.Env, srv.Stdout, srv.Stderr = append(os.Environ(), devnet.OfflineEnv()...), &log, &log
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() })
			p := &serveProc{socket: filepath.Join(dir, "coily.sock")}
			deadline := time.Now().Add(60 * time.Second)
			for p.run(t, "status").code != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("serve --tailnet did not come up:\n%s", log.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if r := p.run(t, "lockout", "--reason", "e2e"); r.code != 0 {
				t.Fatalf("lockout: %+v", r)
			}
			m := sub.Next(t, 15*time.Second)
			if !web {
				if m.Click != "" || len(m.Actions) != 0 || !strings.HasSuffix(m.Message, "\nUnlock: coily unlock") {
					t.Errorf("without a console: %+v", m)
				}
				return
			}
			logged := regexp.MustCompile(`serving the web console.* url=(\S+)`).FindStringSubmatch(log.String())
			if logged == nil {
				t.Fatalf("no console URL in the log:\n%s", log.String())
			}
			url := strings.TrimSuffix(logged[1], "/") + "/"
			if m.Click != url || len(m.Actions) != 1 || m.Actions[0].URL != url || strings.Contains(m.Message, "coily unlock") {
				t.Errorf("with the console at %s: %+v", url, m)
			}
		})
	}
}
