// Package testserver starts a whole coily server for tests: real policy
// file, bbolt store, audit log and local socket in a temporary state
// directory, served in-process, with a client connected to it.
package testserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/audit/notary"
	"coily.dev/coily/client"
	"coily.dev/coily/client/tsnode"
	"coily.dev/coily/fleet"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
)

// LocalPolicy is like examples/local.yaml: the local operator may run
// echo, true, sleep and sh with any arguments, natively, four at a time;
// sh's output is capped at 64 KiB per stream.
const LocalPolicy = `version: 1
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: [echo, "true", sleep, sh]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: "true", binary: /bin/true, args: ["**"], flags: any, sandbox: native}
  - {name: sleep, binary: /bin/sleep, args: ["**"], flags: any, sandbox: native, timeout: 5m}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, timeout: 5m, max_output: 64KiB}
`

// Options configure a test server. The zero value serves LocalPolicy.
type Options struct {
	// Policy is the policy file's content.
	Policy string
	// StateDir reuses a state directory (to test restarts); empty means a
	// new temporary one.
	StateDir  string
	Users     access.UserLookup
	KillGrace time.Duration
	// Log receives the server's log; nil discards it.
	Log io.Writer
	// WatchPolicy reloads the policy file when it changes, as coily serve
	// does.
	WatchPolicy bool
	// Keystore fetches the credentials rules name; nil means none.
	Keystore *keystore.Keystore
	// Notifier hears the server's events (a notify.Dispatcher); nil means
	// none.
	Notifier server.Notifier
	// Tailnet also serves on a private tailnet (internal/devnet), as the
	// node "coily" tagged tag:coily, identifying callers with WhoIs.
	Tailnet bool
	// Net, with Tailnet, is a private tailnet to join instead of one of
	// the server's own (several servers on one tailnet); the test closes
	// it.
	Net *devnet.Net
	// Hostname, with Tailnet, is the server's node's name ("": coily).
	Hostname string
	// WhoIs identifies callers by remote address without a tailnet (a
	// unit seam for HTTP handler tests, e.g. WhoIsTags); ignored with
	// Tailnet.
	WhoIs access.WhoIsFunc
	// AuditMaxFileSize rotates the audit log's files at this size; 0
	// means audit.DefaultMaxFileSize.
	AuditMaxFileSize int64
	// AuditHost names the host in every audit record (audit.Config.Host;
	// "": one host).
	AuditHost string
	// ScanBudget bounds the workspace scans (zero: the defaults).
	ScanBudget sandbox.ScanBudget
	// SandboxUIDs is server.Config.SandboxUIDs (a root server's uid per
	// command; zero: the default range).
	SandboxUIDs server.UIDRange
	// Shared, when set, is the shared state the server is given in place
	// of its state file (which it is handed, to wrap).
	Shared func(*store.DB) store.Shared
	// Fleet keeps the server's stops in step with other hosts' (with a
	// Shared in etcd; nil: one host).
	Fleet *fleet.Sync
	// Metrics is the server's registry (nil: one of its own).
	Metrics *prometheus.Registry
	// Checkpoints signs the audit log's checkpoints as coily serve does
	// (audit/notary, started once the server was made), kept in the
	// state file.
	Checkpoints bool
	// AuditOrigin names the log's checkpoints, with Checkpoints (its key
	// made at the first start; "": coily/test).
	AuditOrigin string
}

// Instance is a running server and a client connected to it.
type Instance struct {
	StateDir string
	// ScratchDir holds each command's private directories: the state
	// directory, or for a server running as root its default outside it.
	ScratchDir string
	Socket     string
	PolicyPath string
	Server     *server.Server
	Client     *client.Client
	Audit      *audit.Log
	// Notary signs the log's checkpoints, with Options.Checkpoints.
	Notary *notary.Notary

	// Net and Node are the private tailnet and the server's node on it,
	// with Options.Tailnet.
	Net  *devnet.Net
	Node *tsnet.Server

	ownNet bool // Net was started for this server, and closes with it

	t        testing.TB
	gs       *grpc.Server
	db       *store.DB
	done     chan struct{}
	unwatch  context.CancelFunc
	watching chan struct{}
}

