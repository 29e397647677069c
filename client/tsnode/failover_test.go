package tsnode_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/client"
	"coily.dev/coily/client/tsnode"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/storetest"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// failoverPolicy lets every user of the test control server run sh, a
// rule whose rate limit reads the shared state.
const failoverPolicy = `version: 1
roles: {owner: {permissions: [exec, lockout, status], commands: [sh]}}
grants: [{principals: ["*@fake-control.example.net"], roles: [owner]}]
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, rate: {per_minute: 600}}
`

// Two servers on one tailnet are one trust point to a client given both
// (--server coily-a,coily-b): an Exec the first refuses state-unavailable
// (it started nothing) runs on the second, once; with the first stopped,
// status, an exec and a lockout reach the second.
func TestFailoverOnTheTailnet(t *testing.T) {
	net, err := devnet.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	shared := &storetest.Unreachable{}
	a := testserver.Start(t, testserver.Options{Policy: failoverPolicy, Tailnet: true, Net: net, Hostname: "coily-a",
		Shared: func(db *store.DB) store.Shared { shared.Shared = db; return shared }})
	b := testserver.Start(t, testserver.Options{Policy: failoverPolicy, Tailnet: true, Net: net, Hostname: "coily-b"})

	connect := func() *client.Client {
		t.Helper()
		t.Setenv("XDG_CACHE_HOME", t.TempDir()) // a client that remembers no server that answered
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		node, err := devnet.Join(ctx, net.ControlURL, devnet.NodeOptions{Dir: t.TempDir(), Hostname: "laptop", Ephemeral: true})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tsnode.Connect(ctx, node, "coily-a,coily-b", time.Minute, func() { node.Close() })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.RateLimitRetries = 0
		return c
	}
	ran := filepath.Join(t.TempDir(), "ran")
	exec := func(c *client.Client) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var out bytes.Buffer
		_, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo ran >> " + ran + ""}}, &out, io.Discard)
		return err
	}

	shared.Down.Store(true)
	c := connect()
	if err := exec(c); err != nil {
		t.Fatalf("exec with the first server's state out of reach: %v", err)
	}
	a.WaitAudit(t, func(rec audit.Record) bool {
		return rec.Decision == "refuse" && rec.Code == string(refusal.StateUnavailable)
	})
	if data, _ := os.ReadFile(ran); string(data) != "ran\n" {
		t.Fatalf("ran %q, want once", data)
	}

	a.Stop()
	c = connect()
	ctx := context.Background()
	if _, err := c.API.Status(ctx, &coilyv1.StatusRequest{}); err != nil {
		t.Fatalf("status with the first server stopped: %v", err)
	}
	if err := exec(c); err != nil {
		t.Fatalf("exec with the first server stopped: %v", err)
	}
	if data, _ := os.ReadFile(ran); strings.Count(string(data), "ran\n") != 2 {
		t.Fatalf("ran %q, want twice in all", data)
	}
	if _, err := c.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "incident"}); err != nil {
		t.Fatalf("lockout with the first server stopped: %v", err)
	}
	if st, err := b.Client.API.Status(ctx, &coilyv1.StatusRequest{}); err != nil || !st.GetLockout().GetActive() {
		t.Fatalf("the second server's status: %v %v, want locked out", st, err)
	}
}
