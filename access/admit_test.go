package access

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc/peer"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"

	"coily.dev/coily/audit"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
)

// localCall is the context of a gRPC call from uid on the local socket.
func localCall(uid int) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "@", Net: "unix"}, AuthInfo: localAt(uid)})
}

// tailnetTags is a WhoIs answering each address with a node of its tags.
func tailnetTags(nodes map[string]string) WhoIsFunc {
	return func(_ context.Context, remote string) (*apitype.WhoIsResponse, error) {
		host, _, _ := net.SplitHostPort(remote)
		tag, ok := nodes[host]
		if !ok {
			return nil, errors.New("no such peer")
		}
		return &apitype.WhoIsResponse{Node: &tailcfg.Node{Name: "n.", Tags: []string{tag}}}, nil
	}
}

// TestAdmit: one Admit for every kind of action: the caller and the
// policy carried to the handler, a refusal audited with its method,
// transport and code, the lockout refused where the table says (and left
// to Exec's handler for Exec).
func TestAdmit(t *testing.T) {
	g := newTestGate(t, tablePolicy)
	g.cfg.WhoIs = tailnetTags(map[string]string{"100.64.0.1": "tag:watch", "100.64.0.2": "tag:agent"})
	status, exec := coilyv1grpc.CoilyService_Status_FullMethodName, coilyv1grpc.CoilyService_Exec_FullMethodName
	resume := coilyv1grpc.CoilyService_Resume_FullMethodName

	ctx, err := g.Admit(localCall(1001), Call(exec))
	if c, cerr := CallerFrom(ctx); err != nil || cerr != nil || c.Principal != "local:alice" || c.Transport != TransportLocal || PolicyFrom(ctx) != g.pol {
		t.Fatalf("operator's Exec: caller %+v (%v), err %v", c, cerr, err)
	}

	tests := []struct {
		name                         string
		ctx                          context.Context
		action                       Action
		locked                       bool
		code                         refusal.Code
		method, transport, principal string
		msg                          string
	}{
		{name: "not an operator", ctx: localCall(1003), action: Call(status), code: refusal.Unauthenticated,
			method: status, transport: TransportLocal, msg: "uid 1003 (mallory) is not a local operator"},
		{name: "no peer", ctx: context.Background(), action: Call(status), code: refusal.Unauthenticated,
			method: status, msg: "no peer information"},
		{name: "tailnet caller without the permission", ctx: peer.NewContext(context.Background(),
			&peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("100.64.0.2"), Port: 7}}), action: Call(resume),
			code: refusal.PermissionDenied, method: resume, transport: TransportTailnet, principal: "tag:agent",
			msg: "tag:agent may not call Resume"},
		{name: "unknown method", ctx: localCall(0), action: Call("/coily.v1.CoilyService/Future"), code: refusal.PermissionDenied,
			method: "/coily.v1.CoilyService/Future", transport: TransportLocal, principal: "local:root"},
		{name: "locked out", ctx: localCall(0), action: Call(resume), locked: true, code: refusal.LockoutActive,
			method: resume, transport: TransportLocal, principal: "local:root"},
		{name: "Exec checks the lockout itself", ctx: localCall(0), action: Call(exec), locked: true},
		{name: "status served while locked", ctx: localCall(0), action: Call(status), locked: true},
		{name: "console caller is web", ctx: context.Background(), action: Web("100.64.0.2:9", WebResume),
			code: refusal.PermissionDenied, method: resume, transport: TransportWeb, principal: "tag:agent"},
		{name: "console page served while locked", ctx: context.Background(), action: Web("100.64.0.2:9", WebPage), locked: true},
		{name: "console pause refused while locked", ctx: context.Background(), action: Web("100.64.0.2:9", WebPause), locked: true,
			code: refusal.LockoutActive, method: coilyv1grpc.CoilyService_Pause_FullMethodName, transport: TransportWeb, principal: "tag:agent"},
		{name: "unknown console action", ctx: context.Background(), action: Web("100.64.0.2:9", "nope"),
			code: refusal.PermissionDenied, method: "web:unknown", transport: TransportWeb, principal: "tag:agent", msg: "no such console action"},
		{name: "unknown console action of an unknown peer", ctx: context.Background(), action: Web("100.64.0.9:9", "nope"),
			code: refusal.Unauthenticated, method: "", transport: TransportWeb},
		{name: "console caller off the tailnet", ctx: context.Background(), action: Web("192.0.2.1:9", WebPage),
			code: refusal.Unauthenticated, method: WebMethodPage, transport: TransportWeb},
		{name: "metrics", ctx: context.Background(), action: Ops("100.64.0.1:9", "http:/metrics"), locked: true},
		{name: "metrics without the permission", ctx: context.Background(), action: Ops("100.64.0.2:9", "http:/metrics"),
			code: refusal.PermissionDenied, method: "http:/metrics", transport: TransportTailnet, principal: "tag:agent",
			msg: "tag:agent may not read the metrics (the metrics permission)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g.mu.Lock()
			g.locked, g.records = tt.locked, nil
			g.mu.Unlock()
			ctx, err := g.Admit(tt.ctx, tt.action)
			if tt.code == "" {
				if _, cerr := CallerFrom(ctx); err != nil || cerr != nil {
					t.Fatalf("refused: %v (%v)", err, cerr)
				}
				return
			}
			r := refusal.As(err)
			if ctx != nil || r.Code != tt.code || r.AuditID == "" || (tt.msg != "" && r.Msg != tt.msg) {
				t.Fatalf("ctx %v err %v (audit %q), want %s %q", ctx, err, r.AuditID, tt.code, tt.msg)
			}
			rec := g.last(t)
			want := audit.Record{Event: "call", Method: tt.method, Principal: tt.principal, Transport: tt.transport,
				Peer: rec.Peer, Decision: "refuse", Code: string(tt.code), Reason: r.Msg}
			if rec.Event != want.Event || rec.Method != want.Method || rec.Principal != want.Principal ||
				rec.Transport != want.Transport || rec.Decision != want.Decision || rec.Code != want.Code || rec.Reason != want.Reason {
				t.Fatalf("audited %+v, want %+v", rec, want)
			}
		})
	}
}

// A refusal that cannot be audited is not answered as itself: internal.
func TestRefuseAuditUnavailable(t *testing.T) {
	g := newTestGate(t, tablePolicy)
	g.cfg.Record = func(context.Context, audit.Record) (audit.Record, error) {
		return audit.Record{}, errors.New("disk full")
	}
	_, err := g.Admit(localCall(1003), Call(coilyv1grpc.CoilyService_Status_FullMethodName))
	if r := refusal.As(err); r.Code != refusal.Internal || r.Msg != "audit log unavailable" {
		t.Fatalf("err %v", err)
	}
}
