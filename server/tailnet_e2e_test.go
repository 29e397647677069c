package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"tailscale.com/tailcfg"

	"coily.dev/coily/access"
	"coily.dev/coily/client"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/proto/coily/v1/coilyv1connect"
	"coily.dev/coily/refusal"
)

// tailnetPolicy grants by login (every untagged test node is a user of the
// test control server) and by tag; tag:capped gets its role only from the
// tailnet's app capability.
const tailnetPolicy = `version: 1
limits: {concurrency: 4}
roles:
  owner: {permissions: [exec, lockout, pause, resume, status, approve], commands: ["*"]}
  agent: {permissions: [exec, status], commands: [echo]}
grants:
  - {principals: ["*@fake-control.example.net"], roles: [owner]}
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], sandbox: native}
`

func tailExec(t *testing.T, c *client.Client, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	_, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: argv}, &out, io.Discard)
	return out.String(), err
}

func code(err error) refusal.Code {
	if err == nil {
		return ""
	}
	return refusal.FromStatus(err).Code
}

func TestTailnetRoles(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: tailnetPolicy, Tailnet: true})
	ctx := context.Background()

	owner := in.TailnetClient(t, "alice-laptop") // untagged: a user's node
	st, err := owner.API.Status(ctx, &coilyv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c := st.GetCaller(); c.GetTransport() != "tailnet" || !slices.Contains(c.GetRoles(), "owner") ||
		c.GetPrincipal() == "" || c.GetPrincipal()[0] == 't' {
		t.Fatalf("owner identity %v", c)
	}
	if out, err := tailExec(t, owner, "/bin/echo", "from the owner"); err != nil || out != "from the owner\n" {
		t.Fatalf("owner exec: %q %v", out, err)
	}

	agent := in.TailnetClient(t, "ci-runner", "tag:agent")
	if out, err := tailExec(t, agent, "/bin/echo", "from the agent"); err != nil || out != "from the agent\n" {
		t.Fatalf("agent exec: %q %v", out, err)
	}
	// An agent allowed only to exec pauses itself, not the server: its
	// own new commands are refused, the owner's run.
	p, err := agent.API.Pause(ctx, &coilyv1.PauseRequest{Reason: "stop me"})
	if err != nil || p.GetPause().GetPrincipal() != "tag:agent" {
		t.Fatalf("agent pause: %v %v", p, err)
	}
	if _, err := tailExec(t, agent, "/bin/echo"); code(err) != refusal.PauseActive {
		t.Fatalf("agent exec while it paused itself: %v", err)
	}
	if out, err := tailExec(t, owner, "/bin/echo", "still"); err != nil || out != "still\n" {
		t.Fatalf("owner exec while an agent paused itself: %q %v", out, err)
	}
	if st, err := owner.API.Status(ctx, &coilyv1.StatusRequest{}); err != nil || st.GetPause().GetActive() ||
		len(st.GetSelfPauses()) != 1 || st.GetSelfPauses()[0].GetPrincipal() != "tag:agent" {
		t.Fatalf("owner status: %v %v", st, err)
	}
	if _, err := agent.API.Resume(ctx, &coilyv1.ResumeRequest{}); code(err) != refusal.PermissionDenied {
		t.Fatalf("agent resume: %v", err)
	}
	if _, err := owner.API.Resume(ctx, &coilyv1.ResumeRequest{}); err != nil {
		t.Fatalf("owner resume: %v", err)
	}
	if _, err := tailExec(t, agent, "/bin/echo"); err != nil {
		t.Fatalf("agent exec after resume: %v", err)
	}
	if _, err := owner.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "from the phone"}); err != nil {
		t.Fatalf("owner lockout: %v", err)
	}
	for _, c := range []*client.Client{owner, agent} {
		if _, err := c.API.Unlock(ctx, &coilyv1.UnlockRequest{}); code(err) != refusal.PermissionDenied {
			t.Fatalf("unlock over the tailnet: %v", err)
		}
	}
	// Only the local operator unlocks.
	if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{}); err != nil {
		t.Fatalf("local unlock: %v", err)
	}
	if _, err := tailExec(t, agent, "/bin/echo"); err != nil {
		t.Fatalf("agent exec after unlock: %v", err)
	}
}

