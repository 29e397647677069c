package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/client"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// witnessServer starts a real server signing checkpoints of its own log,
// named origin, under policy, and its target (name: its :authority).
func witnessServer(t *testing.T, name, origin, policy string) (*testserver.Instance, client.Target, string) {
	t.Helper()
	in := testserver.Start(t, testserver.Options{Policy: policy, Checkpoints: true, AuditOrigin: origin})
	s, err := in.Store().AuditSigner()
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	return in, client.Target{Name: name, Dial: func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", in.Socket) }}, s.Verifier
}

// logCheckpointSize is the size of the latest checkpoint in in's log.
func logCheckpointSize(t *testing.T, in *testserver.Instance, vkey string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(in.Audit.Dir(), audit.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := audit.OpenCheckpoint(b, vkey)
	if err != nil {
		t.Fatal(err)
	}
	return c.N
}

// startBridgeWitness opens the bridge's witness of the log vkey pins and
// pulls through api every few milliseconds until the test ends.
func startBridgeWitness(t *testing.T, vkey string, api checkpointer) (*bridgeWitness, *testlog.Buffer) {
	t.Helper()
	logs := new(testlog.Buffer)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	state, every, cp := t.TempDir(), time.Second, time.Second
	bw, err := openBridgeWitness(log, bridgeWitnessFlags{log: &vkey, state: &state, every: &every, checkpoint: &cp})
	if err != nil {
		t.Fatal(err)
	}
	bw.every = 10 * time.Millisecond
	stop := bw.run(context.Background(), log, api)
	t.Cleanup(stop)
	return bw, logs
}

// TestBridgeWitnessPullsThePinnedHostsLog: two real servers, each with
// its own log and key; the bridge's client sticks to B, its witness pins
// A's log. It keeps A's checkpoint and raises no ALARM (before: B's
// checkpoint, refused as lost records every pull).
func TestBridgeWitnessPullsThePinnedHostsLog(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	a, ta, vkeyA := witnessServer(t, "host-a", "coily/host-a", bridgeWitnessPolicy)
	_, tb, _ := witnessServer(t, "host-b", "coily/host-b", bridgeWitnessPolicy)
	c := client.NewServers([]client.Target{tb, ta}, nil) // sticks to B
	t.Cleanup(func() { c.Close() })
	if _, err := c.API.Status(context.Background(), &coilyv1.StatusRequest{}); err != nil {
		t.Fatal(err)
	}

	bw, logs := startBridgeWitness(t, vkeyA, c.API)
	want := logCheckpointSize(t, a, vkeyA)
	poll.Until(t, 30*time.Second, "A's checkpoint kept, several pulls", func() bool {
		return bw.w.Held("coily/host-a").N == want && strings.Count(logs.String(), "the witness keeps the audit checkpoint") >= 5
	})
	if strings.Contains(logs.String(), "ALARM") || strings.Contains(logs.String(), "refused") {
		t.Fatalf("a false alarm:\n%s", logs)
	}
	bw.mu.Lock()
	keeper := bw.keeper
	bw.mu.Unlock()
	if keeper != ta.Name {
		t.Fatalf("the pinned log's checkpoint answered by %q, want A", keeper)
	}
}

// TestBridgeWitnessStopsWhenDenied: a bridge whose role lacks relay and
// audit-read is refused once (one audit record), logs it once with what
// it needs, and stops pulling.
func TestBridgeWitnessStopsWhenDenied(t *testing.T) {
	in, _, vkey := witnessServer(t, "host-a", "coily/host-a", testserver.LocalPolicy)
	_, logs := startBridgeWitness(t, vkey, in.Client.API)
	poll.Until(t, 30*time.Second, "the witness stops", func() bool { return strings.Contains(logs.String(), "stops pulling") })
	recs, err := audit.Tail(filepath.Join(in.StateDir, "audit"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, r := range recs {
		if strings.Contains(r.Method, "AuditCheckpoint") {
			denied++
		}
	}
	if denied != 1 || strings.Count(logs.String(), "stops pulling") != 1 || !strings.Contains(logs.String(), "relay or audit-read") {
		t.Fatalf("%d refusals audited:\n%s", denied, logs)
	}
}

// relayAnswers answers every relayed request (or err).
type relayAnswers struct {
	err       error
	duplicate bool
}

func (r relayAnswers) Relay(context.Context, *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	if r.err != nil {
		return nil, r.err
	}
	return &coilyv1.RelayResponse{Response: []byte("{}"), Duplicate: r.duplicate}, nil
}

func (relayAnswers) RelayTeardown(context.Context, *coilyv1.RelayTeardownRequest) (*coilyv1.RelayTeardownResponse, error) {
	return &coilyv1.RelayTeardownResponse{}, nil
}

// The relays counted for the freeze check are the answered ones, by the
// server that keeps the pinned log (one server: every answer); failed or
// duplicate relays write nothing new and are not counted.
func TestBridgeWitnessCountsAnsweredRelays(t *testing.T) {
	b := &bridgeWitness{}
	relay := func(api relayAnswers) {
		_, _ = b.relays(api).Relay(context.Background(), &coilyv1.RelayRequest{})
	}
	relay(relayAnswers{})
	relay(relayAnswers{err: errors.New("down")})
	relay(relayAnswers{duplicate: true})
	if n := b.answered.Load(); n != 1 {
		t.Fatalf("%d counted, want 1", n)
	}
	b.keeper = "a" // the client answers through another server than a
	relay(relayAnswers{})
	if n := b.answered.Load(); n != 1 {
		t.Fatalf("%d counted, want 1", n)
	}
}
