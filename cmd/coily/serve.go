package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"tailscale.com/envknob"
	"tailscale.com/tsnet"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/cli"
	"coily.dev/coily/client"
	"coily.dev/coily/fleet/auditship"
	"coily.dev/coily/notify"
	"coily.dev/coily/ops"
	"coily.dev/coily/policy"
	"coily.dev/coily/policyfile"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/regularfile"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
	"coily.dev/coily/tsservice"
	"coily.dev/coily/version"
	"coily.dev/coily/webapi"
)

// stopTimeout bounds a graceful stop before connections are cut.
const stopTimeout = 10 * time.Second

// serveOptions describe one trust point.
type serveOptions struct {
	policyPath  string
	authKeyFile string
	stateDir    string
	socket      string
	group       string
	// Tailnet: join with tsnet (or use node, already up) and serve there too.
	tailnet  bool
	hostname string
	// service, with tailnet, is a Tailscale Service the node also serves
	// the API as (tsservice): one name for a fleet's hosts.
	service    string
	authKey    string
	controlURL string
	node       *tsnet.Server
	keystore   keystoreConfig
	// egressConns caps egress connections open at once across every exec.
	egressConns int
	// metricsListen is the local address of the operations endpoints
	// ("": none); metricsTailnetPort their port on the tailnet node (0:
	// none).
	metricsListen      string
	metricsTailnetPort int
	// web serves the web console on the tailnet node; webHTTP over HTTP
	// even where the tailnet offers certificates; webDev marks its pages
	// as coily dev's.
	web, webHTTP, webDev bool
	// webReady is called with the console's tailnet URL once it serves.
	webReady func(url string)
	// sandboxUser is who a root server's sandboxes run as (zero: the
	// default, nobody).
	sandboxUser sandbox.User
	// sandboxUIDs is the range of a root server's uid per command.
	sandboxUIDs server.UIDRange
	// gitCacheMax and gitCacheRemoteMax are the git proxy's cache
	// budgets, in total and per remote (0: the proxy's defaults).
	gitCacheMax, gitCacheRemoteMax int64
	// shared is the etcd cluster the state that decides what runs is
	// kept in (nil: this host's state file).
	shared *sharedState
	// auditFeed is the console's audit stream of every host (nil: this
	// host's log).
	auditFeed webapi.AuditFeed
	// killGrace is the SIGTERM→SIGKILL delay of a lockout and a kill.
	killGrace time.Duration
	// checkpoints configures the audit log's signed checkpoints.
	checkpoints checkpointFlags
	// witnesses take the audit log's checkpoints (--witness); witnessFor
	// are the peers' logs this host witnesses (--witness-for).
	witnesses  []*witness.Client
	witnessFor []string
	// auditMaxFileSize rotates the audit log's files at this size (0:
	// audit.DefaultMaxFileSize; set by development builds only).
	auditMaxFileSize int64
	// ready is called once both listeners serve, with the tailnet address
	// and the open store.
	ready func(tailnetAddr string, db *store.DB)
}

func serveCmd(a *cli.App) *cobra.Command {
	return command(a, spec{use: "serve --policy FILE [flags]", short: "run the trust point on the local socket (and the tailnet with --tailnet)",
		long: `Run the trust point: the gRPC API on the local operator socket (<state-dir>/coily.sock) and, with
--tailnet, on a tsnet node (port 7443), identifying every caller (peer credentials, tailnet WhoIs),
checking it against the policy, running commands in the sandbox and auditing every decision. It
refuses to run as root unless told --allow-root.`,
		example: `  coily serve --policy /etc/coily/policy.yaml
  TS_AUTHKEY=tskey-… coily serve --tailnet --policy /etc/coily/policy.yaml --vault-auth approle …`,
		flags: serveFlags})
}

type serveFlagValues struct {
	policyPath, group, logFormat, authKeyFile, metricsListen *string
	tailnet, allowRoot, web, webHTTP                         *bool
	metricsPort, egressConns                                 *int
	sandboxUser, sandboxUIDs, service                        *string
	gitCacheMax, gitCacheRemoteMax                           *string
	ks                                                       *keystoreFlags
	state                                                    *stateFlags
	killGrace                                                *time.Duration
	checkpoints                                              checkpointFlags
	witness                                                  witnessFlags
	dev                                                      func() (int64, error) // devServeFlags
}

