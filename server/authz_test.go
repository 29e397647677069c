package server

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
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
	s, err := New(Config{Policy: pol, Local: db, Shared: db, Audit: al, ServerUID: 1000, Users: fakeUsers{
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

// TestServedMethodsInAuthorizationTable: every method the gRPC server
// registers has an entry in access's table (access.TestAuthorizationMatrix
// walks them all), and every gRPC method the table names is served.
func TestServedMethodsInAuthorizationTable(t *testing.T) {
	s := newUnitServer(t, matrixPolicy)
	methods := servedMethods(s)
	if len(methods) < 6 {
		t.Fatalf("only %d methods served: %v", len(methods), methods)
	}
	for _, m := range methods {
		if _, ok := access.Lookup(m); !ok {
			t.Errorf("method %s has no entry in the authorization table (it is refused; add an expectation)", m)
		}
	}
	for _, a := range access.Actions() {
		if strings.HasPrefix(a, "/") && !slices.Contains(methods, a) {
			t.Errorf("authorization table names %s, which is not served", a)
		}
	}
}
