package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/mod/sumdb/tlog"
	"tailscale.com/tsnet"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/stateguard"
)

// witnessPort is the tailnet port a coily host serves a witness of its
// peers' logs on (coily serve --witness-for).
const witnessPort = 7445

// witnessStartTimeout bounds the push of the first checkpoint at start.
const witnessStartTimeout = 10 * time.Second

// witnessFlags are coily serve's flags for witnesses.
type witnessFlags struct {
	push, serveFor *repeatedFlag
}

func registerWitnessFlags(fs *pflag.FlagSet) witnessFlags {
	return witnessFlags{
		push:     listFlag(fs, "witness", "COILY_WITNESSES", "push every checkpoint of the audit log to this witness, URL=VKEY: its address (http://HOST:PORT of coily witness serve, or http://PEER:7445 of a coily serve --witness-for) and the key coily witness key printed (repeatable); at start, a witness holding more than the log, or another tree, starts the server locked out"),
		serveFor: listFlag(fs, "witness-for", "COILY_WITNESS_FOR", "with --tailnet: witness a peer's audit log, ORIGIN=VKEY (what `coily audit key` prints on it), on tailnet port 7445; the state is <state-dir>/witness (repeatable)"),
	}
}

// parseWitnesses reads URL=VKEY specs.
func parseWitnesses(specs []string) ([]*witness.Client, error) {
	var out []*witness.Client
	for _, s := range specs {
		u, vkey, ok := strings.Cut(s, "=")
		p, err := url.Parse(u)
		if !ok || err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("--witness %q: want URL=VKEY, an http(s) URL", s)
		}
		if err := witness.CheckKey(vkey); err != nil {
			return nil, fmt.Errorf("--witness %q: %w", s, err)
		}
		out = append(out, &witness.Client{URL: strings.TrimSuffix(u, "/"), Key: vkey})
	}
	return out, nil
}

// witnesses push the audit log's checkpoints to the witnesses off the
// host (coily serve --witness).
type witnesses struct {
	log     *slog.Logger
	al      *audit.Log
	clients []*witness.Client
	pusher  atomic.Pointer[witness.Pusher]
	down    []string // refused at start
	// lock locks the running server out (a proven refusal while it runs).
	lock   func(ctx context.Context, reason string) error
	failed *prometheus.CounterVec
}

func newWitnesses(log *slog.Logger, al *audit.Log, clients []*witness.Client) *witnesses {
	w := &witnesses{log: log, al: al, clients: clients,
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coily_witness_push_failures_total",
			Help: "Pushes of an audit checkpoint to a witness that failed (coily serve --witness)."}, []string{"witness"})}
	for _, c := range clients {
		c.Prove = w.prove
	}
	return w
}

// prove is a consistency proof of the log's tree from old to n, from its
// hash file (checked by the witness, which holds the old root).
func (w *witnesses) prove(n, old int64) (tlog.TreeProof, error) {
	r, closer, err := audit.TreeReader(w.al.Dir())
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return tlog.ProveTree(n, old, r)
}

// pin gives the clients the log's verifier key: a witness's refusal is
// believed only with a checkpoint it signs.
func (w *witnesses) pin(vkey string) {
	for _, c := range w.clients {
		c.LogKey = vkey
	}
}

// offer hands a signed checkpoint to the pushers once they run (the
// notary's Keep: never blocks).
func (w *witnesses) offer(signed []byte) {
	if p := w.pusher.Load(); p != nil {
		p.Offer(signed)
	}
}

// atStart pushes a checkpoint of the log as it is (sign: kept nowhere,
// signed only when there are witnesses) to every witness, at once, and
// returns what the witnesses that refused it say was lost (the server
// starts locked out); a witness that does not answer does not stop the
// start (it is checked when it answers: the pushers try it again, once
// start is called).
func (w *witnesses) atStart(ctx context.Context, sign func() ([]byte, error), stateDir string) ([]stateguard.Lost, error) {
	if len(w.clients) == 0 {
		return nil, nil
	}
	signed, err := sign()
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var lost []stateguard.Lost
	var wg sync.WaitGroup
	for _, c := range w.clients {
		wg.Go(func() {
			tctx, cancel := context.WithTimeout(ctx, witnessStartTimeout)
			defer cancel()
			_, err := c.Add(tctx, signed)
			switch {
			case err == nil:
				w.log.Info("the witness took the audit log's checkpoint", "witness", c.URL, "size", c.Size())
			case witness.Refused(err):
				w.log.Error("a witness refused the audit log's checkpoint at start: the log lost or changed records it saw", "witness", c.URL, "err", err)
				mu.Lock()
				lost = append(lost, lostAt(c, err, stateDir))
				w.down = append(w.down, c.URL)
				mu.Unlock()
			default:
				w.log.Warn("the witness did not answer at start: the log is checked against it when it answers", "witness", c.URL, "err", err)
			}
		})
	}
	wg.Wait()
	return lost, nil
}

// start starts the pushers (once the server's start-up cross-check
// recorded what atStart found: a witness that refused is not recorded
// again until it takes a checkpoint) and offers them signed.
func (w *witnesses) start(signed []byte, lock func(ctx context.Context, reason string) error) {
	if len(w.clients) == 0 {
		return
	}
	w.lock = lock
	w.pusher.Store(witness.StartPusher(witness.PusherConfig{Clients: w.clients, Logger: w.log, Down: w.down,
		Failed: func(u string) { w.failed.WithLabelValues(u).Inc() }, Outage: w.outage, Recovered: w.recovered}))
	w.offer(signed)
}

