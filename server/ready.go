package server

import (
	"context"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/sandbox"
)

// ReadyTTL is how long a readiness answer is reused: however often
// /readyz is asked, its probes (an audit file written and synced, a child
// in a user namespace, a Vault token lookup) run at most once per
// ReadyTTL.
const ReadyTTL = time.Second

// readyTimeout bounds one readiness run (a keystore that does not answer
// makes the server unready, not /readyz hang).
const readyTimeout = 5 * time.Second

// readiness remembers the last answer; mu is held while one is computed,
// so concurrent askers share it.
type readiness struct {
	mu       sync.Mutex
	at       time.Time
	problems []string
}

// Ready reports what keeps the server from serving Execs, one line per
// component ("audit: …"); none means ready. It checks that a policy is
// loaded, the state store answers a read, the audit log takes a synced
// write, every keystore backend the policy's credentials name would
// answer, and every sandbox backend its rules use could confine a command;
// and that the server is not shutting down.
//
// A lockout or a pause is a state the server is in, not unreadiness: the
// server answers (refusing commands with lockout-active, and serving
// Status and Unlock), and an orchestrator that restarted or hid an
// unready server would fight the owner's brake. They show in the
// coily_lockout_active and coily_pause_active metrics.
func (s *Server) Ready(ctx context.Context) []string {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	if !s.ready.at.IsZero() && time.Since(s.ready.at) < ReadyTTL {
		return s.ready.problems
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	s.ready.problems, s.ready.at = s.checkReady(ctx), time.Now()
	return s.ready.problems
}

func (s *Server) checkReady(ctx context.Context) []string {
	var problems []string
	add := func(component string, err error) {
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), component+": ")
			problems = append(problems, component+": "+oneLine(msg))
		}
	}
	if s.stops.Closing() {
		problems = append(problems, "server: shutting down")
	}
	pol := s.Policy()
	if pol == nil {
		return append(problems, "policy: none loaded")
	}
	_, err := s.cfg.Store.Stops()
	add("state", err)
	add("audit", s.cfg.Audit.Check())
	if b := pol.CredentialBackends(); len(b) > 0 {
		add("keystore", s.cfg.Keystore.Check(ctx, b))
	}
	for _, name := range pol.Sandboxes() {
		add("sandbox "+name, s.checkSandbox(name))
	}
	return problems
}

// checkSandbox looks the backend up and asks it, when it can tell,
// whether it could confine a command now.
func (s *Server) checkSandbox(name string) error {
	box, err := s.cfg.Sandboxes.Lookup(name)
	if err != nil {
		return err
	}
	if c, ok := box.(sandbox.Checker); ok {
		return c.Check()
	}
	return nil
}

// oneLine keeps a problem on its line of the plain-text answer.
func oneLine(s string) string {
	out := []rune(s)
	for i, r := range out {
		if r == '\n' || r == '\r' || r < ' ' || r == 0x7f {
			out[i] = ' '
		}
	}
	return string(out)
}
