// Command vaultdev is a Vault dev server for tests: the real Vault core,
// in memory, initialized and unsealed, serving its real HTTP API on a
// loopback port, like `vault server -dev`: KV version 2 at secret/, the
// AppRole auth method and the AWS secrets engine ("aws", whose
// aws/config/root takes sts_endpoint and iam_endpoint, so tests point it at
// a local stand-in) available to enable, and "leased-kv", Vault's own
// leased passthrough backend (a KV whose reads carry renewable leases of
// the secret's "ttl" field), which Vault's own tests use for lease
// renewal.
//
// Once serving it prints one JSON line to standard output,
//
//	{"addr":"http://127.0.0.1:PORT","root_token":"..."}
//
// and serves until SIGTERM or SIGINT, or until its standard input reaches
// EOF (so a test that dies takes it along). It logs to standard error:
// its own failures only, unless -v.
//
// It lives in the nested module coily.dev/coily/integration/vault so that
// the Vault server module (large, BUSL-licensed) stays out of coily's
// build; scripts/vaultdev.sh builds it into bin/vaultdev.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	kv "github.com/hashicorp/vault-plugin-secrets-kv"
	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/builtin/credential/approle"
	"github.com/hashicorp/vault/builtin/logical/aws"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/internalshared/configutil"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/vault"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	rootToken := flag.String("root-token", "", "root token id to create (like vault server -dev -dev-root-token-id); default: the core's root token")
	verbose := flag.Bool("v", false, "log at info level (default: warnings only)")
	flag.Parse()

	tb := &tb{name: "vaultdev"}
	if !*verbose && os.Getenv("VAULT_TEST_LOG_DIR") == "" {
		// The Vault test helpers log their storage backend at trace
		// level to stderr unless given a directory for it.
		_ = os.Setenv("VAULT_TEST_LOG_DIR", tb.TempDir())
	}
	code := run(tb, *addr, *rootToken, *verbose)
	tb.cleanup()
	os.Exit(code)
}