// lostAt is what a witness's refusal at start says: the records lost,
// the command that shows them, and the repair.
func lostAt(c *witness.Client, err error, stateDir string) stateguard.Lost {
	d := map[string]string{"witness": c.URL}
	var ahead *witness.AheadError
	var inc *witness.InconsistentError
	var repl *witness.ReplacedError
	switch {
	case errors.As(err, &ahead):
		d["witness_size"], d["log_size"] = strconv.FormatInt(ahead.Witness, 10), strconv.FormatInt(ahead.Sent, 10)
		d["witness_root"], d["log_root"] = ahead.WitnessRoot, ahead.SentRoot
	case errors.As(err, &inc):
		d["witness_size"], d["log_size"] = strconv.FormatInt(inc.Witness, 10), strconv.FormatInt(inc.Sent, 10)
		d["witness_root"], d["log_root"] = inc.WitnessRoot, inc.SentRoot
	case errors.As(err, &repl):
		d["witness_size"], d["witness_root"], d["witness_signers"] = strconv.FormatInt(repl.Witness, 10), repl.Root, repl.Signers
		return stateguard.Lost{Details: d, Why: fmt.Sprintf("%v: coily started locked out. If the state file was lost, not replaced by someone else, "+
			"put it back from a copy; else, once the owner checked, `coily witness forget` on the witness's host and pin the new key (`coily audit key`) there, then coily unlock (docs/operations.md, \"Witnesses\")",
			strings.TrimPrefix(err.Error(), "witness: "))}
	}
	why := fmt.Sprintf("%v: coily started locked out. See what is missing or changed with `coily audit verify --state-dir %s --checkpoint %s --key KEY --witness-key %s`; "+
		"put the records back from a copy if there is one, else, once they are accounted for, `coily witness forget` on the witness's host, then coily unlock (docs/operations.md, \"Witnesses\")",
		strings.TrimPrefix(err.Error(), "witness: "), stateDir, c.URL, c.Key)
	return stateguard.Lost{Why: why, Details: d}
}

// outage records, once per outage, a witness that stopped taking the
// log's checkpoints, or refused one.
func (w *witnesses) outage(u string, err error) {
	state := "outage"
	if witness.Refused(err) {
		state = "refused"
		w.log.Error("a witness refused the audit log's checkpoint: the log lost or changed records it saw", "witness", u, "err", err)
	}
	w.record(u, state, err)
	if state == "refused" && w.lock != nil {
		if lerr := w.lock(context.Background(), lockReason(err)); lerr != nil {
			w.log.Error("locking out on a witness's refusal", "witness", u, "err", lerr)
		}
	}
}

// lockReason is a lockout's reason for a witness's proven refusal while
// the server runs (the audit.witness record before it has the details),
// within a reason's bound.
func lockReason(err error) string {
	r := "a witness refused the audit log's checkpoint: " + err.Error() + "; see docs/operations.md, \"Witnesses\""
	if len(r) > 1000 {
		r = strings.ToValidUTF8(r[:1000], "") + "…"
	}
	return r
}

func (w *witnesses) recovered(u string) {
	w.log.Info("the witness takes the audit log's checkpoints again", "witness", u)
	w.record(u, "recovered", nil)
}

func (w *witnesses) record(u, state string, err error) {
	d := map[string]string{"witness": u, "state": state}
	decision, reason := "allow", "the witness takes the audit log's checkpoints again"
	if err != nil {
		d["error"], decision, reason = err.Error(), "refuse", "a witness did not take the audit log's checkpoint"
	}
	if _, aerr := w.al.Append(context.Background(), audit.Record{Event: audit.EventWitness, Principal: access.ServerCaller.Principal,
		Transport: access.ServerCaller.Transport, Decision: decision, Reason: reason, Details: d}); aerr != nil {
		w.log.Error("auditing a witness's state", "witness", u, "err", aerr)
	}
}

// stop ends the pushers.
func (w *witnesses) stop() {
	if p := w.pusher.Load(); p != nil {
		p.Stop()
	}
}

// serveWitness serves a witness of the peers' logs (--witness-for) on
// the tailnet node's witnessPort; nil when not asked.
func serveWitness(log *slog.Logger, o serveOptions, node *tsnet.Server) (func(), error) {
	if len(o.witnessFor) == 0 {
		return func() {}, nil
	}
	if node == nil {
		return nil, errors.New("--witness-for needs --tailnet")
	}
	logs, err := parseLogs(o.witnessFor)
	if err != nil {
		return nil, fmt.Errorf("--witness-for %w", err)
	}
	dir := filepath.Join(o.stateDir, "witness")
	skey, err := witness.EnsureKey(dir, o.hostname+"/witness")
	if err != nil {
		return nil, err
	}
	vkey, err := witness.VerifierOf(skey)
	if err != nil {
		return nil, err
	}
	w, err := witness.New(witness.Config{Logs: logs, Key: skey, Dir: dir, Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := node.Listen("tcp", ":"+strconv.Itoa(witnessPort))
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("witness tailnet listener: %w", err)
	}
	hs := httpserve.New(w, witnessLimits, nil)
	go func() { _ = hs.Serve(ln) }()
	log.Info("serving a witness", "addr", net.JoinHostPort(node.Hostname, strconv.Itoa(witnessPort)), "key", vkey, "logs", len(logs))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		_ = w.Close()
	}, nil
}
