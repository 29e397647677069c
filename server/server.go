// Package server owns coily's gRPC service: the interceptors that admit
// every call through package access, the Exec pipeline and the handlers of
// the stop controls (lockout and pause), whose state is package stops.
//
// Invariants:
//   - every call is admitted by access before any handler runs: identified
//     by its transport (an unidentifiable caller is refused with
//     unauthenticated, never treated as anonymous) and authorized by the
//     one table (a method without an entry is refused: default deny);
//   - every Exec decision and every control call, allowed or refused, is
//     written to the audit log before the caller gets its answer, and a
//     failed audit write fails the request;
//   - a lockout is in force in memory before its persistence is attempted, and
//     no command admitted after it can start;
//   - it never starts more open than its state file or its audit log says it
//     was, nor unlocked beside a log that lost records (package stateguard);
//   - refusals become gRPC status errors in exactly one place (the
//     interceptors, through package refusal);
//   - metric labels are bounded: rule names of the policy, refusal codes
//     and fixed sets, never argv, principals, peers or hosts (metrics.go).
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/attach/leases"
	"coily.dev/coily/audit"
	"coily.dev/coily/egress"
	"coily.dev/coily/fleet"
	"coily.dev/coily/keystore"
	"coily.dev/coily/metrics"
	"coily.dev/coily/ops"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/recorder"
	"coily.dev/coily/refusal"
	"coily.dev/coily/relay"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/stateguard"
	"coily.dev/coily/stops"
	"coily.dev/coily/store"
	"coily.dev/coily/supervise"
	"coily.dev/coily/wire"
	"coily.dev/coily/workspace"
)

// DefaultKillGrace is how long a lockout waits between SIGTERM and SIGKILL.
const DefaultKillGrace = 5 * time.Second

// Config holds the server's collaborators. Policy, Local, Shared and Audit
// are required.
type Config struct {
	Policy *policy.Policy
	// Local is this host's own state, Shared the state that decides what
	// runs (package store; one host: both its state file).
	Local  store.Local
	Shared store.Shared
	// Fleet keeps the stops in step with other hosts' (nil: one host).
	Fleet     *fleet.Sync
	Audit     *audit.Log
	Sandboxes sandbox.Registry
	// Keystore fetches the credentials rules inject; nil means no
	// backend, so every rule naming a credential is refused.
	Keystore *keystore.Keystore
	Logger   *slog.Logger
	// Users resolves local-socket peers; nil means the host's user database.
	Users access.UserLookup
	// WhoIs identifies callers on other listeners (the tailnet); nil
	// means such callers are refused.
	WhoIs access.WhoIsFunc
	// ServerUID is the uid the server runs as (a local operator by right).
	ServerUID int
	// KillGrace is the SIGTERM→SIGKILL delay of a lockout.
	KillGrace time.Duration
	// ScratchDir holds each Exec's private working directory; empty means the OS temp dir.
	ScratchDir  string
	LostRecords []stateguard.Lost // found at start outside the state file (a witness): locked out
	// StateDir and Socket are the server's own; every sandbox hides them.
	StateDir, Socket string
	// ScanBudget bounds the scans of a workspace before and after each
	// command (zero: the sandbox's defaults).
	ScanBudget sandbox.ScanBudget
	// OwnFiles are the server's other files (the policy, the credentials
	// file, Vault token and secret-id files, the auth key file): every
	// sandbox hides them too.
	OwnFiles []string
	// SandboxUser is the host user a server running as root runs every
	// sandbox as (zero: sandbox.DefaultUser, "nobody"); never root. A
	// server not running as root runs its sandboxes as itself and must
	// leave it zero. New sets it.
	SandboxUser sandbox.User
	// SandboxUIDs is the range a server running as root gives each
	// bubblewrap command a uid of its own from (sandbox.UIDPool); zero
	// means sandbox.DefaultUIDFirst and DefaultUIDCount. Off shares the
	// sandbox user's uid between all commands instead.
	SandboxUIDs UIDRange
	// EgressConns caps the egress connections open at once across every
	// exec's proxy (each exec has its own cap too); 0 means 256.
	EgressConns int
	// Metrics is the registry the server's metrics are registered on and
	// served from (OpsHandler); nil means a registry of its own. One
	// registry serves one server.
	Metrics *prometheus.Registry
	// Notifier hears of waiting approvals, lockouts, pauses and refusals
	// (package notify); nil means nobody is notified.
	Notifier Notifier
	Version  string
	Now      func() time.Time
}

