package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// chaosPolicy lets the local operator run /bin/sh over gRPC and relay for
// sandbox demo, whose requests may run /bin/sh too.
const chaosPolicy = `version: 1
limits: {concurrency: 16}
roles:
  operator:
    permissions: [status, relay, keys, exec]
    commands: [sh]
    sandboxes: [demo]
  demo-sandbox:
    permissions: [exec]
    commands: [sh]
grants:
  - principals: ["sandbox:demo"]
    roles: [demo-sandbox]
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native}
`

// chaosRig is a server on a state directory, optionally a bridge for
// sandbox demo's folder, and the ledger of what was sent.
type chaosRig struct {
	relayRig
	keyFile string
	bridge  *bridgeProc
	l       *chaosLedger
}

func newChaosRig(t *testing.T, stateDir string, withBridge bool) *chaosRig {
	t.Helper()
	r := &chaosRig{relayRig: relayRig{dir: stateDir, mount: shortDir(t)}, l: newChaosLedger(t)}
	r.pol = filepath.Join(shortDir(t), "policy.yaml")
	if err := os.WriteFile(r.pol, []byte(chaosPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	r.serve = startServe(t, r.dir, r.pol)
	if withBridge {
		r.keyFile = filepath.Join(shortDir(t), "demo.key")
		r.ctl(t, "key", "bootstrap", "--sandbox", "demo", "--out", r.keyFile)
		r.bridge = r.startBridge(t)
	}
	return r
}

func (r *chaosRig) grpc() chaosTransport {
	return chaosTransport{name: "gRPC", args: []string{"--socket", r.serve.socket}}
}

func (r *chaosRig) relay() chaosTransport {
	return chaosTransport{name: "relay", env: []string{"SANDBOX_RUNTIME=1", "COILY_MOUNT=" + r.mount, "COILY_KEY_FILE=" + r.keyFile}}
}

// ctl runs an operator command that must succeed.
func (r *chaosRig) ctl(t *testing.T, args ...string) {
	t.Helper()
	if res := r.serve.run(t, args...); res.code != 0 {
		t.Fatalf("coily %v: %+v", args, res)
	}
}

var (
	chaosLockedRe = regexp.MustCompile(`(?m)^lockout:\s+ACTIVE`)
	chaosPausedRe = regexp.MustCompile(`(?m)^pause:\s+ACTIVE`)
)

// closedness ranks the server's stop state: 2 locked out, 1 paused, 0
// open. A start "more open than before" has a lower rank.
func (r *chaosRig) closedness(t *testing.T) int {
	t.Helper()
	res := r.serve.run(t, "status")
	if res.code != 0 {
		t.Fatalf("status: %+v", res)
	}
	switch {
	case chaosLockedRe.MatchString(res.stdout):
		return 2
	case chaosPausedRe.MatchString(res.stdout):
		return 1
	}
	return 0
}

// finish stops the server cleanly and checks the ledger against its state.
func (r *chaosRig) finish(res *chaosResult) {
	r.serve.stop()
	res.add(r.l.check(r.dir))
}

// kill -9 of the server while a command runs, alternately over gRPC and
// relayed through the bridge; every third round paused first. A request is
// sent while the server is down. It restarts at once.
func chaosServerKill(t *testing.T, rounds int) []*chaosResult {
	r := newChaosRig(t, shortDir(t), true)
	res := &chaosResult{name: "kill -9 server mid-exec (gRPC, relayed)", rounds: rounds}
	for i := range rounds {
		tr := r.grpc()
		if i%2 == 1 {
			tr = r.relay()
		}
		running := r.l.start(tr, "exec sleep 30")
		r.l.waitRan(running)
		paused := i%3 == 2
		if paused {
			r.ctl(t, "pause", "--reason", "chaos")
		}
		before := r.closedness(t)
		r.serve.kill()
		t0 := time.Now()
		down := r.l.start(tr, "true")
		r.serve = startServe(t, r.dir, r.pol)
		if after := r.closedness(t); after < before {
			res.moreOpen++
			res.notes = append(res.notes, fmt.Sprintf("round %d: restarted with stop rank %d, before %d", i, after, before))
		}
		if paused {
			r.ctl(t, "resume", "--reason", "chaos")
		}
		running.wait(90 * time.Second)
		down.wait(90 * time.Second)
		d, err := r.l.probe(tr, t0)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		res.recover = append(res.recover, d)
	}
	r.finish(res)
	return []*chaosResult{res}
}

// kill -9 of the bridge while a relayed command runs (every other round
// just as it ends, racing the response); a request is written while the
// bridge is down; a new bridge starts at once.
func chaosBridgeKill(t *testing.T, rounds int) []*chaosResult {
	r := newChaosRig(t, shortDir(t), true)
	res := &chaosResult{name: "kill -9 bridge mid-exec", rounds: rounds}
	gates := shortDir(t)
	for i := range rounds {
		running := r.l.start(r.relay(), "until [ -e "+gates+"/$M ]; do sleep 0.05; done; echo done")
		r.l.waitRan(running)
		release := func() {
			if err := os.WriteFile(filepath.Join(gates, running.marker), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 1 {
			release()
		}
		before := r.closedness(t)
		r.bridge.kill()
		t0 := time.Now()
		down := r.l.start(r.relay(), "true")
		r.bridge = r.startBridge(t)
		if i%2 == 0 {
			release()
		}
		if running.wait(90*time.Second) && (running.code != 0 || running.stdout.String() != "done\n") {
			res.notes = append(res.notes, fmt.Sprintf("round %d: the running command's answer: exit %d %q %q", i, running.code, running.stdout.String(), running.stderr.String()))
		}
		down.wait(90 * time.Second)
		if after := r.closedness(t); after < before {
			res.moreOpen++
		}
		d, err := r.l.probe(r.relay(), t0)
		if err != nil {
			t.Fatalf("round %d: %v\nbridge log:\n%s", i, err, r.bridge.log)
		}
		res.recover = append(res.recover, d)
	}
	r.finish(res)
	return []*chaosResult{res}
}
