// Package etcdstore keeps the state that decides what runs (store.Shared)
// in etcd, so that several coily hosts serve as one trust point: the stop
// controls, the rate buckets, the sandboxes' signing keys, the relay's
// exactly-once records and nonces, the dynamic-secret leases in use, and
// the pending approvals with their decisions (approvals.Board).
//
// Every key lives under one prefix (one cluster of coily hosts), with
// these names below it (each name component path-escaped, so a principal,
// sandbox or id holding "/" cannot reach another's key):
//
//	stops/lockout, stops/pause         store.Stop
//	stops/pause.self/<principal>       store.Stop
//	rates/<bucket>                     the bucket as store.Rate.Spend writes it
//	keys/<sandbox>                     store.Key, its secret sealed (AES-256-GCM)
//	relays/<id>                        store.Relay, under a lease (kept RelayKeep)
//	nonces/<sandbox>/<nonce>           {}, under a lease (kept to the nonce's expiry)
//	leases/<id>                        store.Lease
//	slots/guard                        empty: its revision orders the takes
//	slots/held/<host>/<n>              store.Slot, under the host's lease
//	approvals/<id>/asked               a pending approval, sealed, under its own lease
//	approvals/<id>/decided             its decision, written once, under the same lease
//	hosts/<name>                       a host's claim on its name, under the claim's lease
//	migrating                          while `coily state migrate` writes: no host opens the prefix
//
// Invariants:
//   - every write that decides something is one etcd transaction that
//     compares what it read (ModRevision, or CreateRevision 0 for "none"),
//     so two hosts never both take the last token, accept one nonce or
//     issue a sandbox's first key;
//   - every call is bounded by CallTimeout; a timeout, a cluster without a
//     leader or a lost connection is an error wrapping store.ErrUnavailable,
//     never "no record";
//   - a value that cannot be decoded (or unsealed) is store.ErrCorrupt,
//     never a zero value;
//   - a sandbox's secret is sealed before it leaves the host: etcd's
//     members, snapshots and backups never hold it in clear;
//   - a concurrency slot is held by a key under its host's lease, written
//     only with a bump of the guard at the revision its caps were checked
//     at (slots.go); a host that cannot renew its lease is told (OnLost)
//     SlotFence before the lease may expire and free its slots.
package etcdstore

import (
	stdcmp "cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coily.dev/coily/store"
)

// Defaults for the Config fields left zero.
const (
	DefaultCallTimeout = 5 * time.Second
	DefaultRelayKeep   = 24 * time.Hour
	// DefaultApprovalLease is Config.ApprovalLease's default.
	DefaultApprovalLease = 10 * time.Second
)

// Config says which cluster to use and how.
type Config struct {
	Endpoints []string
	// TLS is the client's TLS configuration (the cluster's CA, and a
	// client certificate where the members require one).
	TLS                *tls.Config
	Username, Password string
	// Prefix is where this trust point's keys live, e.g. "/coily/team/".
	// It must start and end with "/".
	Prefix string
	// CallTimeout bounds every call (DefaultCallTimeout when zero).
	CallTimeout time.Duration
	// SealKey is the 32-byte AES-256-GCM key every host holds that seals
	// the sandboxes' secrets. Open refuses to start without one.
	SealKey []byte
	// AuditOnly opens the store for the audit view alone (coily audit
	// tail --fleet): no seal key, and every call on a sandbox's key
	// refused.
	AuditOnly bool
	// AuditTailBytes bounds the lines of the records one AuditTail
	// keeps, in all (DefaultAuditTailBytes when zero): the oldest are
	// left out (AuditView.Dropped).
	AuditTailBytes int
	// AuditKeep is how long a shipped audit record is kept
	// (DefaultAuditKeep when zero).
	AuditKeep time.Duration
	// RelayKeep is how long a relay record is kept (DefaultRelayKeep
	// when zero): the lease it is written under expires then.
	RelayKeep time.Duration
	// SlotTTL is the term of this host's hold on its concurrency slots
	// (DefaultSlotTTL when zero): cut off that long, its slots are freed.
	// SlotFence is how long before then it stops its commands
	// (DefaultSlotFence when zero).
	SlotTTL, SlotFence time.Duration
	// Observe, when set, hears every call to the cluster: its operation
	// (one of a fixed set: "range", "txn", "put", "watch", …, "other"), its
	// outcome (OutcomeOK, OutcomeUnavailable, OutcomeError) and how long
	// it took (a stream: to open). It must not block.
	Observe func(op, outcome string, took time.Duration)
	// ApprovalLease is the time-to-live of a pending approval's lease,
	// kept alive by the host that waits for it (DefaultApprovalLease
	// when zero): a host gone this long takes its approvals with it.
	ApprovalLease time.Duration
}

// Store is an open connection to the cluster. It implements store.Shared.
type Store struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
	keep    time.Duration
	seal    cipher.AEAD // nil: AuditOnly
	// auditOnly: opened for the audit view alone (Config.AuditOnly).
	auditOnly bool
	// approvalTTL is a pending approval's lease, in seconds.
	approvalTTL int64
	auditKeep   time.Duration
	tailBytes   int
	tailHook    func(records, bytes int) // tests: what AuditTail keeps

	leaseMu sync.Mutex
	leases  map[int64]clientv3.LeaseID // by the bucket's end, unix seconds

	// takeLocks serialise this host's Takes of one bucket (by a stripe of
	// the bucket's name): concurrent Takes of one bucket from one host
	// would only fail each other's compares, each failure a raft round.
	takeLocks [64]chan struct{}

	ledger ledger // the concurrency slots (slots.go)

	host claim // the claim on this host's name (hostclaim.go)

	// afterImportTxn, when set (tests), is called after each of Import's
	// transactions; an error cuts the import off there.
	afterImportTxn func(i int) error
}