func serveFlags(fs *pflag.FlagSet) runFunc {
	var f serveFlagValues
	f.policyPath = stringFlag(fs, "policy", "COILY_POLICY", "", "policy file (required)")
	f.group = stringFlag(fs, "socket-group", "COILY_SOCKET_GROUP", "", "group allowed to reach the local socket (its members still need to be local operators)")
	f.logFormat = stringFlag(fs, "log-format", "COILY_LOG_FORMAT", "text", "log format: text or json")
	f.tailnet = boolFlag(fs, "tailnet", "COILY_TAILNET", "also serve on the tailnet, as a tsnet node (its host name: --hostname, default coily)")
	f.service = stringFlag(fs, "service", "COILY_SERVICE", "", "with --tailnet: also serve the API as this Tailscale Service (svc:NAME), the one name of several hosts; the node must be tagged and approved to host it (docs/scale.md)")
	f.authKeyFile = stringFlag(fs, "authkey-file", "COILY_AUTHKEY_FILE", "", "file holding the tailnet auth key (default: $TS_AUTHKEY)")
	f.metricsListen = stringFlag(fs, "metrics-listen", "COILY_METRICS_LISTEN", "", "serve /metrics, /healthz and /readyz on this local address, e.g. 127.0.0.1:9464; no identity is asked, so keep it on loopback")
	f.metricsPort = intFlag(fs, "metrics-tailnet-port", "COILY_METRICS_TAILNET_PORT", ops.DefaultMetricsPort, "with --tailnet: serve /metrics, /healthz and /readyz on this port of the tailnet node, to callers the policy gives the metrics permission (0: not on the tailnet)")
	f.allowRoot = boolFlag(fs, "allow-root", "COILY_ALLOW_ROOT", "run as root anyway (not recommended: see docs/operations.md)")
	f.egressConns = intFlag(fs, "egress-max-conns", "COILY_EGRESS_MAX_CONNS", 256, "egress connections open at once across every command")
	f.web = boolFlag(fs, "web", "COILY_WEB", "with --tailnet: serve the web console on the tailnet node (HTTPS on :443 with the node's Tailscale certificate when the tailnet offers certificates, else HTTP on :80)")
	f.webHTTP = boolFlag(fs, "web-http", "COILY_WEB_HTTP", "serve the web console over HTTP on :80 even where the tailnet offers certificates (a certificate publishes the node's name in Certificate Transparency logs)")
	f.gitCacheMax = stringFlag(fs, "git-cache-max", "COILY_GIT_CACHE_MAX", "10GiB", "the git proxy's caches' budget on disk, in total (such as 10GiB or 512MiB)")
	f.gitCacheRemoteMax = stringFlag(fs, "git-cache-remote-max", "COILY_GIT_CACHE_REMOTE_MAX", "4GiB", "the git proxy's caches' budget on disk, per remote (at most --git-cache-max)")
	f.sandboxUser = sandboxUserFlag(fs)
	f.sandboxUIDs = sandboxUIDsFlag(fs)
	f.ks = registerKeystoreFlags(fs)
	f.state = registerStateFlags(fs)
	f.checkpoints = registerCheckpointFlags(fs)
	f.witness = registerWitnessFlags(fs)
	f.dev = devServeFlags(fs)
	f.killGrace = durationFlag(fs, "kill-grace", "COILY_KILL_GRACE", server.DefaultKillGrace, "how long a lockout or a kill waits between SIGTERM and SIGKILL (100ms to 1m; a fleet on etcd: 500ms, so every command is dead within a second)")
	return func(ctx context.Context, e *env) int { return runServe(ctx, e, f) }
}

