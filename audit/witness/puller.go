package witness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"coily.dev/coily/audit"
)

// A witness that pulls: where the witness cannot be reached by the log's
// host (the bridge on the owner's machine, which listens on nothing), it
// asks the host for the log's latest checkpoint as an add-checkpoint body
// for the size it holds (the AuditCheckpoint call, AnswerPull) and hands
// that body, untrusted, to Add: the same checks and the same state as a
// witness the host pushes to.

// Source answers the log's latest checkpoint as an add-checkpoint request
// body for a witness holding old records (untrusted).
type Source func(ctx context.Context, old int64) ([]byte, error)

// RefusedError is a checkpoint the witness refused: the log lost records
// it saw (a smaller tree), changed them (another root, a proof that does
// not verify), or the answer is not a checkpoint of the log pinned.
type RefusedError struct {
	Origin string
	Held   audit.Tree // what the witness holds (kept)
	Why    string
	// Signed: the checkpoint refused is signed by the log's key (the
	// log's host says it lost or changed records: the owner's alarm).
	// Else the answer is not the log's word (another key, malformed).
	Signed bool
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the witness refused the checkpoint of %s (it holds %d records, root %s): %s", e.Origin, e.Held.N, e.Held.Hash, e.Why)
}

// UnreachableError is a Source that did not answer, or answered another
// log's checkpoint (a server of the fleet that keeps its own log): an
// outage, not a refusal.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return "the log's host did not answer: " + e.Err.Error() }

func (e *UnreachableError) Unwrap() error { return e.Err }

// DeniedError is a Source the log's host refuses for good (the caller
// lacks a permission): pulling again would only be refused again. Hint
// says what would let it pull.
type DeniedError struct {
	Err  error
	Hint string
}

func (e *DeniedError) Error() string { return e.Err.Error() + " (" + e.Hint + ")" }

func (e *DeniedError) Unwrap() error { return e.Err }

// Held is the tree the witness holds of origin (zero when none).
func (s *Server) Held(origin string) audit.Tree {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state[origin].Tree
}

// PullFrom asks src for origin's latest checkpoint from the size held and
// keeps it as Add does. It returns the tree held after: a
// *RefusedError when the witness refused it, an *UnreachableError when
// src failed or answered another log's checkpoint, another error when the
// state could not be written.
func (s *Server) PullFrom(ctx context.Context, origin string, src Source) (audit.Tree, error) {
	held := s.Held(origin)
	body, err := src(ctx, held.N)
	if err != nil {
		return held, &UnreachableError{Err: err}
	}
	if o, ok := bodyOrigin(body); ok && o != origin {
		return held, &UnreachableError{Err: fmt.Errorf("the server answered the checkpoint of another log, %q", o)}
	}
	_, err = s.Add(body)
	var se *statusError
	switch {
	case errors.As(err, &se):
		why, signed := s.why(origin, held, body, se)
		return held, &RefusedError{Origin: origin, Held: held, Why: why, Signed: signed}
	case err != nil:
		return held, err
	}
	return s.Held(origin), nil
}

// bodyOrigin is the origin of an add-checkpoint body's checkpoint, when
// it parses.
func bodyOrigin(body []byte) (string, bool) {
	req, err := ParseAddRequest(body)
	if err != nil {
		return "", false
	}
	c, err := audit.ParseCheckpoint(noteTextOf(req.Checkpoint))
	if err != nil {
		return "", false
	}
	return c.Origin, true
}

// why names a refusal and says whether the checkpoint refused is signed
// by the log's key: a smaller tree so signed is said as the records it
// lacks.
func (s *Server) why(origin string, held audit.Tree, body []byte, se *statusError) (string, bool) {
	req, err := ParseAddRequest(body)
	if err != nil {
		return se.why, false
	}
	vkey, ok := s.vkeys[origin]
	if !ok {
		return se.why, false
	}
	c, err := audit.OpenCheckpoint(req.Checkpoint, vkey)
	if err != nil {
		return se.why, false
	}
	if c.N < held.N {
		return fmt.Sprintf("a checkpoint of %d records, signed by the log's key: records %d to %d were removed", c.N, c.N+1, held.N), true
	}
	return se.why, true
}

// PullerConfig configures RunPuller.
type PullerConfig struct {
	Witness *Server
	Origin  string // the log pulled
	Source  Source
	Every   time.Duration // 0 means DefaultPullEvery
	Logger  *slog.Logger
	// Refused is told of every refusal of a checkpoint signed by the
	// log's key (the owner's alarm), after the log line.
	Refused func(*RefusedError)
	// Pulled is told of every checkpoint kept (tests, a status).
	Pulled func(audit.Tree)

	// Answered counts the requests the log's host answered so far that
	// each wrote records to the log pinned (the bridge's relayed
	// requests); nil: no freeze check. A host that answers them while
	// its checkpoint does not grow for Stale hides them (a frozen log).
	Answered func() int64
	// Stale is how long answered requests may go unseen in a checkpoint:
	// at least Every plus the host's checkpoint interval
	// (notary.Config.Every). 0 means Every + DefaultStaleSlack.
	Stale time.Duration
	// Frozen is told of every freeze ALARM: the requests answered since
	// the tree last grew (tests, a status).
	Frozen func(answered int64)

	now func() time.Time // time.Now; tests set it
}

