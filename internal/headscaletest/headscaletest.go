// Package headscaletest starts a real headscale control server for tests.
//
// The server is bin/headscale (built by scripts/headscale.sh from
// headscale's Go module at Version), started once per Start on loopback
// with a configuration of the test's own: HTTPS on 127.0.0.1 with a
// self-signed certificate (its embedded DERP relay is served over TLS
// only, on the same listener), the embedded DERP and STUN as the only
// relay, no IPv6 prefix when the host has no IPv6, sqlite in a temp dir,
// and the test's tailnet policy (HuJSON: tag owners, grants with app
// capabilities). Nodes trust the certificate through SSL_CERT_FILE (Env).
// The process is killed at the test's cleanup (and by the kernel when the
// test process dies, on Linux). COILY_HEADSCALE names another binary.
// Without one the test is skipped, or fails under CI=true.
package headscaletest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/toolbin"
)

// Version is the headscale release scripts/headscale.sh builds: v0.29 is
// the first with grants carrying app capabilities.
const Version = "v0.29.3"

// Hint is what to do when no headscale binary is available.
const Hint = "headscale not built: run scripts/headscale.sh"

// startTimeout bounds headscale's start (until /health answers).
const startTimeout = 60 * time.Second

// Options configure a headscale server.
type Options struct {
	// Policy is the tailnet policy (HuJSON); empty: none, so every node
	// may reach every other and no capability is granted.
	Policy string
	// LowLatency shortens headscale's batching of node changes
	// (LowLatencyTuning): a restarted node's new keys reach its peers in
	// tens of milliseconds instead of about a second.
	LowLatency bool
}

// LowLatencyTuning is the headscale configuration that LowLatency adds:
// node store writes and change notifications are batched for 800 ms and
// 500 ms by default, which is most of what a command that starts a
// tailnet node waits for.
const LowLatencyTuning = `tuning:
  batch_change_delay: 50ms
  node_store_batch_timeout: 20ms
`

// Server is a running headscale.
type Server struct {
	// URL is the control URL nodes are given: https://127.0.0.1:PORT.
	URL string
	// CAFile is the PEM of the server's self-signed certificate, the one
	// root nodes must trust (SSL_CERT_FILE) to reach control and DERP.
	CAFile string

	bin, config, policy string
	cmd                 *exec.Cmd
	log                 *testlog.Tail
	exited              chan struct{}
}

// Start starts headscale for t and stops it at t's cleanup.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(Hint)
		}
		t.Skip(Hint)
	}
	dir, err := os.MkdirTemp("", "hs-") // short: the CLI's unix socket lives here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var last error
	for range 3 { // free ports are picked before headscale binds them: retry on a lost race
		s, err := start(t, bin, dir, o)
		if err == nil {
			return s
		}
		last = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("headscale: %v", last)
	return nil
}

// Binary returns the headscale binary to run: $COILY_HEADSCALE, else
// <module root>/bin/headscale if it exists, else "".
func Binary() string { return toolbin.Find("COILY_HEADSCALE", "headscale") }

func start(t testing.TB, bin, dir string, o Options) (*Server, error) {
	ports, err := toolbin.FreePorts(3)
	if err != nil {
		return nil, err
	}
	stun, err := freeUDPPort()
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := writeCert(certFile, keyFile); err != nil {
		return nil, err
	}
	s := &Server{URL: "https://127.0.0.1:" + strconv.Itoa(ports[0]), CAFile: certFile, bin: bin,
		config: filepath.Join(dir, "config.yaml"), log: testlog.NewTail(64 << 10), exited: make(chan struct{})}
	if o.Policy != "" {
		s.policy = filepath.Join(dir, "policy.hujson")
		if err := os.WriteFile(s.policy, []byte(o.Policy), 0o600); err != nil {
			return nil, err
		}
	}
	cfg := config{Dir: dir, Listen: ports[0], GRPC: ports[1], Metrics: ports[2], STUN: stun,
		Cert: certFile, Key: keyFile, Policy: s.policy, IPv6: hostHasIPv6(), LowLatency: o.LowLatency}
	if err := os.WriteFile(s.config, []byte(cfg.yaml()), 0o600); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "serve", "-c", s.config)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.Env = append(os.Environ(), "HEADSCALE_LOG_LEVEL=info")
	toolbin.DieWithTest(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitHealthy(); err != nil {
		s.stop()
		<-s.exited
		return nil, fmt.Errorf("%w; log:\n%s", err, s.log)
	}
	t.Cleanup(func() {
		s.stop()
		<-s.exited
		if t.Failed() {
			t.Logf("headscale log (tail):\n%s", s.log)
		}
	})
	return s, nil
}

