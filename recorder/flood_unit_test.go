package recorder

import (
	"fmt"
	"testing"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
)

// A caller that cannot be identified is counted by what it cannot change
// cheaply: a reconnect (a new port) or a new process (a new pid) gets no
// fresh budget of records written one by one.
func TestFloodKeyIsStableAcrossConnections(t *testing.T) {
	cases := []struct{ a, b audit.Record }{
		{audit.Record{Transport: access.TransportTailnet, Peer: "100.64.0.7:41000"}, audit.Record{Transport: access.TransportTailnet, Peer: "100.64.0.7:41001"}},
		{audit.Record{Transport: access.TransportTailnet, Peer: "node.ts.net 100.64.0.7:1"}, audit.Record{Transport: access.TransportTailnet, Peer: "node.ts.net 100.64.0.7:2"}},
		{audit.Record{Transport: access.TransportTailnet, Peer: "[fd7a:115c:a1e0::9]:1"}, audit.Record{Transport: access.TransportTailnet, Peer: "[fd7a:115c:a1e0::9]:2"}},
		{audit.Record{Transport: access.TransportTailnet, Peer: "[::ffff:100.64.0.7]:1"}, audit.Record{Transport: access.TransportTailnet, Peer: "100.64.0.7:2"}},
		{audit.Record{Transport: access.TransportLocal, Peer: "uid=1000 pid=17"}, audit.Record{Transport: access.TransportLocal, Peer: "uid=1000 pid=18"}},
	}
	for _, tc := range cases {
		if ka, kb := floodKey(tc.a), floodKey(tc.b); ka != kb {
			t.Errorf("%q and %q: keys %q and %q differ", tc.a.Peer, tc.b.Peer, ka, kb)
		}
	}
	distinct := []audit.Record{
		{Transport: access.TransportTailnet, Peer: "100.64.0.7:1"},
		{Transport: access.TransportTailnet, Peer: "100.64.0.8:1"},
		{Transport: access.TransportLocal, Peer: "uid=1000 pid=1"},
		{Transport: access.TransportLocal, Peer: "uid=1001 pid=1"},
		{Principal: "tag:agent", Transport: access.TransportTailnet, Peer: "100.64.0.7:1"},
	}
	seen := map[string]bool{}
	for _, r := range distinct {
		k := floodKey(r)
		if seen[k] {
			t.Errorf("%+v: key %q shared with another caller", r, k)
		}
		seen[k] = true
	}
}

// An unidentified caller reconnecting for every request is aggregated
// after its budget like any other; the callers counted at once are
// bounded, and those past the bound share one budget without losing a
// count.
func TestFloodGuardReconnectsAndBound(t *testing.T) {
	var g floodGuard
	now := time.Unix(1_800_000_000, 0)
	batched := 0
	for i := range 100 {
		r := audit.Record{Transport: access.TransportTailnet, Peer: fmt.Sprintf("100.64.0.7:%d", 40000+i), Code: "unauthenticated"}
		if b, _ := g.admit(floodKey(r), r, now); b != nil {
			batched++
		}
	}
	if batched != 100-floodBudget {
		t.Fatalf("%d of 100 reconnecting refusals batched, want %d", batched, 100-floodBudget)
	}
	g = floodGuard{}
	var last *refusalBatch
	total := 0
	for i := range maxFloodCallers + 3*floodBudget {
		r := audit.Record{Transport: access.TransportTailnet, Peer: fmt.Sprintf("100.%d.%d.%d:1", 64+i>>16, i>>8&255, i&255), Code: "unauthenticated"}
		b, _ := g.admit(floodKey(r), r, now)
		if b != nil {
			last, total = b, b.count
		}
	}
	if len(g.callers) > maxFloodCallers+1 {
		t.Fatalf("%d callers counted at once, bound %d", len(g.callers), maxFloodCallers)
	}
	if last == nil || total != 2*floodBudget {
		t.Fatalf("overflow batch counted %d, want %d", total, 2*floodBudget)
	}
	g.take("100.0.0.1", last, now) // any caller's key: the overflow batch closes
	if g.callers[floodOverflow].batch != nil {
		t.Fatal("the overflow batch was not closed by take")
	}
}