func run(tb *tb, addr, rootID string, verbose bool) int {
	// Quiet by default: vaultdev's own failures only. The core logs
	// harmless errors while the test helpers seal and unseal it at start
	// (its activity log losing its context), so it says nothing unless -v.
	level, coreLevel := hclog.Warn, hclog.Off
	if verbose {
		level, coreLevel = hclog.Info, hclog.Info
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "vaultdev", Level: level, Output: os.Stderr})
	coreLogger := hclog.New(&hclog.LoggerOptions{Name: "vaultdev.core", Level: coreLevel, Output: os.Stderr})

	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		logger.Error("bad -addr", "err", err)
		return 2
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		logger.Error("-addr must be a loopback address", "addr", addr)
		return 2
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Error("listen", "err", err)
		return 1
	}

	start := time.Now()
	core, _, root := vault.TestCoreUnsealedWithConfig(tb, &vault.CoreConfig{
		LogicalBackends: map[string]logical.Factory{
			"kv":        kv.Factory,
			"aws":       aws.Factory,
			"leased-kv": vault.LeasedPassthroughBackendFactory,
		},
		CredentialBackends: map[string]logical.Factory{"approle": approle.Factory},
		Logger:             coreLogger,
	})
	if tb.failed {
		return 1
	}

	ip, _, _ := net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{
		Handler: vaulthttp.Handler.Handler(&vault.HandlerProperties{
			Core:           core,
			ListenerConfig: &configutil.Listener{Address: ip},
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          coreLogger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	url := "http://" + ln.Addr().String()
	token, err := setUp(url, root, rootID)
	if err != nil {
		logger.Error("setting up the dev server", "err", err)
		return 1
	}
	logger.Info("serving", "addr", url, "ready_in", time.Since(start))

	line, _ := json.Marshal(map[string]string{"addr": url, "root_token": token})
	if _, err := fmt.Fprintf(os.Stdout, "%s\n", line); err != nil {
		return 1
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case s := <-sigs:
		logger.Info("stopping", "signal", s)
	case <-eof:
		logger.Info("stopping: standard input closed")
	case err := <-served:
		logger.Error("serve", "err", err)
		return 1
	}
	return 0
}

// setUp does what `vault server -dev` does after unsealing: the root token
// id asked for, and KV version 2 at secret/ (the test core mounts KV v1
// there). It returns the root token.
func setUp(addr, root, rootID string) (string, error) {
	c, err := api.NewClient(&api.Config{Address: addr, MaxRetries: 0, Timeout: 30 * time.Second})
	if err != nil {
		return "", err
	}
	c.ClearNamespace()
	c.SetToken(root)
	if rootID != "" && rootID != root {
		sec, err := c.Auth().Token().Create(&api.TokenCreateRequest{
			ID:              rootID,
			Policies:        []string{"root"},
			NoParent:        true,
			NoDefaultPolicy: true,
		})
		if err != nil {
			return "", fmt.Errorf("creating the root token: %w", err)
		}
		if sec == nil || sec.Auth == nil {
			return "", errors.New("creating the root token: no token returned")
		}
		if err := c.Auth().Token().RevokeSelf(""); err != nil {
			return "", fmt.Errorf("revoking the initial root token: %w", err)
		}
		root = sec.Auth.ClientToken
		c.SetToken(root)
	}
	if err := c.Sys().Unmount("secret"); err != nil {
		return "", fmt.Errorf("unmounting secret/: %w", err)
	}
	if err := c.Sys().Mount("secret", &api.MountInput{
		Type:        "kv",
		Description: "key/value secret storage",
		Options:     map[string]string{"version": "2"},
	}); err != nil {
		return "", fmt.Errorf("mounting KV v2 at secret/: %w", err)
	}
	// A new KV v2 mount answers "upgrading" for a moment: wait until it
	// serves its config.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Logical().Read("secret/config")
		if err == nil {
			return root, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("KV v2 at secret/ not ready: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tb is the testing.TB the Vault test helpers take, outside a test: fatal
// failures end the program, cleanups run at exit.
type tb struct {
	testing.TB // nil: any method not below panics

	mu       sync.Mutex
	name     string
	failed   bool
	cleanups []func()
	tempDirs []string
}

func (t *tb) Helper()                           {}
func (t *tb) Name() string                      { return t.name }
func (t *tb) Log(args ...any)                   { fmt.Fprintln(os.Stderr, args...) }
func (t *tb) Logf(format string, args ...any)   { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *tb) Error(args ...any)                 { t.Log(args...); t.Fail() }
func (t *tb) Errorf(format string, args ...any) { t.Logf(format, args...); t.Fail() }
func (t *tb) Fatal(args ...any)                 { t.Log(args...); t.FailNow() }
func (t *tb) Fatalf(format string, args ...any) { t.Logf(format, args...); t.FailNow() }
func (t *tb) Skip(args ...any)                  { t.Fatal(args...) }
func (t *tb) Skipf(format string, args ...any)  { t.Fatalf(format, args...) }
func (t *tb) SkipNow()                          { t.FailNow() }
func (t *tb) Skipped() bool                     { return false }
func (t *tb) Context() context.Context          { return context.Background() }
func (t *tb) Output() io.Writer                 { return os.Stderr }
func (t *tb) Attr(key, value string)            {}
func (t *tb) Setenv(key, value string)          { _ = os.Setenv(key, value) }
func (t *tb) Chdir(dir string)                  { _ = os.Chdir(dir) }

func (t *tb) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

func (t *tb) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// FailNow runs the cleanups and exits: the helpers call it on failures
// they cannot go on from.
func (t *tb) FailNow() {
	t.cleanup()
	os.Exit(1)
}

func (t *tb) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *tb) TempDir() string {
	d, err := os.MkdirTemp("", "vaultdev-")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.mu.Lock()
	t.tempDirs = append(t.tempDirs, d)
	t.mu.Unlock()
	return d
}

func (t *tb) ArtifactDir() string { return t.TempDir() }

// cleanup runs the cleanups, last registered first, once.
func (t *tb) cleanup() {
	t.mu.Lock()
	fs, dirs := t.cleanups, t.tempDirs
	t.cleanups, t.tempDirs = nil, nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
