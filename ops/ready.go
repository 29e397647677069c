package ops

import (
	"context"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/store"
)

// ReadyTTL is how long a readiness answer is reused: however often
// /readyz is asked, its probes (an audit file written and synced, a child
// in a user namespace, a Vault token lookup) run at most once per
// ReadyTTL.
const ReadyTTL = time.Second

// readyTimeout bounds one readiness run (a keystore that does not answer
// makes the server unready, not /readyz hang).
const readyTimeout = 5 * time.Second

// Components are what a readiness run checks: the server's own.
type Components struct {
	// Closing reports the server shutting down.
	Closing func() bool
	// Unavailable is the refusal in force while the state several hosts
	// share is out of reach (nil: none, or one host).
	Unavailable func() error
	// Policy returns the policy in force.
	Policy    func() *policy.Policy
	Store     store.Shared
	Audit     *audit.Log
	Keystore  *keystore.Keystore
	Sandboxes sandbox.Registry
}

// Readiness checks one server's components and remembers the last
// answer; mu is held while one is computed, so concurrent askers (every
// listener's /readyz) share it.
type Readiness struct {
	c        Components
	mu       sync.Mutex
	at       time.Time
	problems []string
}

// NewReadiness returns the readiness of the server made of c.
func NewReadiness(c Components) *Readiness { return &Readiness{c: c} }

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
func (rd *Readiness) Ready(ctx context.Context) []string {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.at.IsZero() && time.Since(rd.at) < ReadyTTL {
		return rd.problems
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	rd.problems, rd.at = rd.check(ctx), time.Now()
	return rd.problems
}

func (rd *Readiness) check(ctx context.Context) []string {
	var problems []string
	add := func(component string, err error) {
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), component+": ")
			problems = append(problems, component+": "+oneLine(msg))
		}
	}
	if rd.c.Closing() {
		problems = append(problems, "server: shutting down")
	}
	pol := rd.c.Policy()
	if pol == nil {
		return append(problems, "policy: none loaded")
	}
	_, err := rd.c.Store.Stops()
	add("state", err)
	if rd.c.Unavailable != nil {
		add("shared state", rd.c.Unavailable())
	}
	add("audit", rd.c.Audit.Check())
	if b := pol.CredentialBackends(); len(b) > 0 {
		add("keystore", rd.c.Keystore.Check(ctx, b))
	}
	for _, name := range pol.Sandboxes() {
		add("sandbox "+name, rd.checkSandbox(name))
	}
	return problems
}

// checkSandbox looks the backend up and asks it, when it can tell,
// whether it could confine a command now.
func (rd *Readiness) checkSandbox(name string) error {
	box, err := rd.c.Sandboxes.Lookup(name)
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