func (s *Server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
	}
}

// waitHealthy polls /health over TLS, trusting only the server's
// certificate, until it answers 200 or the process exits.
func (s *Server) waitHealthy() error {
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.Get(s.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("headscale exited during start")
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("headscale did not answer /health within %s: %v", startTimeout, err)
		}
	}
}

// Env returns the environment entries a node (a process started by the
// test) needs to join this server: the certificate to trust.
func (s *Server) Env() []string { return []string{"SSL_CERT_FILE=" + s.CAFile} }

// Log returns the tail of headscale's log.
func (s *Server) Log() string { return s.log.String() }

// CLI runs a headscale command against the server (over its local socket)
// with JSON output and returns its standard output.
func (s *Server) CLI(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"-c", s.config, "-o", "json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("headscale %s: %w: %s%s", strings.Join(args, " "), err, stderr.String(), out)
	}
	return out, nil
}

// User is a headscale user.
type User struct {
	ID   uint64 `json:"id"`
	Name string `json:"name"`
}

// CreateUser creates a user called name (a login without a domain, as
// users created by the CLI have).
func (s *Server) CreateUser(t testing.TB, name string) User {
	t.Helper()
	out, err := s.CLI("users", "create", name)
	if err != nil {
		t.Fatal(err)
	}
	var u User
	if err := json.Unmarshal(out, &u); err != nil || u.ID == 0 {
		t.Fatalf("headscale users create: %v: %s", err, out)
	}
	return u
}

// Key describes a pre-auth key.
type Key struct {
	User      uint64   // the owner of the nodes it registers (0: none, for tagged keys)
	Tags      []string // tags the nodes get (they are then owned by the tags)
	Reusable  bool
	Ephemeral bool // nodes are deleted once they have been offline a while
}

// AuthKey creates a pre-auth key valid for an hour.
func (s *Server) AuthKey(t testing.TB, k Key) string {
	t.Helper()
	args := []string{"preauthkeys", "create", "--expiration", "1h"}
	if k.User != 0 {
		args = append(args, "--user", strconv.FormatUint(k.User, 10))
	}
	if len(k.Tags) > 0 {
		args = append(args, "--tags", strings.Join(k.Tags, ","))
	}
	if k.Reusable {
		args = append(args, "--reusable")
	}
	if k.Ephemeral {
		args = append(args, "--ephemeral")
	}
	out, err := s.CLI(args...)
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &key); err != nil || key.Key == "" {
		t.Fatalf("headscale preauthkeys create: %v: %s", err, out)
	}
	return key.Key
}

// Node is a node as headscale lists it.
type Node struct {
	ID          uint64   `json:"id"`
	Name        string   `json:"name"`       // the name it registered with
	GivenName   string   `json:"given_name"` // its MagicDNS name
	IPAddresses []string `json:"ip_addresses"`
	Tags        []string `json:"tags"`
	Online      bool     `json:"online"`
	User        *User    `json:"user"`
}

// Nodes lists the registered nodes.
func (s *Server) Nodes(t testing.TB) []Node {
	t.Helper()
	out, err := s.CLI("nodes", "list")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []Node
	if err := json.Unmarshal(out, &nodes); err != nil {
		t.Fatalf("headscale nodes list: %v: %s", err, out)
	}
	return nodes
}

// NodeByName returns the registered node called name, if there is one.
func (s *Server) NodeByName(t testing.TB, name string) (Node, bool) {
	t.Helper()
	for _, n := range s.Nodes(t) {
		if n.Name == name || n.GivenName == name {
			return n, true
		}
	}
	return Node{}, false
}

// DeleteNode deletes a node: its key stops working and peers drop it.
func (s *Server) DeleteNode(t testing.TB, id uint64) {
	t.Helper()
	if _, err := s.CLI("nodes", "delete", "--identifier", strconv.FormatUint(id, 10), "--force"); err != nil {
		t.Fatal(err)
	}
}

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// hostHasIPv6 reports whether IPv6 works here at all (a loopback-only
// network namespace, or a host with IPv6 disabled, has none).
func hostHasIPv6() bool {
	c, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		return false
	}
	c.Close()
	return true
}
