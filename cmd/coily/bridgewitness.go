package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/mod/sumdb/note"

	"coily.dev/coily/audit"
	"coily.dev/coily/audit/notary"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/bridge"
	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// bridgePullTimeout bounds one pull of the trust point's checkpoint.
const bridgePullTimeout = 15 * time.Second

// bridgeWitnessFlags are coily bridge's flags for its witness of the
// trust point's audit log (package audit/witness, "A witness that
// pulls").
type bridgeWitnessFlags struct {
	log, state        *string
	every, checkpoint *time.Duration
}

func registerBridgeWitnessFlags(fs *pflag.FlagSet) bridgeWitnessFlags {
	return bridgeWitnessFlags{
		log: stringFlag(fs, "witness-log", "COILY_BRIDGE_WITNESS_LOG", "",
			"keep a witness of the trust point's audit log on this machine: the log's verifier key, as `coily audit key` printed it on the host (pinned); the bridge pulls its latest checkpoint with a consistency proof and keeps it only if it extends the one it holds, else logs an ALARM"),
		state: stringFlag(fs, "witness-state", "COILY_BRIDGE_WITNESS_STATE", "",
			"the witness's directory: its cosigning key (made once, 0600) and the checkpoint it holds (default <user config dir>/coily/bridge-witness)"),
		every: durationFlag(fs, "witness-every", "COILY_BRIDGE_WITNESS_EVERY", witness.DefaultPullEvery,
			"with --witness-log: pull the trust point's latest audit checkpoint this often (1s to 1h)"),
		checkpoint: durationFlag(fs, "witness-checkpoint-every", "COILY_BRIDGE_WITNESS_CHECKPOINT_EVERY", notary.DefaultEvery,
			"with --witness-log: the trust point's --checkpoint-every (1s to 1h); requests the bridge relayed that its checkpoint does not show after this and --witness-every are an ALARM (a frozen log)"),
	}
}

// bridgeWitness is the witness a bridge keeps: nil when not asked.
type bridgeWitness struct {
	w      *witness.Server
	origin string
	every  time.Duration
	stale  time.Duration // how long relayed requests may go unseen

	answered atomic.Int64 // relayed requests answered by the log's host
	mu       sync.Mutex
	keeper   string // the server that answered the pinned log's checkpoint ("": one server)
}

// openBridgeWitness opens (making its key once) the witness of the log
// pinned by f.log; nil, nil without --witness-log.
func openBridgeWitness(log *slog.Logger, f bridgeWitnessFlags) (*bridgeWitness, error) {
	if *f.log == "" {
		return nil, nil
	}
	if *f.every < time.Second || *f.every > time.Hour {
		return nil, fmt.Errorf("--witness-every %v: must be between 1s and 1h", *f.every)
	}
	if *f.checkpoint < time.Second || *f.checkpoint > time.Hour {
		return nil, fmt.Errorf("--witness-checkpoint-every %v: must be between 1s and 1h", *f.checkpoint)
	}
	vkey := strings.TrimSpace(*f.log)
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("--witness-log: not a verifier key (what `coily audit key` prints): %w", err)
	}
	dir := *f.state
	if dir == "" {
		cfg, err := os.UserConfigDir()
		if err != nil {
			return nil, fmt.Errorf("--witness-state: no default: %w", err)
		}
		dir = filepath.Join(cfg, "coily", "bridge-witness")
	}
	skey, err := witness.EnsureKey(dir, witnessName(""))
	if err != nil {
		return nil, err
	}
	wkey, err := witness.VerifierOf(skey)
	if err != nil {
		return nil, err
	}
	w, err := witness.New(witness.Config{Logs: map[string]string{v.Name(): vkey}, Key: skey, Dir: dir, Logger: log})
	if err != nil {
		return nil, err
	}
	held := w.Held(v.Name())
	log.Info("witnessing the trust point's audit log", "origin", v.Name(), "state", dir, "key", wkey, "held", held.N)
	return &bridgeWitness{w: w, origin: v.Name(), every: *f.every, stale: *f.every + *f.checkpoint + bridgePullTimeout}, nil
}

// run pulls the checkpoints through api until ctx ends, then closes the
// witness.
func (b *bridgeWitness) run(ctx context.Context, log *slog.Logger, api checkpointer) (stop func()) {
	if b == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	last := b.w.Held(b.origin).N
	wg.Go(func() {
		witness.RunPuller(ctx, witness.PullerConfig{Witness: b.w, Origin: b.origin, Every: b.every, Logger: log,
			Source: b.pullSource(api), Answered: b.answered.Load, Stale: b.stale,
			Pulled: func(t audit.Tree) { // logged when it grew
				if t.N != last {
					log.Info("the witness keeps the audit checkpoint", "origin", b.origin, "size", t.N)
				}
				last = t.N
			}})
	})
	return func() {
		cancel()
		wg.Wait()
		_ = b.w.Close()
	}
}

// checkpointer is the call a bridge's witness pulls through.
type checkpointer interface {
	AuditCheckpoint(context.Context, *coilyv1.AuditCheckpointRequest) (*coilyv1.AuditCheckpointResponse, error)
}

// pullSource asks the trust point for the pinned log's latest
// checkpoint (AuditCheckpoint; with several servers, the one that keeps
// that log answers) and notes which server answered it. A permission
// refused is for good (*witness.DeniedError: the puller stops rather
// than have a refusal audited every pull).
func (b *bridgeWitness) pullSource(api checkpointer) witness.Source {
	return func(ctx context.Context, old int64) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, bridgePullTimeout)
		defer cancel()
		ctx = client.WithAnswered(ctx, func(server string) {
			b.mu.Lock()
			b.keeper = server
			b.mu.Unlock()
		})
		r, err := api.AuditCheckpoint(ctx, &coilyv1.AuditCheckpointRequest{Old: old, Origin: b.origin})
		if err != nil {
			switch refusal.FromStatus(err).Code {
			case refusal.PermissionDenied, refusal.Unauthenticated:
				return nil, &witness.DeniedError{Err: err, Hint: "the bridge's identity needs a role with the relay or audit-read permission in the trust point's policy; restart the bridge once it has one"}
			}
			return nil, err
		}
		if len(r.GetAddCheckpoint()) == 0 {
			return nil, errors.New("an empty answer")
		}
		return r.GetAddCheckpoint(), nil
	}
}

// relays wraps the calls the bridge relays through to count the
// requests the pinned log's host answered (each writes records to its
// log: the puller's freeze check). A nil witness counts nothing.
func (b *bridgeWitness) relays(api bridge.RelayAPI) bridge.RelayAPI {
	if b == nil {
		return api
	}
	return countedRelays{RelayAPI: api, b: b}
}

// countedRelays counts the relayed requests answered by the server that
// keeps the pinned log.
type countedRelays struct {
	bridge.RelayAPI
	b *bridgeWitness
}

func (c countedRelays) Relay(ctx context.Context, in *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	var by string
	r, err := c.RelayAPI.Relay(client.WithAnswered(ctx, func(server string) { by = server }), in)
	if err != nil || r.GetDuplicate() || len(r.GetResponse()) == 0 {
		return r, err
	}
	c.b.mu.Lock()
	keeper := c.b.keeper
	c.b.mu.Unlock()
	if by == keeper {
		c.b.answered.Add(1)
	}
	return r, err
}