func runServe(ctx context.Context, e *env, f serveFlagValues) int {
	policyPath, group, logFormat, authKeyFile, metricsListen := f.policyPath, f.group, f.logFormat, f.authKeyFile, f.metricsListen
	tailnet, allowRoot, metricsPort, egressConns, ksFlags, sbUser := f.tailnet, f.allowRoot, f.metricsPort, f.egressConns, f.ks, f.sandboxUser
	hostname := cmp.Or(e.global.Hostname, "coily")
	ks, err := ksFlags.config()
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	runAs, err := sandboxUser(*sbUser)
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	uids, err := parseSandboxUIDs(*f.sandboxUIDs)
	if err == nil && *f.sandboxUIDs != "" && os.Geteuid() != 0 {
		err = fmt.Errorf("--sandbox-uids applies when coily runs as root; it runs as uid %d, and so do its sandboxes", os.Geteuid())
	}
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	cacheMax, cacheRemoteMax, err := gitCacheBudgets(*f.gitCacheMax, *f.gitCacheRemoteMax)
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	nodeName := ""
	if *tailnet {
		nodeName = hostname
	}
	shared, err := f.state.config(nodeName)
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	if err := f.checkpoints.check(); err != nil {
		return usage(e, "serve: %v", err)
	}
	witnesses, err := parseWitnesses(f.witness.push.specs)
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	if _, err := parseLogs(f.witness.serveFor.specs); err != nil {
		return usage(e, "serve: --witness-for %v", err)
	}
	if len(f.witness.serveFor.specs) > 0 && !*tailnet {
		return usage(e, "serve: --witness-for needs --tailnet")
	}
	auditMax, err := f.dev()
	if err != nil {
		return usage(e, "serve: %v", err)
	}
	if *f.killGrace < 100*time.Millisecond || *f.killGrace > time.Minute {
		return usage(e, "serve: --kill-grace %v: must be between 100ms and 1m", *f.killGrace)
	}
	log := newLogger(e, *logFormat)
	if os.Geteuid() == 0 {
		if !*allowRoot {
			fmt.Fprintln(e.stderr, rootRefusal)
			return 1
		}
		log.Warn("running as root (--allow-root): the server itself holds root's privileges; its sandboxes run as an unprivileged user (--sandbox-user)")
	}
	if *policyPath == "" {
		return usage(e, "serve needs --policy FILE")
	}
	if *f.service != "" {
		if !*tailnet {
			return usage(e, "serve: --service needs --tailnet")
		}
		if _, err := tsservice.ParseName(*f.service); err != nil {
			return usage(e, "serve: --service: %v", err)
		}
	}
	o := serveOptions{policyPath: *policyPath, stateDir: e.global.StateDir, socket: e.global.SocketPath(),
		group: *group, tailnet: *tailnet, hostname: hostname, controlURL: e.global.ControlURL, keystore: ks, egressConns: *egressConns,
		metricsListen: *metricsListen, metricsTailnetPort: *metricsPort, sandboxUser: runAs, sandboxUIDs: uids,
		web: *f.web, webHTTP: *f.webHTTP, gitCacheMax: cacheMax, gitCacheRemoteMax: cacheRemoteMax, shared: shared,
		killGrace: *f.killGrace, service: *f.service, checkpoints: f.checkpoints,
		witnesses: witnesses, witnessFor: f.witness.serveFor.specs, auditMaxFileSize: auditMax}
	if *egressConns < 1 || *egressConns > 65536 {
		return usage(e, "serve: --egress-max-conns %d: must be between 1 and 65536", *egressConns)
	}
	o.authKeyFile = *authKeyFile
	if *authKeyFile != "" {
		key, err := regularfile.Read(*authKeyFile, 64<<10)
		if err != nil {
			printLine(e.stderr, "coily serve: auth key: %v", err)
			return 1
		}
		o.authKey = strings.TrimSpace(string(key))
	}
	lock, code := takeStateDir(e, "coily serve", o.stateDir)
	if lock == nil {
		return code
	}
	defer lock.Close()
	if err := serve(ctx, log, o); err != nil {
		printLine(e.stderr, "coily serve: %v", err)
		return 1
	}
	return 0
}

// takeStateDir locks the state directory for the process's life; on
// failure it says why on stderr and returns nil and the exit code.
func takeStateDir(e *env, cmd, dir string) (*stateLock, int) {
	lock, err := lockStateDir(dir)
	if err == nil {
		return lock, 0
	}
	printLine(e.stderr, "%s: %v", cmd, err)
	if errors.Is(err, errStateDirBusy) {
		return nil, exitStateDirBusy
	}
	return nil, 1
}

// rootRefusal explains why coily serve does not run as root.
const rootRefusal = `coily serve: refusing to run as root. The server holds the signing keys and fetches every credential: a flaw in it
would be root's. Its sandboxes would run as an unprivileged user (--sandbox-user, default nobody), which must then own every
named workspace. Run it as a dedicated user (deploy/coily.service creates one; docs/operations.md, "Running the server"),
or pass --allow-root (COILY_ALLOW_ROOT=true) to accept that.`

func newLogger(e *env, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, nil))
	}
	return slog.New(slog.NewTextHandler(e.stderr, nil))
}

