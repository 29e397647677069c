package access

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
)

// serviceMethods lists every method of the services the server registers
// (coily, health, reflection), as full method names.
func serviceMethods() []string {
	var out []string
	for _, d := range []grpc.ServiceDesc{coilyv1grpc.CoilyService_ServiceDesc, healthpb.Health_ServiceDesc,
		reflectionv1.ServerReflection_ServiceDesc, reflectionv1alpha.ServerReflection_ServiceDesc} {
		for _, m := range d.Methods {
			out = append(out, "/"+d.ServiceName+"/"+m.MethodName)
		}
		for _, s := range d.Streams {
			out = append(out, "/"+d.ServiceName+"/"+s.StreamName)
		}
	}
	slices.Sort(out)
	return out
}

// everyAction is every action of every kind, named for the matrix: a gRPC
// method by its short name, a console action as "web:" and its name, the
// operations endpoints as "ops".
func everyAction() map[string]Action {
	out := map[string]Action{}
	for _, m := range serviceMethods() {
		out[shortMethod(m)+" "+m] = Call(m)
	}
	for _, a := range WebActions() {
		out["web:"+string(a)] = Web("", a)
	}
	out["ops"] = Ops("", "http:/metrics")
	out[GitMethodFetch] = Git("", GitMethodFetch)
	out[GitMethodPush] = Git("", GitMethodPush)
	return out
}

// A caller class is how a caller arrives: by uid on the local socket, or as
// an already-identified principal (as the tailnet transport produces).
type callerClass struct {
	name  string
	uid   int    // local socket peer, when principal is empty
	as    string // identified principal, bypassing the transport
	allow []string
}

var (
	everything  = []string{"*"}
	healthRefl  = []string{"Check", "Watch", "List", "ServerReflectionInfo"}
	agentMethod = append([]string{"Exec", "Pause", "Status", "ListCommands", "web:page", "web:status", "web:pause", "git:fetch", "git:push"}, healthRefl...)
	watchMethod = append([]string{"Status", "web:page", "web:status", "ops"}, healthRefl...)
	bridgeMeth  = append([]string{"Relay", "RelayTeardown", "AuditCheckpoint", "web:page"}, healthRefl...)
	auditMethod = append([]string{"AuditCheckpoint", "web:page", "web:audit"}, healthRefl...)
)

// TestAuthorizationMatrix walks every action of every kind (every gRPC
// method the server registers, every console action, the operations
// endpoints) for every caller class against the one table; an action
// missing from the table, or named by it and served by nothing, fails it.
func TestAuthorizationMatrix(t *testing.T) {
	g := newTestGate(t, tablePolicy)
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
		{name: "audit reader", as: "tag:audit", allow: auditMethod},
		{name: "principal with no grant", as: "alice@example.com"},
	}
	methods := serviceMethods()
	if len(methods) < 6 {
		t.Fatalf("only %d methods served: %v", len(methods), methods)
	}
	for _, m := range methods {
		if _, ok := Lookup(m); !ok {
			t.Errorf("method %s has no entry in the authorization table (it is refused; add an expectation)", m)
		}
	}
	for _, a := range WebActions() {
		if _, ok := Lookup(webActions[a]); !ok {
			t.Errorf("console action %s has no entry in the authorization table", a)
		}
	}
	for _, a := range Actions() {
		if !slices.Contains(methods, a) && !strings.HasPrefix(a, "web:") && !strings.HasPrefix(a, "git:") && a != OpsEndpoints {
			t.Errorf("authorization table names %s, which is not served", a)
		}
	}
	for _, c := range classes {
		for name, a := range everyAction() {
			short, _, _ := strings.Cut(name, " ")
			t.Run(c.name+" "+short, func(t *testing.T) {
				err := g.check(c, a)
				want := slices.Contains(c.allow, "*") || slices.Contains(c.allow, short)
				if want != (err == nil) {
					t.Fatalf("%s doing %s: err=%v, want allowed=%v", c.name, name, err, want)
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
					t.Fatalf("%s doing %s: code %s, want %s", c.name, name, code, wantCode)
				}
			})
		}
	}
}

// check runs identification (for local classes) and authorization.
func (g *testGate) check(c callerClass, a Action) error {
	caller := Caller{Principal: c.as, Transport: "test"}
	if c.as == "" {
		var err error
		if caller, err = g.identifyLocal(localAt(c.uid), g.pol); err != nil {
			return err
		}
	}
	_, err := authorize(caller, a, g.pol)
	return err
}

// Without an operator role in the policy, local operators keep the
// baseline (they can always stop and unlock) but may not exec.
func TestOperatorBaselineWithoutPolicyRole(t *testing.T) {
	g := newTestGate(t, "version: 1\ncommands:\n  - {name: echo, binary: /bin/echo, sandbox: native}\n")
	want := map[string]bool{"Exec": false, "Lockout": true, "Unlock": true, "Pause": true, "Resume": true, "Status": true}
	for _, m := range serviceMethods() {
		allowed, ok := want[shortMethod(m)]
		if !ok {
			continue
		}
		err := g.check(callerClass{uid: 0}, Call(m))
		if allowed != (err == nil) {
			t.Errorf("root calling %s without an operator role: err=%v, want allowed=%v", m, err, allowed)
		}
	}
}

func TestUnknownMethodDenied(t *testing.T) {
	g := newTestGate(t, tablePolicy)
	err := g.check(callerClass{uid: 0}, Call("/coily.v1.CoilyService/Future"))
	var r *refusal.Error
	if !errors.As(err, &r) || r.Code != refusal.PermissionDenied {
		t.Fatalf("unknown method: %v", err)
	}
}
