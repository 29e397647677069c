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
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the witness refused the checkpoint of %s (it holds %d records, root %s): %s", e.Origin, e.Held.N, e.Held.Hash, e.Why)
}

// UnreachableError is a Source that did not answer: an outage, not a
// refusal.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return "the log's host did not answer: " + e.Err.Error() }

func (e *UnreachableError) Unwrap() error { return e.Err }

// Held is the tree the witness holds of origin (zero when none).
func (s *Server) Held(origin string) audit.Tree {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state[origin].Tree
}

// PullFrom asks src for origin's latest checkpoint from the size held and
// keeps it as Add does. It returns the tree held after: a
// *RefusedError when the witness refused it, an *UnreachableError when
// src failed, another error when the state could not be written.
func (s *Server) PullFrom(ctx context.Context, origin string, src Source) (audit.Tree, error) {
	held := s.Held(origin)
	body, err := src(ctx, held.N)
	if err != nil {
		return held, &UnreachableError{Err: err}
	}
	_, err = s.Add(body)
	var se *statusError
	switch {
	case errors.As(err, &se):
		return held, &RefusedError{Origin: origin, Held: held, Why: s.why(origin, held, body, se)}
	case err != nil:
		return held, err
	}
	return s.Held(origin), nil
}

// why names a refusal: a smaller tree signed by the log's key is said as
// the records it lacks.
func (s *Server) why(origin string, held audit.Tree, body []byte, se *statusError) string {
	req, err := ParseAddRequest(body)
	if err != nil {
		return se.why
	}
	vkey, ok := s.vkeys[origin]
	if !ok {
		return se.why
	}
	c, err := audit.OpenCheckpoint(req.Checkpoint, vkey)
	if err == nil && c.N < held.N {
		return fmt.Sprintf("a checkpoint of %d records, signed by the log's key: records %d to %d were removed", c.N, c.N+1, held.N)
	}
	return se.why
}

// PullerConfig configures RunPuller.
type PullerConfig struct {
	Witness *Server
	Origin  string // the log pulled
	Source  Source
	Every   time.Duration // 0 means DefaultPullEvery
	Logger  *slog.Logger
	// Refused is told of every refusal (the owner's alarm), after the
	// log line.
	Refused func(*RefusedError)
	// Pulled is told of every checkpoint kept (tests, a status).
	Pulled func(audit.Tree)
}

// DefaultPullEvery is how often a puller asks for the latest checkpoint.
const DefaultPullEvery = time.Minute

// RunPuller pulls origin's checkpoints every cfg.Every until ctx ends: a
// refusal is logged as an error every time (it names what the log lost
// or changed; the witness keeps what it held), an outage once until it
// answers again.
func RunPuller(ctx context.Context, cfg PullerConfig) {
	if cfg.Every <= 0 {
		cfg.Every = DefaultPullEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	down := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tree, err := cfg.Witness.PullFrom(ctx, cfg.Origin, cfg.Source)
		var refused *RefusedError
		var unreachable *UnreachableError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &refused):
			cfg.Logger.Error("ALARM: the witness refused the trust point's audit checkpoint: its log lost or changed records the witness saw",
				"origin", cfg.Origin, "held", refused.Held.N, "err", refused.Why)
			if cfg.Refused != nil {
				cfg.Refused(refused)
			}
		case errors.As(err, &unreachable):
			if !down {
				cfg.Logger.Warn("the witness could not pull the audit checkpoint", "origin", cfg.Origin, "err", unreachable.Err)
			}
			down = true
		case err != nil:
			cfg.Logger.Error("the witness could not keep the audit checkpoint", "origin", cfg.Origin, "err", err)
		default:
			if down {
				cfg.Logger.Info("the witness pulls the audit checkpoint again", "origin", cfg.Origin)
			}
			down = false
			cfg.Logger.Debug("the witness keeps the audit checkpoint", "origin", cfg.Origin, "size", tree.N)
			if cfg.Pulled != nil {
				cfg.Pulled(tree)
			}
		}
		t.Reset(cfg.Every)
	}
}