// A node with no grant is refused on every method the server serves.
func TestTailnetStrangerRefusedEverywhere(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: tailnetPolicy, Tailnet: true})
	stranger := in.TailnetClient(t, "stranger", "tag:stranger")
	descs := []protoreflect.ServiceDescriptor{
		coilyv1connect.File_coily_v1_service_proto.Services().ByName("CoilyService"),
		healthpb.File_grpc_health_v1_health_proto.Services().ByName("Health"),
		reflectionpb.File_grpc_reflection_v1_reflection_proto.Services().ByName("ServerReflection"),
	}
	n := 0
	for _, sd := range descs {
		for i := 0; i < sd.Methods().Len(); i++ {
			md := sd.Methods().Get(i)
			full := "/" + string(sd.FullName()) + "/" + string(md.Name())
			err := invokeEmpty(stranger.Conn(), full, md)
			if code(err) != refusal.PermissionDenied {
				t.Errorf("stranger calling %s: %v, want permission-denied", full, err)
			}
			n++
		}
	}
	if n < 12 {
		t.Fatalf("only %d methods tried", n)
	}
}

// invokeEmpty calls a method with an empty request, whatever its shape
// (a client-streaming one gets that one message, then the end).
func invokeEmpty(conn *client.Conn, method string, md protoreflect.MethodDescriptor) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := dynamicpb.NewMessage(md.Input())
	resp := dynamicpb.NewMessage(md.Output())
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return conn.Invoke(ctx, method, req, resp)
	}
	s, err := conn.NewStream(ctx, method, req, func() proto.Message { return resp }, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.Recv()
	return err
}

// A grant taken away while a connection stays open stops working within
// the documented bound.
func TestTailnetGrantRevokedOnOpenConnection(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: tailnetPolicy, Tailnet: true})
	grant, _ := json.Marshal(map[string]any{"roles": []string{"agent"}})
	in.Net.Control.SetGlobalAppCaps(tailcfg.PeerCapMap{access.AppCapability: {tailcfg.RawMessage(grant)}})
	capped := in.TailnetClient(t, "capped", "tag:capped")
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := tailExec(t, capped, "/bin/echo", "granted")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app capability never granted exec: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	revoked := time.Now()
	in.Net.Control.SetGlobalAppCaps(nil)
	bound := access.WhoIsCacheTTL + 3*time.Second
	for {
		_, err := tailExec(t, capped, "/bin/echo", "after")
		if code(err) == refusal.PermissionDenied {
			break
		}
		if time.Since(revoked) > bound {
			t.Fatalf("revoked grant still works after %s (bound %s): %v", time.Since(revoked), bound, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("revocation took effect after %s on an open connection", time.Since(revoked).Round(time.Millisecond))
}

// Authority comes only from where the docs say: an app capability naming
// the built-in operator role, or a role that carries unlock, confers
// neither the operator's baseline nor unlock over the real tailnet.
func TestTailnetCapabilityCannotConferUnlock(t *testing.T) {
	const pol = `version: 1
roles:
  breaker: {permissions: [lockout, unlock, status]}
grants:
  - {principals: ["tag:*"], roles: [breaker]}
`
	in := testserver.Start(t, testserver.Options{Policy: pol, Tailnet: true})
	grant, _ := json.Marshal(map[string]any{"roles": []string{"operator", "breaker"}})
	in.Net.Control.SetGlobalAppCaps(tailcfg.PeerCapMap{access.AppCapability: {tailcfg.RawMessage(grant)}})
	capped := in.TailnetClient(t, "phone", "tag:phone")
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := capped.API.Status(ctx, &coilyv1.StatusRequest{})
		if err == nil && slices.Contains(st.GetCaller().GetRoles(), "breaker") {
			if slices.Contains(st.GetCaller().GetRoles(), "operator") {
				t.Fatalf("a capability conferred the operator role: %v", st.GetCaller())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the capability never took effect: %v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := capped.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "from the phone"}); err != nil {
		t.Fatalf("lockout through the capability's role: %v", err)
	}
	if _, err := capped.API.Unlock(ctx, &coilyv1.UnlockRequest{}); code(err) != refusal.PermissionDenied {
		t.Fatalf("unlock through a capability or a glob grant: %v, want permission-denied", err)
	}
	if _, err := capped.API.Resume(ctx, &coilyv1.ResumeRequest{}); code(err) != refusal.PermissionDenied {
		t.Fatalf("resume (the operator's baseline) through a capability: %v, want permission-denied", err)
	}
	if _, err := in.Client.API.Unlock(ctx, &coilyv1.UnlockRequest{}); err != nil {
		t.Fatalf("local unlock: %v", err)
	}
}
