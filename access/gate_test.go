package access

import (
	"context"
	"sync"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// tablePolicy gives each caller class of the matrix its roles.
const tablePolicy = `version: 1
local_operators:
  users: [alice]
  groups: [coily-ops]
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve, relay, keys, audit-read, metrics]
    commands: ["*"]
    sandboxes: ["*"]
  bridge:
    permissions: [relay]
    sandboxes: [demo]
  agent:
    permissions: [exec, pause]
    commands: [echo]
  watcher:
    permissions: [status, metrics]
  auditor:
    permissions: [audit-read]
grants:
  - principals: ["tag:agent", "tag:ci-*"]
    roles: [agent]
  - principals: ["tag:watch"]
    roles: [watcher]
  - principals: ["tag:bridge"]
    roles: [bridge]
  - principals: ["tag:audit"]
    roles: [auditor]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native}
`

// The host's users, as the local socket's transport resolves them.
var hostUsers = map[int]struct {
	name   string
	groups []string
}{
	0:    {"root", []string{"root"}},
	1000: {"coily", []string{"coily"}},
	1001: {"alice", []string{"alice"}},
	1002: {"bob", []string{"bob", "coily-ops"}},
	1003: {"mallory", []string{"mallory", "users"}},
}

// localAt is the peer of a local-socket connection from uid.
func localAt(uid int) localPeer {
	p := localPeer{UID: uid, PID: 42}
	if u, ok := hostUsers[uid]; ok {
		p.User, p.Groups = u.name, u.groups
	} else {
		p.LookupErr = refusal.New(refusal.Internal, "unknown uid %d", uid)
	}
	return p
}

// testGate is a gate under a policy, its lockout a switch, its audit log
// a list.
type testGate struct {
	*Gate
	pol *policy.Policy

	mu      sync.Mutex
	locked  bool
	records []audit.Record
}

func newTestGate(t *testing.T, policyYAML string) *testGate {
	t.Helper()
	pol, err := policy.Parse("policy.yaml", []byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	g := &testGate{pol: pol}
	g.Gate = New(Config{ServerUID: 1000, Policy: func() *policy.Policy { return g.pol },
		Locked: func() error {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.locked {
				return refusal.New(refusal.LockoutActive, "locked out")
			}
			return nil
		},
		Record: func(_ context.Context, r audit.Record) (audit.Record, error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.records = append(g.records, r)
			r.ID = "rec-" + string(rune('a'+len(g.records)))
			return r, nil
		}})
	return g
}

// last is the last record written.
func (g *testGate) last(t *testing.T) audit.Record {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.records) == 0 {
		t.Fatal("nothing audited")
	}
	return g.records[len(g.records)-1]
}
