package server_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/refusal"
)

// gitExchange is a signed git exchange of sandbox demo.
func (e *relayEnv) gitExchange(t *testing.T, g *descriptor.GitExchange) (string, []byte) {
	t.Helper()
	id := descriptor.NewID()
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(), Nonce: hex.EncodeToString([]byte(id))[:32],
		Sandbox: "demo", Git: g}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	return id, file
}

// A git exchange reaches the server's git proxy in process, as sandbox
// demo through the relay: the proxy's refusal is its answer, audited
// with the exchange's id. Without a proxy it is refused before its id
// is used up.
func TestRelayGitExchange(t *testing.T) {
	e := newRelayEnv(t)
	g := &descriptor.GitExchange{Method: "GET", Path: "/git/github.com/alice/app/info/refs", Query: "service=git-upload-pack"}
	id, file := e.gitExchange(t, g)
	r := e.relay(t, id, file)
	wantRefused(t, r, refusal.Internal)
	if !strings.Contains(r.Message, "does not serve the git proxy") {
		t.Fatalf("without a proxy: %+v", r)
	}

	if _, err := e.in.Server.GitProxy(0, 0); err != nil {
		t.Fatal(err)
	}
	// The same id again, signed afresh: not used up by the refusal.
	file, err := descriptor.MarshalRequest(&descriptor.Request{ID: id, CreatedAt: time.Now().UTC(), Nonce: strings.Repeat("n", 32),
		Sandbox: "demo", Git: g}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	r = e.relay(t, id, file)
	if r.Outcome != descriptor.OutcomeHTTP || r.Git.Status != 403 || !strings.HasPrefix(string(r.Git.Body), "policy-deny: ") {
		t.Fatalf("a remote the policy does not name: %+v", r)
	}
	recs, err := audit.Tail(e.in.Audit.Dir(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, rec := range recs {
		if rec.RelayID == id && rec.Principal == "sandbox:demo" && rec.Transport == "relay" && rec.Code == "policy-deny" && rec.Method == "git:fetch" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no git:fetch refusal of sandbox:demo with relay_id %s in %+v", id, recs)
	}
	if again := e.relay(t, id, file); again.Git == nil || string(again.Git.Body) != string(r.Git.Body) {
		t.Fatalf("the repeat: %+v", again)
	}
}