// serve runs the trust point until ctx ends. The caller holds the state
// directory's lock (lockStateDir).
func serve(ctx context.Context, log *slog.Logger, o serveOptions) error {
	pol, err := policy.Load(o.policyPath)
	if err != nil {
		return err
	}
	if _, err := policyfile.RunTests(o.policyPath, pol); err != nil {
		return err
	}
	if err := prepareStateDir(o.stateDir, o.group); err != nil {
		return err
	}
	db, err := store.Open(filepath.Join(o.stateDir, "coily.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	al, err := audit.Open(audit.Config{Dir: filepath.Join(o.stateDir, "audit"), Host: o.shared.auditHost(), MaxFileSize: o.auditMaxFileSize})
	var broken *audit.BrokenError
	if errors.As(err, &broken) && broken.Torn {
		return fmt.Errorf("%w: the last record was torn by a crash or a full disk: `coily audit repair --state-dir %s` cuts it and records that it did", err, o.stateDir)
	}
	if err != nil {
		return err
	}
	defer al.Close()
	wit := newWitnesses(log, al, o.witnesses)
	defer wit.stop() // after the notary's last checkpoint was offered
	signer, recordKey, err := auditSigner(db, al, checkpointOrigin(o.shared.auditHost()))
	if err != nil {
		return fmt.Errorf("audit checkpoints: %w", err)
	}
	wit.pin(signer.Verifier)
	lost, err := wit.atStart(ctx, func() ([]byte, error) { return checkpointNow(db, al, signer) }, o.stateDir)
	if err != nil {
		return err
	}
	ks, err := openKeystore(ctx, log, o.keystore)
	if err != nil {
		return err
	}
	defer ks.Close()
	node, err := tailnetNode(ctx, log, o)
	if err != nil {
		return err
	}
	reg, err := metricsRegistry()
	if err == nil {
		err = reg.Register(wit.failed)
	}
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	cfg := server.Config{Policy: pol, Local: db, Shared: db, Audit: al, Keystore: ks, Logger: log, ServerUID: os.Getuid(), Version: version.Version(),
		StateDir: o.stateDir, Socket: o.socket, OwnFiles: o.ownFiles(), EgressConns: o.egressConns, Metrics: reg,
		SandboxUser: o.sandboxUser, SandboxUIDs: o.sandboxUIDs, KillGrace: o.killGrace,
		LostRecords: lost}
	if o.shared != nil {
		es, sync, err := o.shared.open(ctx, log, reg, o.stateDir)
		if err != nil {
			return err
		}
		defer es.Close()
		cfg.Shared, cfg.Fleet = es, sync
		stopShip, err := o.shared.ship(es, al, log)
		if err != nil {
			return err
		}
		defer stopShip()
		o.auditFeed = auditship.Feed{Store: es}
	}
	if node != nil {
		defer node.Close()
		lc, err := node.LocalClient()
		if err != nil {
			return fmt.Errorf("tailnet: %w", err)
		}
		cfg.WhoIs = lc.WhoIs
	}
	stopWitness, err := serveWitness(log, o, node)
	if err != nil {
		return err
	}
	defer stopWitness()
	// The console's listener first: notifications link to its URL.
	webLn, err := listenWeb(ctx, log, o, node)
	if err != nil {
		return fmt.Errorf("web console: %w", err)
	}
	// Stopped before the node closes (defers run last first): what is
	// queued may go through it.
	notifier, stopNotifier, err := startNotifier(log, ks, reg, node, webLn.url())
	if err != nil {
		webLn.Close()
		return fmt.Errorf("notify: %w", err)
	}
	defer stopNotifier()
	cfg.Notifier = notifier
	// The state guard checks the log against the checkpoint the state
	// file keeps before the notary signs (and keeps) one of the log as
	// it is: a log that lost records is found first.
	srv, err := server.New(cfg)
	if err != nil {
		webLn.Close()
		return err
	}
	copies := &notify.Checkpoints{Notify: notifier.Notify}
	nt, err := startNotary(log, db, al, o.checkpoints, signer, copies.Offer, wit.offer)
	if err == nil {
		defer nt.Stop() // before the log closes: its last checkpoint covers every record
		wit.start(nt.Latest(), func(ctx context.Context, reason string) error {
			_, err := srv.Lockout(access.WithCall(ctx, access.ServerCaller, nil), &coilyv1.LockoutRequest{Reason: reason})
			return err
		})
		err = recordKey(nt) // after the state guard's check of the log
	}
	if err != nil {
		webLn.Close()
		return err
	}
	listeners, tailAddr, err := listen(ctx, o, node)
	if err != nil {
		webLn.Close()
		return err
	}
	ops, err := startOps(log, srv, o, node)
	if err != nil {
		webLn.Close()
		for _, l := range listeners {
			l.Close()
		}
		return err
	}
	defer ops.close()
	web, err := startWeb(log, webServer(srv, o.auditFeed), o, webLn)
	if err != nil {
		for _, l := range listeners {
			l.Close()
		}
		return fmt.Errorf("web console: %w", err)
	}
	defer web.close()
	git, err := startGit(log, srv, o, node)
	if err != nil {
		for _, l := range listeners {
			l.Close()
		}
		return fmt.Errorf("git proxy: %w", err)
	}
	defer git.close()
	gs := srv.GRPCServer()
	served := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() { served <- gs.Serve(l) }()
	}
	log.Info("serving", "socket", o.socket, "tailnet", tailAddr, "policy", pol.Path, "policy_sha256", pol.SHA256,
		"state_dir", o.stateDir, "sandboxes", pol.Sandboxes())
	stopReload := reloadOnChange(ctx, log, srv, o.policyPath)
	defer stopReload()
	if o.webReady != nil && web != nil {
		o.webReady(web.url())
	}
	if o.ready != nil {
		o.ready(tailAddr, db)
	}
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
	srv.RemoveScratch() // every call has ended: nothing of theirs is left in it
	return nil
}

// tailnetNode returns the tsnet node to serve on: the one given, a new one
// joined with the options, or nil when not serving on the tailnet.
func tailnetNode(ctx context.Context, log *slog.Logger, o serveOptions) (*tsnet.Server, error) {
	if o.node != nil || !o.tailnet {
		return o.node, nil
	}
	if o.controlURL != "" {
		envknob.SetNoLogsNoSupport() // a private control server (headscale): no log upload to Tailscale
	}
	dir := filepath.Join(o.stateDir, "tsnet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tailnet state: %w", err)
	}
	node := &tsnet.Server{Dir: dir, Hostname: o.hostname, ControlURL: o.controlURL, AuthKey: o.authKey,
		Logf:     func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...), "component", "tsnet") },
		UserLogf: func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...), "component", "tsnet") }}
	if _, err := node.Up(ctx); err != nil {
		node.Close()
		return nil, fmt.Errorf("tailnet: join as %s: %w", o.hostname, err)
	}
	return node, nil
}

