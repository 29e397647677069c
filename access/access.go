// Package access decides who is calling and what they may do, for every
// way in: gRPC calls on the local socket and the tailnet, the web
// console's requests and the operations endpoints.
//
// One Exec, or any other request, is admitted by Gate.Admit: the caller is
// identified by what its transport vouched for (the kernel's peer
// credentials on the local socket, WhoIs on the tailnet, the verified
// signature of a request relayed from a sandbox's folder), never by
// anything it says; the action is looked up in the one authorization
// table (table.go) and the caller must hold one of its permissions under
// the policy in force; a lockout refuses the actions the table says it
// refuses. A refusal is audited where it is decided (Gate.Refuse).
//
// Invariants:
//   - an unidentifiable caller is refused with unauthenticated, never
//     treated as anonymous;
//   - an action absent from the table is refused (default deny);
//   - one policy decides the whole request: admission records it in the
//     context (WithCall), and the handler decides under it (PolicyFrom);
//   - every refusal is written to the audit log before the caller hears
//     of it, and a failed write refuses with internal.
//
// The local socket is made here too (ListenLocal): its mode keeps other
// users from connecting, and the peer credentials decide who is served.
//
// Access does not own the lockout: the server's stop state is asked
// through Config.Locked, and Exec checks it itself, atomically with its
// job's admission.
package access

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc/peer"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// Config holds a Gate's collaborators; all but WhoIs and Log are
// required.
type Config struct {
	// ServerUID is the uid the server runs as (a local operator by right).
	ServerUID int
	// WhoIs identifies callers on other listeners (the tailnet); nil
	// means such callers are refused.
	WhoIs WhoIsFunc
	// Policy returns the policy in force.
	Policy func() *policy.Policy
	// Locked returns the lockout's refusal while one is in force, else
	// nil.
	Locked func() error
	// Record writes one audit record, durably, and returns it as written.
	Record func(context.Context, audit.Record) (audit.Record, error)
	Now    func() time.Time
	Log    *slog.Logger
}

// Gate admits requests: identity, the table, the lockout, and the audited
// refusal.
type Gate struct {
	cfg   Config
	log   *slog.Logger
	whois whoisCache
}

// New returns a gate under cfg.
func New(cfg Config) *Gate {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Gate{cfg: cfg, log: cfg.Log}
}

// An Action is one request to admit: what it asks (its entry in the
// table), its name in the audit, and where its caller is identified.
type Action struct {
	rule   string // the table's key
	method string // in the audit
	// http: the caller is the tailnet peer at remote (WhoIs); else the
	// gRPC peer in the context.
	http   bool
	remote string
	// transport, when set, replaces the caller's (the console's callers
	// are identified over the tailnet, and recorded as "web").
	transport string
	unknown   bool // a console action the table does not name
}

// Call is a gRPC call of method (its full name); the caller is the peer
// in the call's context.
func Call(method string) Action { return Action{rule: method, method: method} }

// Web is the console's action a for the tailnet peer at remote.
func Web(remote string, a WebAction) Action {
	rule, known := webActions[a]
	return Action{rule: rule, method: rule, http: true, remote: remote, transport: TransportWeb, unknown: !known}
}

// Ops is a request to the operations endpoints from the tailnet peer at
// remote; method names it in the audit ("http:/metrics").
func Ops(remote, method string) Action {
	return Action{rule: OpsEndpoints, method: method, http: true, remote: remote}
}

// Git is a git proxy request (GitMethodFetch or GitMethodPush) from the
// peer at remote: the local socket's peer when the connection carried
// its credentials (LocalConnContext), else the tailnet peer (WhoIs).
func Git(remote, method string) Action {
	return Action{rule: method, method: method, http: true, remote: remote}
}

// Admit identifies the caller of a, authorizes a against the table under
// the policy in force, and refuses it under a lockout if the table says
// so. A refusal is audited here, where it is decided. The context
// returned carries the caller and the policy (CallerFrom, PolicyFrom).
func (g *Gate) Admit(ctx context.Context, a Action) (context.Context, error) {
	pol := g.cfg.Policy() // one policy for the whole request
	c, err := g.identify(ctx, a, pol)
	method := a.method
	if err == nil {
		method, err = authorize(c, a, pol)
	}
	if rule, _ := Lookup(a.rule); err == nil && rule.Locked == RefusedWhileLocked {
		err = g.cfg.Locked()
	}
	if err != nil {
		return nil, g.Refuse(ctx, c, method, err)
	}
	return WithCall(ctx, c, pol), nil
}

// Refuse audits a request refused before its handler ran (as event
// "call", method naming it) and returns the refusal with the record's id.
func (g *Gate) Refuse(ctx context.Context, c Caller, method string, err error) error {
	r := refusal.As(err)
	rec := CallerRecord(c, method, "call", r.Msg)
	rec.Decision, rec.Code = "refuse", string(r.Code)
	out, auditErr := g.cfg.Record(ctx, rec)
	if auditErr != nil {
		return refusal.Wrap(refusal.Internal, auditErr, "audit log unavailable")
	}
	return refusal.WithAudit(err, out.ID)
}

// identify establishes who is calling from what the transport vouched for.
// It returns the caller (with Peer filled even on refusal, for the audit)
// and a refusal when the caller cannot be identified.
func (g *Gate) identify(ctx context.Context, a Action, pol *policy.Policy) (Caller, error) {
	if c, ok := ctx.Value(relayedKey{}).(Caller); ok && a.http {
		return c, nil
	}
	if lp, ok := ctx.Value(localConnKey{}).(localPeer); ok && a.http {
		return g.identifyLocal(lp, pol)
	}
	if a.http {
		c, err := g.Tailnet(ctx, a.remote)
		if a.transport != "" {
			c.Transport = a.transport
		}
		return c, err
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Caller{}, refusal.New(refusal.Unauthenticated, "no peer information")
	}
	switch ai := p.AuthInfo.(type) {
	case localPeer:
		return g.identifyLocal(ai, pol)
	default:
		return g.Tailnet(ctx, p.Addr.String())
	}
}

// authorize checks the caller against a's table entry, under pol. It
// returns a's name in the audit: an unknown console action is named
// web:unknown once its caller is known.
func authorize(c Caller, a Action, pol *policy.Policy) (string, error) {
	if a.unknown {
		return "web:unknown", refusal.New(refusal.PermissionDenied, "no such console action")
	}
	rule, ok := Lookup(a.rule)
	if !ok {
		return a.method, refusal.New(refusal.PermissionDenied, "method %s is not served", a.method)
	}
	have := pol.Permissions(c.Subject())
	for _, p := range rule.Need {
		if (p == AnyPermission && len(have) > 0) || slices.Contains(have, p) {
			return a.method, nil
		}
	}
	if rule.Denied != "" {
		return a.method, refusal.New(refusal.PermissionDenied, rule.Denied, c.Principal)
	}
	return a.method, refusal.New(refusal.PermissionDenied, "%s may not call %s", c.Principal, shortMethod(a.method))
}

// shortMethod is a full gRPC method name's last element ("Exec").
func shortMethod(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}