var _ store.Shared = (*Store)(nil)

// Open connects to the cluster and reads once, so that a cluster it cannot
// reach (or that refuses its credentials) fails here.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdstore: no endpoints")
	}
	if len(cfg.Prefix) < 2 || !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("etcdstore: prefix %q must start and end with / and name something", cfg.Prefix)
	}
	aead, err := openSeal(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{
		auditKeep:   cmp(cfg.AuditKeep, DefaultAuditKeep),
		tailBytes:   stdcmp.Or(cfg.AuditTailBytes, DefaultAuditTailBytes),
		prefix:      cfg.Prefix,
		timeout:     cmp(cfg.CallTimeout, DefaultCallTimeout),
		keep:        cmp(cfg.RelayKeep, DefaultRelayKeep),
		seal:        aead,
		auditOnly:   cfg.AuditOnly,
		approvalTTL: int64(max(time.Second, cmp(cfg.ApprovalLease, DefaultApprovalLease)) / time.Second),
		leases:      map[int64]clientv3.LeaseID{},
	}
	if err := s.ledger.init(cfg); err != nil {
		return nil, err
	}
	for i := range s.takeLocks {
		s.takeLocks[i] = make(chan struct{}, 1)
	}
	var dial []grpc.DialOption
	if cfg.Observe != nil {
		dial = observeDial(cfg.Observe)
	}
	s.cli, err = clientv3.New(clientv3.Config{
		DialOptions: dial,
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: s.timeout,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, s.fail("connect", err)
	}
	if err := s.Health(ctx); err != nil {
		s.cli.Close()
		return nil, err
	}
	if !cfg.AuditOnly {
		if err := s.checkMigrating(ctx); err != nil {
			s.cli.Close()
			return nil, err
		}
	}
	return s, nil
}

// openSeal is the AEAD of the seal key; nil for an AuditOnly store.
func openSeal(cfg Config) (cipher.AEAD, error) {
	if cfg.AuditOnly && len(cfg.SealKey) == 0 {
		return nil, nil
	}
	if len(cfg.SealKey) != 32 {
		return nil, fmt.Errorf("etcdstore: the seal key is %d bytes, not 32: a sandbox's secret is never stored in clear", len(cfg.SealKey))
	}
	block, err := aes.NewCipher(cfg.SealKey)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: seal key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: seal key: %w", err)
	}
	return aead, nil
}

// errNoSeal refuses a sandbox's key on a store opened AuditOnly.
var errNoSeal = errors.New("etcdstore: opened for the audit view only: no seal key")

func cmp(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Close frees this host's concurrency slots and closes the connection.
func (s *Store) Close() error {
	s.releaseHost()
	s.closeLedger()
	return s.cli.Close()
}

// Health reads the lockout once (linearizable; an AuditOnly store: the
// audit view's hosts, all it may read): nil when the cluster answers with
// a quorum, an error wrapping store.ErrUnavailable otherwise, or while
// another process holds this host's name (claimLost).
func (s *Store) Health(ctx context.Context) error {
	if err := s.claimLost(); err != nil {
		return err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	key, opts := s.prefix+keyLockout, []clientv3.OpOption(nil)
	if s.auditOnly {
		// A reader of the audit view may read nothing else (docs/scale.md,
		// "A reader's role"): one host's name, if any.
		key, opts = s.prefix+dirAuditHosts, []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)}
	}
	if _, err := s.cli.Get(ctx, key, opts...); err != nil {
		return s.fail("health", err)
	}
	return nil
}

// call bounds one call by CallTimeout and requires a leader.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return clientv3.WithRequireLeader(ctx), cancel
}

// fail wraps err from the call op, with store.ErrUnavailable when the
// cluster could not be reached or could not decide.
func (s *Store) fail(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("etcdstore: %s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("etcdstore: %s: %w", op, err)
}

func unavailable(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrNotLeader),
		errors.Is(err, rpctypes.ErrLeaderChanged), errors.Is(err, rpctypes.ErrStopped),
		errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrTimeoutWaitAppliedIndex),
		errors.Is(err, rpctypes.ErrTooManyRequests):
		return true
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			return true
		}
	}
	return false
}

// retry runs one read-compare-write step until it commits or fails, all
// within one CallTimeout. A step returns errConflict when its compare
// failed: another client wrote what it read, so it reads again (each
// conflict is someone else's progress, so the loop ends).
func (s *Store) retry(op string, step func(ctx context.Context) error) error {
	ctx, cancel := s.call(context.Background())
	defer cancel()
	return s.retryIn(ctx, op, step)
}

// retryIn is retry within ctx.
func (s *Store) retryIn(ctx context.Context, op string, step func(ctx context.Context) error) error {
	for {
		err := step(ctx)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, errConflict):
			return s.fail(op, err)
		case ctx.Err() != nil:
			return s.fail(op, ctx.Err())
		}
	}
}
