package access

import (
	"context"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// Transports a caller can arrive on.
const (
	// TransportLocal is the local socket's (peer credentials).
	TransportLocal = "local"
	// TransportTailnet is the tailnet node's (WhoIs).
	TransportTailnet = "tailnet"
	// TransportWeb is the web console's: callers identified over the
	// tailnet, through the console.
	TransportWeb = "web"
)

// Caller is the identity the server established for a request.
type Caller struct {
	// Principal names the caller in policy and audit, e.g. "local:alice".
	Principal string
	Transport string
	// Peer is transport detail for the audit log, e.g. "uid=1000 pid=42".
	Peer string
	// Aliases are further names the caller answers to (a tailnet node's
	// other tags).
	Aliases []string
	// Roles are the roles the transport itself gives (local operators get
	// policy.OperatorRole, and nothing else gives any); the policy's grants
	// add more.
	Roles []string
	// CapRoles are roles a tailnet app capability grants (never the
	// operator role or unlock: see policy.Subject).
	CapRoles []string
	// Commands are rule names a tailnet app capability grants.
	Commands []string
	// RelayID is the id of the relayed request the call came in, for the
	// audit; empty for every other transport.
	RelayID string
}

// ServerCaller is the server itself, when it acts on its own (a lockout
// after a workspace it cannot check, a policy reload, a restored state).
// No tailnet identity may take its name (checkTailnetNames).
var ServerCaller = Caller{Principal: "coily", Transport: "server"}

// Subject is the caller as the policy sees it.
func (c Caller) Subject() policy.Subject {
	return policy.Subject{Principal: c.Principal, Aliases: c.Aliases, Roles: c.Roles, CapRoles: c.CapRoles, Commands: c.Commands}
}

// CallerRecord starts the audit record of a call by c: the one way every
// record but an execution's and a flood's summary is built.
func CallerRecord(c Caller, method, event, reason string) audit.Record {
	return audit.Record{Event: event, Method: method, Principal: c.Principal, Transport: c.Transport,
		Peer: c.Peer, Reason: reason, RelayID: c.RelayID}
}

type relayedKey struct{}

// WithRelayed returns ctx carrying c, the caller of a request relayed
// from a sandbox's folder whose signature the server verified (package
// relay): Admit identifies an HTTP action (the git proxy's) in that
// context as c. Only the server's relay sets it; no listener's context
// carries it.
func WithRelayed(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, relayedKey{}, c)
}

type callerKey struct{}

// call is what admission established for one call: who calls, and the
// policy in force when it was decided. The handler decides under the
// same policy, so a reload never splits one request across two.
type call struct {
	caller Caller
	policy *policy.Policy
}

// WithCall returns ctx carrying the admitted caller c and the policy pol
// it was admitted under.
func WithCall(ctx context.Context, c Caller, pol *policy.Policy) context.Context {
	return context.WithValue(ctx, callerKey{}, call{caller: c, policy: pol})
}

// CallerFrom returns the caller admission established. Handlers only run
// behind admission, so a missing caller is a programming error that must
// refuse rather than proceed.
func CallerFrom(ctx context.Context) (Caller, error) {
	c, ok := ctx.Value(callerKey{}).(call)
	if !ok || c.caller.Principal == "" {
		return Caller{}, refusal.New(refusal.Unauthenticated, "caller not identified")
	}
	return c.caller, nil
}

// PolicyFrom returns the policy the call was admitted under, nil when
// none was recorded.
func PolicyFrom(ctx context.Context) *policy.Policy {
	if c, ok := ctx.Value(callerKey{}).(call); ok {
		return c.policy
	}
	return nil
}