// listen opens the local socket and, with a node, the tailnet listener
// and the Service's, if it serves one.
func listen(ctx context.Context, o serveOptions, node *tsnet.Server) ([]net.Listener, string, error) {
	local, err := access.ListenLocal(o.socket, o.group)
	if err != nil {
		return nil, "", err
	}
	if node == nil {
		return []net.Listener{local}, "", nil
	}
	tl, err := node.Listen("tcp", ":"+strconv.Itoa(client.DefaultPort))
	if err != nil {
		local.Close()
		return nil, "", fmt.Errorf("tailnet listener: %w", err)
	}
	lns := []net.Listener{local, tl}
	if o.service != "" {
		sl, err := tsservice.Listen(ctx, node, o.service, client.DefaultPort)
		if err != nil {
			local.Close()
			tl.Close()
			return nil, "", fmt.Errorf("tailnet service: %w", err)
		}
		lns = append(lns, sl)
	}
	return lns, net.JoinHostPort(node.Hostname, strconv.Itoa(client.DefaultPort)), nil
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
	gid, err := access.LookupGroup(group)
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

// ownFiles are the files outside the state directory that the server
// reads and no command may see or change: the policy (a command that
// rewrote it would reload its own rules), the credentials file, Vault's
// token and secret-id files, the tailnet auth key file. Each is hidden
// by its path as given and, when different, as resolved.
func (o serveOptions) ownFiles() []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
				out = append(out, real)
			}
		}
	}
	add(o.policyPath)
	add(o.authKeyFile)
	add(o.keystore.file)
	if o.shared != nil {
		for _, p := range o.shared.secrets {
			add(p)
		}
	}
	if v := o.keystore.vault; v != nil {
		add(v.TokenFile)
		add(v.SecretIDFile)
		add(v.WrappedSecretIDFile)
	}
	return out
}
