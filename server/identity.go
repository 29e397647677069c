package server

import (
	"context"
	"fmt"
	"os/user"
	"strconv"

	"google.golang.org/grpc/peer"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// Transports a caller can arrive on.
const (
	TransportLocal = "local"
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
}

// Subject is the caller as the policy sees it.
func (c Caller) Subject() policy.Subject {
	return policy.Subject{Principal: c.Principal, Aliases: c.Aliases, Roles: c.Roles, CapRoles: c.CapRoles, Commands: c.Commands}
}

type callerKey struct{}

// call is what the interceptor established for one call: who calls, and
// the policy in force when it was decided. The handler decides under the
// same policy, so a reload never splits one request across two.
type call struct {
	caller Caller
	policy *policy.Policy
}

func withCall(ctx context.Context, c Caller, pol *policy.Policy) context.Context {
	return context.WithValue(ctx, callerKey{}, call{caller: c, policy: pol})
}

// callerFrom returns the caller the interceptor established. Handlers only
// run behind the interceptor, so a missing caller is a programming error
// that must refuse rather than proceed.
func callerFrom(ctx context.Context) (Caller, error) {
	c, ok := ctx.Value(callerKey{}).(call)
	if !ok || c.caller.Principal == "" {
		return Caller{}, refusal.New(refusal.Unauthenticated, "caller not identified")
	}
	return c.caller, nil
}

// policyFrom returns the policy the call was admitted under (the policy in
// force when none was recorded).
func (s *Server) policyFrom(ctx context.Context) *policy.Policy {
	if c, ok := ctx.Value(callerKey{}).(call); ok && c.policy != nil {
		return c.policy
	}
	return s.Policy()
}

// UserLookup resolves a uid to a user name and its group names.
type UserLookup interface {
	LookupUID(uid int) (name string, groups []string, err error)
}

type hostUsers struct{}

func (hostUsers) LookupUID(uid int) (string, []string, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", nil, err
	}
	gids, err := u.GroupIds()
	if err != nil {
		return u.Username, nil, nil
	}
	var groups []string
	for _, gid := range gids {
		if g, err := user.LookupGroupId(gid); err == nil {
			groups = append(groups, g.Name)
		}
	}
	return u.Username, groups, nil
}

// identify establishes who is calling from what the transport vouched for.
// It returns the caller (with Peer filled even on refusal, for the audit)
// and a refusal when the caller cannot be identified.
func (s *Server) identify(ctx context.Context, pol *policy.Policy) (Caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Caller{}, refusal.New(refusal.Unauthenticated, "no peer information")
	}
	switch ai := p.AuthInfo.(type) {
	case localPeer:
		return s.identifyLocal(ai, pol)
	default:
		return s.identifyTailnet(ctx, p.Addr.String())
	}
}

// identifyLocal maps a local-socket peer to a principal. The server's own
// uid, root, and the users and groups the policy names are local operators;
// anyone else is refused.
func (s *Server) identifyLocal(p localPeer, pol *policy.Policy) (Caller, error) {
	c := Caller{Transport: TransportLocal, Peer: fmt.Sprintf("uid=%d pid=%d", p.UID, p.PID)}
	name, groups, err := p.User, p.Groups, p.LookupErr
	privileged := p.UID == s.cfg.ServerUID || p.UID == 0
	switch {
	case err != nil && !privileged:
		return c, refusal.Wrap(refusal.Unauthenticated, err, "uid %d is not a local operator", p.UID)
	case err != nil:
		name = "uid-" + strconv.Itoa(p.UID)
	}
	if !privileged && !pol.LocalOperator(name, groups) {
		return c, refusal.New(refusal.Unauthenticated, "uid %d (%s) is not a local operator", p.UID, name)
	}
	c.Principal = "local:" + name
	c.Roles = []string{policy.OperatorRole}
	return c, nil
}
