// Package notary signs checkpoints of the audit log's Merkle tree (package
// audit, "Signed checkpoints") while the server runs: at start, every
// Every when records were added, after every Records records, right after
// every record that changes what the trust point admits (a lockout, a
// pause, an unlock, a resume, a policy reload, a state restore, a repair),
// and at stop. Each checkpoint goes to the state file (Config.Keep, next
// to the audit head) and to the log's checkpoint file, for witnesses.
//
// Copies go to the owner's ntfy topic and webhook through Config.Copy
// (notify.Checkpoints: every one after a stop control's record, others at
// most hourly). Other witnesses off the host (another coily host, the
// bridge's file) are not done here yet: Config.Keep and Config.Copy are
// the seams, told every checkpoint signed, in order.
package notary

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"coily.dev/coily/audit"
)

// Defaults for Config.Every and Config.Records.
const (
	DefaultEvery   = time.Minute
	DefaultRecords = 1000
)

// Config configures Start.
type Config struct {
	Log *audit.Log
	Key string // the private note key (audit.GenerateSigner); never logged
	// Trusted is the tree of the last checkpoint signed (the state
	// file's, opened with the verifier key), nil when there is none:
	// Start trusts the log's hash file up to it only
	// (audit.Log.SettleTree) before it signs.
	Trusted *audit.Tree
	// Every is the longest a new record waits for a checkpoint; 0 means
	// DefaultEvery.
	Every time.Duration
	// Records signs after this many records since the last checkpoint;
	// 0 means DefaultRecords.
	Records uint64
	// Keep records a signed checkpoint (the state file); its failure is
	// logged, and the next checkpoint tries again.
	Keep func(signed []byte, at time.Time) error
	// Copy, when set, is told every new checkpoint once it is kept;
	// stop says it was signed right after a record that changes what
	// the trust point admits (signsAfter). Copies off the host
	// (notify.Checkpoints) are sent from it; it must not block.
	Copy   func(signed []byte, stop bool)
	Logger *slog.Logger
	Now    func() time.Time // nil means time.Now
}

// Notary signs checkpoints of one log.
type Notary struct {
	cfg  Config
	poke chan struct{}
	stop chan struct{}
	done chan struct{}

	// signed is the tree size of the last checkpoint signed, read by
	// notice on every append without waiting for a signing under way.
	signed atomic.Int64
	mu     sync.Mutex // held while signing
	last   []byte
}

// Start settles the log's tree (Config.Trusted), signs a first checkpoint and begins signing in the
// background; Stop ends it. It sets the log's notify hook (audit.Log.SetNotify).
func Start(cfg Config) (*Notary, error) {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Records == 0 {
		cfg.Records = DefaultRecords
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Notary{cfg: cfg, poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	n.signed.Store(-1)
	if err := cfg.Log.SettleTree(cfg.Trusted); err != nil {
		return nil, err
	}
	if _, err := n.Sign(); err != nil {
		return nil, err
	}
	cfg.Log.SetNotify(n.notice)
	go n.run()
	return n, nil
}

// Stop signs a last checkpoint and ends the background signing.
func (n *Notary) Stop() {
	n.cfg.Log.SetNotify(nil)
	close(n.stop)
	<-n.done
	if _, err := n.Sign(); err != nil {
		n.cfg.Logger.Error("signing the audit log's last checkpoint", "err", err)
	}
}

// signsAfter are the events a checkpoint follows at once.
var signsAfter = map[string]bool{
	audit.EventLockout: true, audit.EventLockoutRemote: true, audit.EventUnlock: true, audit.EventUnlockRemote: true,
	audit.EventPause: true, audit.EventResume: true, audit.EventResumeRemote: true, audit.EventStateRestore: true,
	audit.EventRepair: true, "policy.reload": true,
}

// notice is the log's notify hook: a stop control's record is signed for
// at once (the caller waits: a witness learns of a lockout before the
// next one can be hidden), Records records wake the background signer.
func (n *Notary) notice(r audit.Record) {
	if signsAfter[r.Event] {
		if _, err := n.sign(true); err != nil {
			n.cfg.Logger.Error("signing the audit log's checkpoint", "after", r.ID, "err", err)
		}
		return
	}
	if int64(r.Seq)-n.signed.Load() >= int64(n.cfg.Records) {
		select {
		case n.poke <- struct{}{}:
		default:
		}
	}
}

func (n *Notary) run() {
	defer close(n.done)
	t := time.NewTicker(n.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.poke:
		}
		if _, err := n.Sign(); err != nil {
			n.cfg.Logger.Error("signing the audit log's checkpoint", "err", err)
		}
	}
}

// Sign signs a checkpoint of the log's durable records unless the last
// one covers them already, keeps it, and writes it to the log's
// checkpoint file. It returns the latest signed checkpoint.
func (n *Notary) Sign() ([]byte, error) { return n.sign(false) }

func (n *Notary) sign(stop bool) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	tree, err := n.cfg.Log.TreeHead()
	if err != nil {
		return nil, err
	}
	if tree.N == n.signed.Load() {
		return n.last, nil
	}
	msg, err := audit.SignCheckpoint(n.cfg.Key, tree)
	if err != nil {
		return nil, err
	}
	if n.cfg.Keep != nil {
		if err := n.cfg.Keep(msg, n.cfg.Now()); err != nil {
			return nil, fmt.Errorf("notary: keeping checkpoint %d: %w", tree.N, err)
		}
	}
	if err := audit.WriteCheckpoint(n.cfg.Log.Dir(), msg); err != nil {
		return nil, err
	}
	n.signed.Store(tree.N)
	n.last = msg
	if n.cfg.Copy != nil {
		n.cfg.Copy(msg, stop)
	}
	return msg, nil
}

// Latest is the last checkpoint signed.
func (n *Notary) Latest() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}
