package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
)

// stopTimeout bounds a graceful stop before connections are cut.
const stopTimeout = 10 * time.Second

func runServe(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	policyPath := stringFlag(fs, "policy", "COILY_POLICY", "", "policy file (required)")
	group := stringFlag(fs, "socket-group", "COILY_SOCKET_GROUP", "", "group allowed to reach the local socket (its members still need to be local operators)")
	logFormat := stringFlag(fs, "log-format", "COILY_LOG_FORMAT", "text", "log format: text or json")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	log := newLogger(e, *logFormat)
	if *policyPath == "" {
		fmt.Fprintln(e.stderr, "coily serve: --policy is required")
		return 2
	}
	if err := serve(ctx, log, e.global, *policyPath, *group); err != nil {
		fmt.Fprintf(e.stderr, "coily serve: %v\n", err)
		return 1
	}
	return 0
}

func newLogger(e *env, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, nil))
	}
	return slog.New(slog.NewTextHandler(e.stderr, nil))
}

func serve(ctx context.Context, log *slog.Logger, g *globalFlags, policyPath, group string) error {
	pol, err := policy.Load(policyPath)
	if err != nil {
		return err
	}
	stateDir := *g.stateDir
	if err := prepareStateDir(stateDir, group); err != nil {
		return err
	}
	db, err := store.Open(filepath.Join(stateDir, "coily.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	al, err := audit.Open(audit.Config{Dir: filepath.Join(stateDir, "audit")})
	if err != nil {
		return err
	}
	defer al.Close()
	srv, err := server.New(server.Config{Policy: pol, Store: db, Audit: al, Logger: log,
		ServerUID: os.Getuid(), Version: version})
	if err != nil {
		return err
	}
	l, err := server.ListenLocal(g.socketPath(), group)
	if err != nil {
		return err
	}
	gs := srv.GRPCServer()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(l) }()
	log.Info("serving", "socket", g.socketPath(), "policy", pol.Path, "policy_sha256", pol.SHA256,
		"state_dir", stateDir, "sandboxes", pol.Sandboxes())
	stopReload := reloadOnChange(ctx, log, srv, policyPath)
	defer stopReload()

	select {
	case <-ctx.Done():
	case err := <-served:
		srv.Shutdown()
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("shutting down")
	srv.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		gs.Stop()
	}
	return nil
}

// reloadOnChange reloads the policy when its file changes and on SIGHUP,
// until the returned stop is called.
func reloadOnChange(ctx context.Context, log *slog.Logger, srv *server.Server, path string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.WatchPolicy(ctx, path); err != nil {
			log.Error("policy watcher stopped; reload with SIGHUP", "err", err)
		}
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := srv.ReloadPolicy(ctx, path); err != nil {
					log.Error("policy reload refused; the last good policy stays in force", "err", err)
				}
			}
		}
	}()
	return func() { signal.Stop(hup); cancel(); wg.Wait() }
}

// prepareStateDir creates the state directory, private to the server's
// user; with an operator group it is group-traversable (not listable) so the
// group can reach the socket inside it.
func prepareStateDir(dir, group string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if group == "" {
		return os.Chmod(dir, 0o700)
	}
	gid, err := server.LookupGroup(group)
	if err != nil {
		return err
	}
	if err := os.Chown(dir, -1, gid); err != nil {
		return fmt.Errorf("state dir group: %w", err)
	}
	if err := os.Chmod(dir, 0o710); err != nil {
		return errors.Join(errors.New("state dir mode"), err)
	}
	return nil
}
