// Package vaulttest starts a real Vault dev server for tests.
//
// The server is bin/vaultdev (built by scripts/vaultdev.sh from the nested
// module integration/vault: the real Vault core serving its real HTTP API
// on loopback, with KV v2 at secret/ and AppRole available), started once
// per Start and killed at the test's cleanup. COILY_VAULTDEV names another
// vaultdev binary. Without one, a server given by VAULT_ADDR and
// VAULT_TOKEN (a `vault server -dev` or `bao server -dev`) is used instead;
// without either the test is skipped, or fails under CI=true.
package vaulttest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/toolbin"
)

// Hint is what to do when no Vault server is available.
const Hint = "vaultdev not built: run scripts/vaultdev.sh"

// startTimeout bounds vaultdev's start (the JSON line).
const startTimeout = 60 * time.Second

// Server is a running Vault dev server.
type Server struct {
	Addr      string // "http://127.0.0.1:PORT"
	RootToken string
}

// Start starts a vaultdev server for t (or uses VAULT_ADDR/VAULT_TOKEN's
// server) and stops it at t's cleanup.
func Start(t testing.TB) *Server { t.Helper(); return StartEnv(t) }

// StartEnv is Start with env ("NAME=value") added to vaultdev's
// environment: SSL_CERT_FILE naming a stand-in's CA, for a secrets engine
// that calls it. A server given by VAULT_ADDR and VAULT_TOKEN does not get
// env.
func StartEnv(t testing.TB, env ...string) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if s := fromEnv(); s != nil {
			return s
		}
		if os.Getenv("CI") == "true" {
			t.Fatal(Hint)
		}
		t.Skip(Hint)
	}
	s, err := start(t, bin, env)
	if err != nil {
		t.Fatalf("vaultdev: %v", err)
	}
	return s
}

// fromEnv returns the server VAULT_ADDR and VAULT_TOKEN name, if both
// are set.
func fromEnv() *Server {
	addr, token := os.Getenv("VAULT_ADDR"), os.Getenv("VAULT_TOKEN")
	if addr == "" || token == "" {
		return nil
	}
	return &Server{Addr: addr, RootToken: token}
}

// Binary returns the vaultdev binary to run: $COILY_VAULTDEV, else
// <module root>/bin/vaultdev if it exists, else "".
func Binary() string { return toolbin.Find("COILY_VAULTDEV", "vaultdev") }

func start(t testing.TB, bin string, env []string) (*Server, error) {
	cmd := exec.Command(bin)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	toolbin.DieWithTest(cmd)
	stdin, err := cmd.StdinPipe() // vaultdev exits when it reaches EOF
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := testlog.NewTail(8 << 10)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		_ = cmd.Wait()
	})

	type result struct {
		s   *Server
		err error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			ch <- result{err: fmt.Errorf("reading its address: %v", err)}
			return
		}
		var s struct {
			Addr      string `json:"addr"`
			RootToken string `json:"root_token"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil || s.Addr == "" || s.RootToken == "" {
			ch <- result{err: fmt.Errorf("unexpected first line %q", strings.TrimSpace(line))}
			return
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		ch <- result{s: &Server{Addr: s.Addr, RootToken: s.RootToken}}
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("%s: %v; stderr: %s", bin, r.err, stderr.String())
		}
		return r.s, nil
	case <-timer.C:
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start within %s; stderr: %s", bin, startTimeout, stderr.String())
	}
}

// Client returns an API client for s authenticated with token ("" for
// none). It ignores the VAULT_* environment.
func (s *Server) Client(t testing.TB, token string) *api.Client {
	t.Helper()
	conf := &api.Config{Address: s.Addr, MaxRetries: 0, Timeout: 30 * time.Second}
	c, err := api.NewClient(conf)
	if err != nil {
		t.Fatalf("vault client: %v", err)
	}
	c.ClearNamespace()
	c.SetToken(token)
	if token == "" {
		c.ClearToken()
	}
	return c
}

// LeaseAlive reports whether s still holds lease id (a lookup as root);
// it fails t when s does not answer.
func (s *Server) LeaseAlive(t testing.TB, id string) bool {
	t.Helper()
	_, err := s.Client(t, s.RootToken).Sys().Lookup(id)
	var re *api.ResponseError
	if errors.As(err, &re) && re.StatusCode == 400 {
		return false
	}
	if err != nil {
		t.Fatalf("lease lookup: %v", err)
	}
	return true
}

// AWS configures the AWS secrets engine of a vaultdev started with
// StartAWS: mounted at aws/, its root keys rootKey and rootSecret, its STS
// and IAM endpoints stsURL (a stand-in). It fails t when the engine is
// missing (a vaultdev built before it had one: rerun scripts/vaultdev.sh).
func (s *Server) AWS(t testing.TB, stsURL, rootKey, rootSecret string) {
	t.Helper()
	c := s.Client(t, s.RootToken)
	if err := c.Sys().Mount("aws", &api.MountInput{Type: "aws"}); err != nil {
		t.Fatalf("mounting the AWS secrets engine (%s predates it? run scripts/vaultdev.sh): %v", Binary(), err)
	}
	if _, err := c.Logical().Write("aws/config/root", map[string]any{
		"access_key": rootKey, "secret_key": rootSecret, "region": "us-east-1",
		"sts_endpoint": stsURL, "iam_endpoint": stsURL, "max_retries": 0,
	}); err != nil {
		t.Fatalf("aws/config/root: %v", err)
	}
}

// StartAWS starts a vaultdev server whose AWS secrets engine trusts the
// CA in caFile (the STS stand-in's) and nothing else. It needs the
// vaultdev binary: a server given by VAULT_ADDR could not be told to trust
// the stand-in, so without one the test is skipped (fails under CI=true).
func StartAWS(t testing.TB, caFile string) *Server {
	t.Helper()
	if Binary() == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(Hint)
		}
		t.Skip(Hint + " (the AWS engine tests need vaultdev, to trust the STS stand-in)")
	}
	// The AWS SDK in Vault takes AWS_CA_BUNDLE, when set, over the
	// system's roots (which SSL_CERT_FILE replaces).
	return StartEnv(t, "SSL_CERT_FILE="+caFile, "AWS_CA_BUNDLE="+caFile)
}