// Server is the coily service.
type Server struct {
	coilyv1grpc.UnimplementedCoilyServiceServer

	cfg     Config
	log     *slog.Logger
	policy  atomic.Pointer[policy.Policy]
	started time.Time

	approvals *approvals.Queue
	metrics   *metrics.Metrics
	ready     *ops.Readiness // the last readiness answer
	// gate admits every request: who calls, and what it may do.
	gate *access.Gate
	// egress is the server-wide egress connection budget.
	egress *egress.Budget
	// recorder writes the audit records: refusal floods counted, every
	// append observed and fed to the live audit stream (package recorder).
	recorder *recorder.Recorder

	// stops holds the lockout and pauses, the job table and the
	// concurrency slots, under a lock of its own (package stops).
	stops *stops.Controls

	// relay answers relayed requests exactly once (package relay).
	relay *relay.Relayer
	// workspaces serialises commands per named workspace.
	workspaces stops.Workspaces

	// uids gives a root server's commands a uid each (nil: they share
	// the sandbox user's, or run as the server).
	uids *sandbox.UIDPool
	// guard cross-checks the stop state at start and anchors the audit
	// head (package stateguard).
	guard *stateguard.Guard

	bg   sync.WaitGroup  // the revocation of leftover leases
	quit <-chan struct{} // closed by Shutdown (stops.Controls.Quit)
}

// UIDRange is Config.SandboxUIDs.
type UIDRange struct {
	First, Count int
	Off          bool
}

