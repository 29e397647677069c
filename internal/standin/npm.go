package standin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/toolbin"
)

// NpmHint says how to install npm and verdaccio.
const NpmHint = "install the Debian packages npm and nodejs, then run scripts/npm-tools.sh (scripts/test.sh does both)"

// verdaccioStart bounds verdaccio's start-up: the wait for /-/ping.
const verdaccioStart = 60 * time.Second

// Npm is a verdaccio registry started by NpmRegistry.
type Npm struct {
	URL     string // "http://127.0.0.1:PORT/", for --registry
	Host    string // "127.0.0.1:PORT"
	User    string // the user that publishes
	Token   string // its token, which Publish uses
	Storage string // verdaccio's storage directory
	Log     string // verdaccio's log file

	dir string
}

// NpmRegistry starts verdaccio (from scripts/npm-tools.sh) for t, offline
// (no uplinks) with its storage in t.TempDir(), on 127.0.0.1 and plain
// HTTP; creates a user through the registry's API; and publishes pkgs
// with the real npm. Everyone may install; publishing needs the token.
// The process is stopped at t's cleanup.
func NpmRegistry(t testing.TB, pkgs ...NpmPackage) *Npm {
	t.Helper()
	Need(t, "npm", NpmHint)
	Need(t, "node", NpmHint)
	bin := VerdaccioBinary()
	if bin == "" {
		Missing(t, "verdaccio not installed: "+NpmHint)
	}
	n, err := startVerdaccio(t, bin)
	if err != nil {
		t.Fatalf("standin: verdaccio: %v", err)
	}
	if err := n.addUser(); err != nil {
		t.Fatalf("standin: verdaccio: %v", err)
	}
	for _, p := range pkgs {
		n.Publish(t, p)
	}
	return n
}

// VerdaccioBinary returns the verdaccio to run: $COILY_VERDACCIO, else
// <module root>/bin/npm-tools/node_modules/.bin/verdaccio if it exists,
// else verdaccio on PATH, else "".
func VerdaccioBinary() string {
	if p := toolbin.Find("COILY_VERDACCIO", "npm-tools", "node_modules", ".bin", "verdaccio"); p != "" {
		return p
	}
	if p, err := exec.LookPath("verdaccio"); err == nil {
		return p
	}
	return ""
}

// Env returns the environment for an npm client that installs from the
// registry: its URL, a user config holding only that, a fresh cache, and
// no audit, fund or update checks (they would contact npmjs.org).
func (n *Npm) Env(t testing.TB) []string {
	t.Helper()
	rc := npmrc(t, "registry="+n.URL+"\n")
	return []string{
		"npm_config_registry=" + n.URL,
		"npm_config_userconfig=" + rc,
		"npm_config_globalconfig=" + npmrc(t, ""),
		"npm_config_cache=" + t.TempDir(),
		"npm_config_audit=false",
		"npm_config_fund=false",
		"npm_config_update_notifier=false",
		"npm_config_loglevel=error",
	}
}

// Publish publishes p to the registry with `npm publish` and the token.
func (n *Npm) Publish(t testing.TB, p NpmPackage) {
	t.Helper()
	dir, err := p.write(t.TempDir())
	if err != nil {
		t.Fatalf("standin: %v", err)
	}
	rc := npmrc(t, fmt.Sprintf("registry=%s\n//%s/:_authToken=%s\n", n.URL, n.Host, n.Token))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "publish", "--registry", n.URL)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"npm_config_userconfig=" + rc, "npm_config_globalconfig=" + npmrc(t, ""),
		"npm_config_cache=" + t.TempDir(), "npm_config_update_notifier=false",
		"npm_config_audit=false", "npm_config_fund=false", "npm_config_loglevel=error",
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("standin: npm publish %s@%s: %v\n%s", p.Name, p.Version, err, redact(string(out), n.Token))
	}
}

// npmrc writes an npm configuration file into t.TempDir().
func npmrc(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "npmrc")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatalf("standin: %v", err)
	}
	return p
}

// startVerdaccio starts verdaccio on a free loopback port, retrying with
// another port if the chosen one was taken meanwhile.
func startVerdaccio(t testing.TB, bin string) (*Npm, error) {
	dir := t.TempDir()
	n := &Npm{Storage: filepath.Join(dir, "storage"), Log: filepath.Join(dir, "verdaccio.log"), dir: dir}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(verdaccioConfig(dir)), 0o600); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var ports []int
		if ports, err = toolbin.FreePorts(1); err != nil {
			return nil, err
		}
		n.Host = "127.0.0.1:" + strconv.Itoa(ports[0])
		n.URL = "http://" + n.Host + "/"
		if err = n.run(t, bin, config); err == nil || !errors.Is(err, errPortTaken) {
			return n, err
		}
	}
	return nil, err
}

var errPortTaken = errors.New("port taken")

// run starts verdaccio on n.Host and waits until it answers /-/ping.
func (n *Npm) run(t testing.TB, bin, config string) error {
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", config, "--listen", n.Host)
	cmd.Dir = n.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + n.dir, "NODE_ENV=production"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stop(cmd, exited) })

	ctx, cancel := context.WithTimeout(context.Background(), verdaccioStart)
	defer cancel()
	if err := waitPing(ctx, n.URL+"-/ping", exited); err != nil {
		log := n.logTail()
		if strings.Contains(log, "EADDRINUSE") {
			return fmt.Errorf("%s: %w", n.Host, errPortTaken)
		}
		return fmt.Errorf("%w; log:\n%s", err, log)
	}
	return nil
}

// waitPing polls url until it answers 200, the process exits or ctx ends.
func waitPing(ctx context.Context, url string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("verdaccio exited before answering /-/ping")
		case <-ctx.Done():
			return fmt.Errorf("no answer from %s: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends verdaccio's process group: SIGTERM, then SIGKILL after 5 s.
func stop(cmd *exec.Cmd, exited <-chan struct{}) {
	select {
	case <-exited:
		return // reaped: its pid may belong to another process by now
	default:
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
}

// addUser creates the publishing user through the registry's API (what
// `npm adduser` does) and keeps its token.
func (n *Npm) addUser() error {
	n.User = "standin"
	body, err := json.Marshal(map[string]any{
		"_id": "org.couchdb.user:" + n.User, "name": n.User, "password": randomHex(16),
		"type": "user", "roles": []string{}, "email": "standin@example.invalid",
	})
	if err != nil {
		return fmt.Errorf("adduser body: %w", err)
	}
	req, err := http.NewRequest(http.MethodPut, n.URL+"-/user/org.couchdb.user:"+n.User, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("adduser: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("adduser: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return fmt.Errorf("adduser: status %d: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusCreated || out.Token == "" {
		return fmt.Errorf("adduser: status %d: %s", resp.StatusCode, out.Error)
	}
	n.Token = out.Token
	return nil
}

func (n *Npm) logTail() string {
	b, _ := os.ReadFile(n.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return redact(string(b), n.Token)
}

// verdaccioConfig is an offline configuration: no uplinks, storage and
// users under dir, anyone may read, only users may publish.
func verdaccioConfig(dir string) string {
	return fmt.Sprintf(`storage: %q
plugins: %q
auth:
  htpasswd:
    file: %q
    max_users: 10
uplinks: {}
packages:
  '**':
    access: $all
    publish: $authenticated
    unpublish: $authenticated
web:
  enable: false
publish:
  allow_offline: true
log: { type: stdout, format: json, level: info }
`, filepath.Join(dir, "storage"), filepath.Join(dir, "plugins"), filepath.Join(dir, "htpasswd"))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact replaces secret in s.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[token]")
}