// DefaultPullEvery is how often a puller asks for the latest checkpoint.
const DefaultPullEvery = time.Minute

// DefaultStaleSlack is what PullerConfig.Stale adds to Every by default:
// the host's default checkpoint interval (notary.DefaultEvery) and a
// minute's slack.
const DefaultStaleSlack = 2 * time.Minute

// RunPuller pulls origin's checkpoints every cfg.Every until ctx ends: a
// refusal of a checkpoint signed by the log's key is logged as an ALARM
// every time (it names what the log lost or changed; the witness keeps
// what it held), an answer that is not the log's word as an error, an
// outage once until it answers again, a tree that does not grow though
// the host answered requests (cfg.Answered) for cfg.Stale as an ALARM
// every pull. A host that refuses the witness for good (*DeniedError)
// stops it, logged once.
func RunPuller(ctx context.Context, cfg PullerConfig) {
	if cfg.Every <= 0 {
		cfg.Every = DefaultPullEvery
	}
	if cfg.Stale <= 0 {
		cfg.Stale = cfg.Every + DefaultStaleSlack
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	p := &puller{cfg: cfg, grown: cfg.Witness.Held(cfg.Origin).N}
	if cfg.Answered != nil {
		p.base = cfg.Answered()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tree, err := cfg.Witness.PullFrom(ctx, cfg.Origin, cfg.Source)
		if ctx.Err() != nil || !p.report(tree, err) {
			return
		}
		p.freeze(cfg.Witness.Held(cfg.Origin))
		t.Reset(cfg.Every)
	}
}

// puller is RunPuller's state between pulls.
type puller struct {
	cfg  PullerConfig
	down bool // the last pull found the host unreachable

	grown int64     // the size held when it last grew
	base  int64     // Answered when it last grew
	since time.Time // the first pull that saw requests answered after base
}

// report logs one pull's outcome; false stops the puller.
func (p *puller) report(tree audit.Tree, err error) bool {
	cfg := p.cfg
	var refused *RefusedError
	var unreachable *UnreachableError
	var denied *DeniedError
	switch {
	case errors.As(err, &denied) && cfg.Witness.Held(cfg.Origin).N == 0:
		cfg.Logger.Error("the witness stops pulling the audit checkpoint: the trust point refuses it",
			"origin", cfg.Origin, "err", denied.Err, "needs", denied.Hint)
		return false
	case errors.As(err, &denied):
		// It gave a checkpoint before: refusing one now is what a host
		// hiding records would do to switch its witness off. Keep
		// pulling, and keep checking for a frozen log.
		cfg.Logger.Error("ALARM: the trust point now refuses the witness the audit checkpoint it gave before",
			"origin", cfg.Origin, "held", cfg.Witness.Held(cfg.Origin).N, "err", denied.Err)
	case errors.As(err, &refused) && refused.Signed:
		cfg.Logger.Error("ALARM: the witness refused the trust point's audit checkpoint: its log lost or changed records the witness saw",
			"origin", cfg.Origin, "held", refused.Held.N, "err", refused.Why)
		if cfg.Refused != nil {
			cfg.Refused(refused)
		}
	case errors.As(err, &refused):
		cfg.Logger.Error("the witness refused an answer that is not a checkpoint signed by the log's key (not proof of lost records; it keeps what it held)",
			"origin", cfg.Origin, "held", refused.Held.N, "err", refused.Why)
	case errors.As(err, &unreachable):
		if !p.down {
			cfg.Logger.Warn("the witness could not pull the audit checkpoint", "origin", cfg.Origin, "err", unreachable.Err)
		}
		p.down = true
	case err != nil:
		cfg.Logger.Error("the witness could not keep the audit checkpoint", "origin", cfg.Origin, "err", err)
	default:
		if p.down {
			cfg.Logger.Info("the witness pulls the audit checkpoint again", "origin", cfg.Origin)
		}
		p.down = false
		cfg.Logger.Debug("the witness keeps the audit checkpoint", "origin", cfg.Origin, "size", tree.N)
		if cfg.Pulled != nil {
			cfg.Pulled(tree)
		}
	}
	return true
}

// freeze raises the ALARM when the host answered requests that write
// records (cfg.Answered) for cfg.Stale while the tree held did not grow:
// a host that keeps answering the checkpoint the witness holds hides
// every record after it.
func (p *puller) freeze(held audit.Tree) {
	cfg := p.cfg
	if cfg.Answered == nil {
		return
	}
	n := cfg.Answered()
	if held.N != p.grown {
		p.grown, p.base, p.since = held.N, n, time.Time{}
		return
	}
	if n <= p.base {
		return
	}
	now := cfg.now()
	if p.since.IsZero() {
		p.since = now
	}
	if now.Sub(p.since) < cfg.Stale {
		return
	}
	cfg.Logger.Error("ALARM: the trust point's log did not grow though it answered requests that write records: it hides them (a frozen log)",
		"origin", cfg.Origin, "answered", n-p.base, "held", held.N, "since", p.since.UTC().Format(time.RFC3339))
	if cfg.Frozen != nil {
		cfg.Frozen(n - p.base)
	}
}