// New returns a server restored to the stop state recorded in the store,
// cross-checked against the audit log (package stateguard): it never starts more
// open than the log says it was, and starts locked out when the log lost
// records the store saw. An unreadable state is an error: the server must
// not start unlocked because it could not read that it was locked.
func New(cfg Config) (*Server, error) {
	if cfg.Policy == nil || cfg.Local == nil || cfg.Shared == nil || cfg.Audit == nil {
		return nil, errors.New("server: Policy, Local, Shared and Audit are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	user, err := supervise.SandboxUser(cfg.SandboxUser, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.SandboxUser = user
	scratch, own, err := workspace.PrepareScratch(cfg.StateDir, cfg.ScratchDir, cfg.SandboxUser, cfg.OwnFiles)
	if err != nil {
		return nil, err
	}
	cfg.ScratchDir, cfg.OwnFiles = scratch, own
	r := cfg.SandboxUIDs
	uids, err := supervise.UIDs(cfg.SandboxUser, r.First, r.Count, r.Off, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if cfg.Sandboxes == nil {
		cfg.Sandboxes = supervise.Sandboxes(cfg.StateDir, cfg.Logger)
	}
	// Every sandbox bubblewrap starts is held in the fleet until it is
	// over: a lockout kills them all by it, whatever the job table says.
	boxes := sandbox.NewFleet()
	cfg.Sandboxes = cfg.Sandboxes.WithFleet(boxes)
	if cfg.Users == nil {
		cfg.Users = access.HostUsers{}
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	controls, err := stops.New(stops.Config{Store: cfg.Shared, Fleet: boxes, UIDs: uids, KillGrace: cfg.KillGrace, Now: cfg.Now, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("server: read stop state: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, stops: controls, started: cfg.Now(),
		quit: controls.Quit(), egress: egress.NewBudget(cmp.Or(cfg.EgressConns, 256)),
		uids: uids}
	// The approvals exist before the metrics that gauge them; none ends
	// before New returns, so none is observed before the metrics exist.
	s.approvals = approvals.New(cfg.Now, func(st coilyv1.ApprovalState, waited time.Duration) { s.metrics.ApprovalEnded(st, waited) }, cfg.Shared)
	s.recorder = recorder.New(recorder.Config{Audit: cfg.Audit, Log: cfg.Logger, Now: func() time.Time { return s.cfg.Now() },
		Written: func(took time.Duration, durable bool, err error) { s.metrics.AuditWritten(took, durable, err) },
		Refused: func(r audit.Record) { s.metrics.Refused(r.Code); s.notifyRefusal(r) },
		Recorded: func(r audit.Record) {
			if stateguard.AnchorsHead(r) {
				s.guard.Anchor()
			}
		}})
	s.ready = ops.NewReadiness(ops.Components{Closing: s.stops.Closing, Unavailable: s.stops.Unavailable, Policy: s.Policy, Store: cfg.Shared, Audit: cfg.Audit,
		Keystore: cfg.Keystore, Sandboxes: cfg.Sandboxes})
	s.relay = relay.New(relay.Config{Store: cfg.Shared, Logger: cfg.Logger, Now: func() time.Time { return s.cfg.Now() }})
	s.policy.Store(cfg.Policy)
	s.gate = access.New(access.Config{ServerUID: cfg.ServerUID, WhoIs: cfg.WhoIs, Policy: s.Policy, Locked: s.checkLockout,
		Record: s.record, Now: func() time.Time { return s.cfg.Now() }, Log: cfg.Logger})
	gauges := metrics.Gauges{Lockout: func() bool { return s.stopActive(true) }, Pause: func() bool { return s.stopActive(false) },
		ApprovalsWaiting: s.approvals.PendingCount, InFlight: s.jobCount}
	if s.metrics, err = metrics.New(cfg.Metrics, gauges, cfg.Version); err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	s.metrics.Rules(cfg.Policy)
	s.configureNotifier(cfg.Policy)
	s.guard = stateguard.New(stateguard.Config{Audit: cfg.Audit, Local: cfg.Local, Stops: controls, Record: s.record, Shared: cfg.Fleet != nil,
		Log: cfg.Logger, Now: func() time.Time { return s.cfg.Now() }, Lost: cfg.LostRecords})
	if err := s.guard.CrossCheck(); err != nil {
		return nil, err
	}
	cfg.Audit.SetCheckpoint(s.guard.Checkpoint)
	cfg.Audit.SetAnchor(s.guard.AnchorHead)
	s.guard.Anchor()
	cfg.Fleet.Start(controls, fleet.Lockouts{RejectApprovals: s.approvals.RejectAll, Keystore: cfg.Keystore.Lockout, Record: s.record, Logger: cfg.Logger})
	if st, _ := s.stops.State(); st.Lockout.Active {
		s.log.Warn("starting locked out", "by", st.Lockout.By, "reason", st.Lockout.Reason)
	}
	logAbsentBinaries(s, cfg.Policy)
	leases.StartRevokingLeftovers(s.leaseConfig(), &s.bg, s.record)
	return s, nil
}

// Policy returns the policy in force.
func (s *Server) Policy() *policy.Policy { return s.policy.Load() }

// GRPCServer builds the gRPC server: transport credentials that identify
// local-socket peers, the identity-and-authorization interceptors, the coily
// service, the health service and reflection. It is the only place a gRPC
// server is built.
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.Creds(access.PeerCredentials(s.cfg.Users)),
		grpc.ForceServerCodecV2(wire.Codec{}),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		// Unknown methods reach the interceptors too (refused by the
		// authorization table, and audited) instead of grpc-go's bare
		// Unimplemented.
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return refusal.New(refusal.PermissionDenied, "no such method")
		}),
	}, opts...)
	g := grpc.NewServer(opts...)
	coilyv1grpc.RegisterCoilyServiceServer(g, s)
	hs := health.NewServer()
	hs.SetServingStatus(coilyv1grpc.CoilyService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	return g
}

// Shutdown refuses new commands, kills every running one at once (there
// will be no one left to answer) and waits for lockout escalations to end.
// Call it before stopping the gRPC server so that Exec streams end promptly.
func (s *Server) Shutdown() {
	s.cfg.Fleet.Stop()
	s.stops.Shutdown()
	s.recorder.Close()
	s.stops.Wait()
	s.relay.Wait()
	s.bg.Wait()
	s.RemoveScratch()
}

// record writes one audit record, fsynced, and the matching log line. It is
// the one place decisions are recorded.
func (s *Server) record(ctx context.Context, r audit.Record) (audit.Record, error) {
	return s.recordWith(ctx, r, true)
}

// recordPending records like record without waiting for the fsync: the
// line is written (it survives a crash of the server) and becomes durable
// with the next fsynced record. Only the decision that precedes a command
// uses it; the command's result is recorded with an fsync before the
// caller gets its answer.
func (s *Server) recordPending(ctx context.Context, r audit.Record) (audit.Record, error) {
	return s.recordWith(ctx, r, false)
}

func (s *Server) recordWith(ctx context.Context, r audit.Record, durable bool) (audit.Record, error) {
	return s.recorder.Record(ctx, r, durable)
}
