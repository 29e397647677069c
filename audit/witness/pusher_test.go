package witness

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestPusherOutageAndRecovery: a witness down is one outage however many
// checkpoints fail; back up, it takes the latest, proven from what it
// held; a log that lost records is refused as such.
func TestPusherOutageAndRecovery(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, wkey := newWitness(t, t.TempDir(), l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	hs := &http.Server{Handler: s}
	go func() { _ = hs.Serve(ln) }()
	var mu sync.Mutex
	var outages, recoveries, failures int
	var lastErr error
	p := StartPusher(PusherConfig{Clients: []*Client{{URL: "http://" + addr, Key: wkey, LogKey: l.vkey, Prove: l.prove}},
		Backoff: time.Millisecond, Idle: 10 * time.Millisecond, Tries: 2,
		Failed:    func(string) { mu.Lock(); failures++; mu.Unlock() },
		Outage:    func(_ string, err error) { mu.Lock(); outages++; lastErr = err; mu.Unlock() },
		Recovered: func(string) { mu.Lock(); recoveries++; mu.Unlock() }})
	defer p.Stop()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	holds := func(n int64) func() bool {
		return func() bool { return bytes.Contains(s.Latest("coily/a"), fmt.Appendf(nil, "\n%d\n", n)) }
	}
	p.Offer(l.sign(t, 5))
	waitFor("5 witnessed", holds(5))
	hs.Close()
	p.Offer(l.sign(t, 8))
	waitFor("failures", func() bool { mu.Lock(); defer mu.Unlock(); return failures >= 4 })
	p.Offer(l.sign(t, 9))
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the witness's port was taken meanwhile: %v", err)
	}
	hs = &http.Server{Handler: s}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	waitFor("9 witnessed", holds(9))
	waitFor("recovered", func() bool { mu.Lock(); defer mu.Unlock(); return recoveries == 1 })
	mu.Lock()
	if outages != 1 {
		t.Fatalf("%d outages reported for one", outages)
	}
	mu.Unlock()
	short := &memLog{skey: l.skey, vkey: l.vkey}
	p.Offer(short.sign(t, 3))
	waitFor("a refusal", func() bool { mu.Lock(); defer mu.Unlock(); return outages == 2 })
	mu.Lock()
	defer mu.Unlock()
	var ahead *AheadError
	if !errors.As(lastErr, &ahead) || ahead.Witness != 9 || ahead.Sent != 3 {
		t.Fatalf("a log cut back to 3 after 9 were witnessed: %v", lastErr)
	}
}