// Start starts a server; it is stopped when the test ends.
func Start(t testing.TB, opts Options) *Instance {
	t.Helper()
	if opts.Policy == "" {
		opts.Policy = LocalPolicy
	}
	if opts.StateDir == "" {
		opts.StateDir = shortTempDir(t)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	polPath := filepath.Join(opts.StateDir, "policy.yaml")
	if err := os.WriteFile(polPath, []byte(opts.Policy), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(polPath)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	in := &Instance{t: t, StateDir: opts.StateDir, Socket: filepath.Join(opts.StateDir, "coily.sock"),
		PolicyPath: polPath, done: make(chan struct{}), watching: make(chan struct{})}
	if in.db, err = store.Open(filepath.Join(opts.StateDir, "coily.db")); err != nil {
		t.Fatal(err)
	}
	if in.Audit, err = audit.Open(audit.Config{Dir: filepath.Join(opts.StateDir, "audit"), MaxFileSize: opts.AuditMaxFileSize, Host: opts.AuditHost}); err != nil {
		t.Fatal(err)
	}
	scratch := opts.StateDir
	if os.Geteuid() == 0 {
		// A root server keeps it outside the private state directory,
		// where its sandbox user reaches it (server.New's default).
		scratch = ""
	}
	cfg := server.Config{Policy: pol, Local: in.db, Shared: in.db, Audit: in.Audit, Keystore: opts.Keystore,
		Logger: slog.New(slog.NewTextHandler(opts.Log, nil)), Users: opts.Users, ServerUID: os.Getuid(),
		KillGrace: opts.KillGrace, ScratchDir: scratch, Version: "test", Notifier: opts.Notifier,
		StateDir: opts.StateDir, Socket: filepath.Join(opts.StateDir, "coily.sock"), WhoIs: opts.WhoIs,
		ScanBudget: opts.ScanBudget, SandboxUIDs: opts.SandboxUIDs, Fleet: opts.Fleet, Metrics: opts.Metrics}
	if opts.Shared != nil {
		cfg.Shared = opts.Shared(in.db)
	}
	var tl net.Listener
	if opts.Tailnet {
		tl = in.startTailnet(t, &cfg, opts)
	}
	in.Server, err = server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Checkpoints {
		in.startNotary(t, opts.Notifier, opts.AuditOrigin)
	}
	if in.ScratchDir = in.Server.ScratchDir(); in.ScratchDir != opts.StateDir {
		t.Cleanup(func() { os.RemoveAll(in.ScratchDir) })
	}
	l, err := access.ListenLocal(in.Socket, "")
	if err != nil {
		t.Fatal(err)
	}
	in.gs = in.Server.GRPCServer()
	served := make(chan struct{}, 2)
	go func() { _ = in.gs.Serve(l); served <- struct{}{} }()
	if tl != nil {
		go func() { _ = in.gs.Serve(tl); served <- struct{}{} }()
	}
	go func() {
		<-served
		if tl != nil {
			<-served
		}
		close(in.done)
	}()
	if in.Client, err = client.DialLocal(in.Socket); err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	ctx, in.unwatch = context.WithCancel(context.Background())
	if opts.WatchPolicy {
		go func() {
			defer close(in.watching)
			if err := in.Server.WatchPolicy(ctx, polPath); err != nil {
				t.Errorf("watch policy: %v", err)
			}
		}()
	} else {
		close(in.watching)
	}
	t.Cleanup(in.Stop)
	return in
}

// Stop stops the server as `coily serve` does on SIGTERM and closes its
// files. It is safe to call twice.
func (in *Instance) Stop() {
	if in.gs == nil {
		return
	}
	in.unwatch()
	<-in.watching
	in.Client.Close()
	in.Server.Shutdown()
	in.gs.GracefulStop()
	<-in.done
	in.Server.RemoveScratch()
	in.gs = nil
	if in.Notary != nil {
		in.Notary.Stop()
	}
	if err := in.Audit.Close(); err != nil {
		in.t.Errorf("close audit: %v", err)
	}
	if err := in.db.Close(); err != nil {
		in.t.Errorf("close store: %v", err)
	}
	if in.Node != nil {
		in.Node.Close()
		if in.ownNet {
			in.Net.Close()
		}
	}
}

// startTailnet starts a private tailnet and the server's node on it, and
// returns the node's listener; cfg gets the node's WhoIs.
func (in *Instance) startTailnet(t testing.TB, cfg *server.Config, opts Options) net.Listener {
	t.Helper()
	var err error
	in.Net, in.ownNet = opts.Net, opts.Net == nil
	if in.ownNet {
		if in.Net, err = devnet.Start(nil); err != nil {
			t.Fatal(err)
		}
	}
	hostname := opts.Hostname
	if hostname == "" {
		hostname = "coily"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in.Node, err = devnet.Join(ctx, in.Net.ControlURL, devnet.NodeOptions{Dir: filepath.Join(in.StateDir, "tsnet"),
		Hostname: hostname, Tags: []string{"tag:coily"}})
	if err != nil {
		if in.ownNet {
			in.Net.Close()
		}
		t.Fatal(err)
	}
	lc, err := in.Node.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	cfg.WhoIs = lc.WhoIs
	tl, err := in.Node.Listen("tcp", ":"+strconv.Itoa(client.DefaultPort))
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// Serve serves the server's API on l too (a Tailscale Service's
// listener, tsservice), until the server stops.
func (in *Instance) Serve(l net.Listener) { go func() { _ = in.gs.Serve(l) }() }

// TailnetNode joins the private tailnet as a node with the given host
// name and tags (none: an untagged node of its own user), once it reaches
// the server's node. It leaves when the test ends.
func (in *Instance) TailnetNode(t testing.TB, hostname string, tags ...string) *tsnet.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node, err := devnet.Join(ctx, in.Net.ControlURL, devnet.NodeOptions{Dir: shortTempDir(t), Hostname: hostname, Tags: tags, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	if err := devnet.WaitReachable(ctx, node, "coily"); err != nil {
		t.Fatal(err)
	}
	return node
}

// TailnetClient joins the private tailnet as a node with the given host
// name and tags (none: an untagged node of its own user) and connects to
// the server over it. It is closed when the test ends.
func (in *Instance) TailnetClient(t testing.TB, hostname string, tags ...string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	node, err := devnet.Join(ctx, in.Net.ControlURL, devnet.NodeOptions{Dir: dir, Hostname: hostname, Tags: tags, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tsnode.Connect(ctx, node, "coily", time.Minute, func() { node.Close() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// WhoIsTags is a WhoIs for unit tests of HTTP handlers: a caller from one
// of the addresses (an IP, any port) is a node of that name with those
// tags (none: the user "<name>@example.com"); any other address is
// unknown.
func WhoIsTags(nodes map[string]FakeNode) access.WhoIsFunc {
	return func(_ context.Context, remote string) (*apitype.WhoIsResponse, error) {
		ap, err := netip.ParseAddrPort(remote)
		if err != nil {
			return nil, err
		}
		n, ok := nodes[ap.Addr().String()]
		if !ok {
			return nil, fmt.Errorf("no node has address %s", ap.Addr())
		}
		return &apitype.WhoIsResponse{Node: &tailcfg.Node{Name: n.Name + ".", Tags: n.Tags},
			UserProfile: &tailcfg.UserProfile{LoginName: n.Name + "@example.com"}}, nil
	}
}

// FakeNode is a node WhoIsTags knows.
type FakeNode struct {
	Name string
	Tags []string
}

// Store is the server's state file, open while it runs.
func (in *Instance) Store() *store.DB { return in.db }

// Restart stops the server and starts a new one on the same state dir.
func (in *Instance) Restart(opts Options) *Instance {
	in.t.Helper()
	in.Stop()
	opts.StateDir = in.StateDir
	return Start(in.t, opts)
}

// shortTempDir returns a temporary directory with a path short enough for
// a unix socket (sun_path is 108 bytes; t.TempDir paths can exceed it).
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "coily-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
