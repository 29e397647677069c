package access

import (
	"fmt"
	"os/user"
	"strconv"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// UserLookup resolves a uid to a user name and its group names.
type UserLookup interface {
	LookupUID(uid int) (name string, groups []string, err error)
}

// HostUsers is the host's user database.
type HostUsers struct{}

// LookupUID implements UserLookup.
func (HostUsers) LookupUID(uid int) (string, []string, error) {
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

// identifyLocal maps a local-socket peer to a principal. The server's own
// uid, root, and the users and groups the policy names are local operators;
// anyone else is refused.
func (g *Gate) identifyLocal(p localPeer, pol *policy.Policy) (Caller, error) {
	c := Caller{Transport: TransportLocal, Peer: fmt.Sprintf("uid=%d pid=%d", p.UID, p.PID)}
	name, groups, err := p.User, p.Groups, p.LookupErr
	privileged := p.UID == g.cfg.ServerUID || p.UID == 0
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
