package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

const matrixPolicy = `version: 1
local_operators:
  users: [alice]
  groups: [coily-ops]
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve, relay, keys]
    commands: ["*"]
    sandboxes: ["*"]
  bridge:
    permissions: [relay]
    sandboxes: [demo]
  agent:
    permissions: [exec, pause]
    commands: [echo]
  watcher:
    permissions: [status]
grants:
  - principals: ["tag:agent", "tag:ci-*"]
    roles: [agent]
  - principals: ["tag:watch"]
    roles: [watcher]
  - principals: ["tag:bridge"]
    roles: [bridge]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native}
`

// fakeUsers is the host's user database, as a unit-level seam.
type fakeUsers map[int]struct {
	name   string
	groups []string
}

func (f fakeUsers) LookupUID(uid int) (string, []string, error) {
	u, ok := f[uid]
	if !ok {
		return "", nil, fmt.Errorf("unknown uid %d", uid)
	}
	return u.name, u.groups, nil
}

func newUnitServer(t *testing.T, policyYAML string) *Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "coily.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	al, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	s, err := New(Config{Policy: pol, Store: db, Audit: al, ServerUID: 1000, Users: fakeUsers{
		0:    {"root", []string{"root"}},
		1000: {"coily", []string{"coily"}},
		1001: {"alice", []string{"alice"}},
		1002: {"bob", []string{"bob", "coily-ops"}},
		1003: {"mallory", []string{"mallory", "users"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown) // before the audit log closes (cleanups run last first)
	return s
}

// servedMethods lists every method of every service the gRPC server
// registers, as full method names.
func servedMethods(s *Server) []string {
	g := s.GRPCServer()
	defer g.Stop()
	var out []string
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			out = append(out, "/"+svc+"/"+m.Name)
		}
	}
	sort.Strings(out)
	return out
}

// A caller class is how a caller arrives: by uid on the local socket, or as
// an already-identified principal (as the tailnet transport will produce).
type callerClass struct {
	name  string
	uid   int    // local socket peer, when principal is empty
	as    string // identified principal, bypassing the transport
	allow []string
}

var (
	everything  = []string{"*"}
	healthRefl  = []string{"Check", "Watch", "List", "ServerReflectionInfo"}
	agentMethod = append([]string{"Exec", "Pause", "Status", "ListCommands"}, healthRefl...)
	watchMethod = append([]string{"Status"}, healthRefl...)
	bridgeMeth  = append([]string{"Relay", "RelayTeardown"}, healthRefl...)
)

func TestAuthorizationMatrix(t *testing.T) {
	s := newUnitServer(t, matrixPolicy)
	classes := []callerClass{
		{name: "root", uid: 0, allow: everything},
		{name: "server user", uid: 1000, allow: everything},
		{name: "operator by name", uid: 1001, allow: everything},
		{name: "operator by group", uid: 1002, allow: everything},
		{name: "other local user", uid: 1003},
		{name: "unknown uid", uid: 4242},
		{name: "tagged agent", as: "tag:agent", allow: agentMethod},
		{name: "agent by glob", as: "tag:ci-runner", allow: agentMethod},
		{name: "status only", as: "tag:watch", allow: watchMethod},
		{name: "bridge", as: "tag:bridge", allow: bridgeMeth},
		{name: "principal with no grant", as: "alice@example.com"},
	}
	methods := servedMethods(s)
	if len(methods) < 6 {
		t.Fatalf("only %d methods served: %v", len(methods), methods)
	}
	for _, m := range methods {
		if _, ok := methodPermissions[m]; !ok {
			t.Errorf("method %s has no entry in the authorization table (it is refused; add an expectation)", m)
		}
	}
	for m := range methodPermissions {
		if !slices.Contains(methods, m) {
			t.Errorf("authorization table names %s, which is not served", m)
		}
	}
	for _, c := range classes {
		for _, m := range methods {
			t.Run(c.name+shortMethod(m), func(t *testing.T) {
				err := s.check(c, m)
				want := slices.Contains(c.allow, "*") || slices.Contains(c.allow, shortMethod(m))
				if want != (err == nil) {
					t.Fatalf("%s calling %s: err=%v, want allowed=%v", c.name, m, err, want)
				}
				if err == nil {
					return
				}
				code := refusal.As(err).Code
				wantCode := refusal.PermissionDenied
				if c.as == "" && c.name != "root" && !slices.Contains(c.allow, "*") {
					wantCode = refusal.Unauthenticated
				}
				if code != wantCode {
					t.Fatalf("%s calling %s: code %s, want %s", c.name, m, code, wantCode)
				}
			})
		}
	}
}

// check runs identification (for local classes) and authorization.
func (s *Server) check(c callerClass, method string) error {
	caller := Caller{Principal: c.as, Transport: "test"}
	if c.as == "" {
		var err error
		p := localPeer{UID: c.uid}
		p.User, p.Groups, p.LookupErr = s.cfg.Users.LookupUID(c.uid)
		if caller, err = s.identifyLocal(p, s.Policy()); err != nil {
			return err
		}
	}
	return s.authorize(caller, method, s.Policy())
}

// Without an operator role in the policy, local operators keep the
// baseline (they can always stop and unlock) but may not exec.
func TestOperatorBaselineWithoutPolicyRole(t *testing.T) {
	s := newUnitServer(t, "version: 1\ncommands:\n  - {name: echo, binary: /bin/echo, sandbox: native}\n")
	want := map[string]bool{"Exec": false, "Lockout": true, "Unlock": true, "Pause": true, "Resume": true, "Status": true}
	for _, m := range servedMethods(s) {
		allowed, ok := want[shortMethod(m)]
		if !ok {
			continue
		}
		err := s.check(callerClass{uid: 0}, m)
		if allowed != (err == nil) {
			t.Errorf("root calling %s without an operator role: err=%v, want allowed=%v", m, err, allowed)
		}
	}
}

func TestUnknownMethodDenied(t *testing.T) {
	s := newUnitServer(t, matrixPolicy)
	err := s.check(callerClass{uid: 0}, "/coily.v1.CoilyService/Future")
	var r *refusal.Error
	if !errors.As(err, &r) || r.Code != refusal.PermissionDenied {
		t.Fatalf("unknown method: %v", err)
	}
}
