package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/procs"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
)

// chaosLockoutPolicy runs /bin/sh in bubblewrap for the local operator
// and for sandbox demo, whose requests the operator relays.
const chaosLockoutPolicy = `version: 1
limits: {concurrency: 16, per_principal: 16}
roles:
  operator:
    permissions: [status, relay, keys, exec, lockout, unlock]
    commands: [sh]
    sandboxes: [demo]
  demo-sandbox:
    permissions: [exec]
    commands: [sh]
grants:
  - principals: ["sandbox:demo"]
    roles: [demo-sandbox]
commands:
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, timeout: 5m}
`

// lockoutRig is a server whose commands run in bubblewrap, a bridge for
// sandbox demo's folder, and a client on the local socket.
type lockoutRig struct {
	relayRig
	keyFile string
	bridge  *bridgeProc
	c       *client.Client
}

func newLockoutRig(t *testing.T, policyText string) *lockoutRig {
	t.Helper()
	requireBwrap(t)
	r := &lockoutRig{relayRig: relayRig{dir: shortDir(t), mount: shortDir(t)}}
	r.pol = filepath.Join(shortDir(t), "policy.yaml")
	r.keyFile = filepath.Join(shortDir(t), "demo.key")
	if err := os.WriteFile(r.pol, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	r.serve = startServe(t, r.dir, r.pol)
	c, err := client.DialLocal(r.serve.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r.c = c
	k, err := c.API.IssueKey(context.Background(), &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	r.saveKey(t, k.GetKey())
	r.bridge = r.startBridge(t)
	return r
}

// saveKey keeps demo's key for the requests the test signs and writes it
// where `coily exec` in sandbox mode reads it.
func (r *lockoutRig) saveKey(t *testing.T, k *coilyv1.SandboxKey) {
	t.Helper()
	r.key = k.GetSecret()
	if err := folder.WriteKeyFile(r.keyFile, folder.KeyFile{Sandbox: "demo", Key: k.GetSecret(), Generation: int(k.GetGeneration())}); err != nil {
		t.Fatal(err)
	}
}

// relay is how `coily exec` reaches the server from inside sandbox demo.
func (r *lockoutRig) relay() chaosTransport {
	return chaosTransport{name: "relay", env: []string{"SANDBOX_RUNTIME=1", "COILY_MOUNT=" + r.mount, "COILY_KEY_FILE=" + r.keyFile}}
}

// lockout locks the server out; it reports whether it was answered
// within the bound.
func (r *lockoutRig) lockout(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := r.c.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "chaos"})
	return err
}

// unlock lifts the lockout and takes demo's new key (a lockout replaces
// every sandbox's).
func (r *lockoutRig) unlock(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.c.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: "chaos"}); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	k, err := r.c.API.RotateKeys(ctx, &coilyv1.RotateKeysRequest{Sandbox: "demo"})
	if err != nil {
		t.Fatalf("rotate demo's key: %v", err)
	}
	r.saveKey(t, k.GetKey())
}

// chaosExec is one Exec over the local socket, through the Go client,
// whose request id ExecStarted gives.
type chaosExec struct {
	id      string
	started chan struct{} // closed at ExecStarted or at the end
	end     chan struct{} // closed when the stream ends
	exit    *coilyv1.ExecExit
	err     error
}

// startExec starts argv; the stream stays open until it ends (a cancel
// would stop the command and hide what a lockout left running).
func (r *lockoutRig) startExec(t *testing.T, argv ...string) *chaosExec {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	x := &chaosExec{started: make(chan struct{}), end: make(chan struct{})}
	st, err := r.c.API.Exec(ctx, &coilyv1.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(x.end)
		once := func() {
			select {
			case <-x.started:
			default:
				close(x.started)
			}
		}
		defer once()
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return // after the exit
			}
			if err != nil {
				x.err = err
				return
			}
			if s := m.GetStarted(); s != nil {
				x.id = s.GetRequestId()
				once()
			}
			if e := m.GetExit(); e != nil {
				x.exit = e
			}
		}
	}()
	return x
}

// answered waits for the stream's end; it reports whether it came.
func (x *chaosExec) answered(within time.Duration) bool {
	select {
	case <-x.end:
		return true
	case <-time.After(within):
		return false
	}
}

// outcome is the stream's end as a short text: "exit N" or the refusal.
func (x *chaosExec) outcome() string {
	if x.err != nil {
		return "refused " + string(refusal.FromStatus(x.err).Code)
	}
	if x.exit == nil {
		return "no exit"
	}
	return fmt.Sprintf("exit %d", x.exit.GetExitCode())
}

// put writes a request signed with demo's key under id into the shared
// folder, as a sandbox does.
func (r *lockoutRig) put(t *testing.T, id string, argv ...string) {
	t.Helper()
	bridgeE2EPut(t, r.mount, id, bridgeE2ERequest(t, r.key, id, argv...))
}

// awaitResponse reads the answer to id as soon as the bridge writes it,
// and deletes it, as the sandbox's client does; nil if none came within
// the bound.
func (r *lockoutRig) awaitResponse(id string, within time.Duration) <-chan *descriptor.Response {
	out := make(chan *descriptor.Response, 1)
	p := descriptor.Path(r.mount, descriptor.ResponsesDir, descriptor.FileName(id))
	go func() {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			_ = os.Remove(p)
			resp, err := descriptor.ParseResponse(data)
			if err != nil {
				resp = &descriptor.Response{Outcome: "unreadable", Message: err.Error()}
			}
			out <- resp
			return
		}
		out <- nil
	}()
	return out
}

// relayRPC relays a body under id straight to the server, as a second
// bridge on the same folder would, and writes its answer to the folder
// as a bridge does (never a duplicate's); nil if no answer came within
// the bound.
func (r *lockoutRig) relayRPC(t *testing.T, id string, within time.Duration, argv ...string) <-chan *coilyv1.RelayResponse {
	body := bridgeE2ERequest(t, r.key, id, argv...)
	out := make(chan *coilyv1.RelayResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		resp, err := r.c.API.Relay(ctx, &coilyv1.RelayRequest{Sandbox: "demo", Id: id, Request: body})
		switch {
		case err != nil && ctx.Err() == nil:
			// A definitive refusal is an answer: make it one (an id of
			// its code, for the notes).
			resp = &coilyv1.RelayResponse{Id: "refused " + string(refusal.FromStatus(err).Code)}
		case err == nil && !resp.GetDuplicate() && len(resp.GetResponse()) > 0:
			tmp := descriptor.Path(r.mount, descriptor.TmpDir, id+".answer")
			if os.WriteFile(tmp, resp.GetResponse(), 0o600) == nil {
				_ = os.Rename(tmp, descriptor.Path(r.mount, descriptor.ResponsesDir, descriptor.FileName(id)))
			}
		}
		out <- resp
	}()
	return out
}

// responseText is a relayed answer as a short text.
func responseText(resp *descriptor.Response) string {
	if resp.Outcome == descriptor.OutcomeExit {
		return fmt.Sprintf("exit %d", resp.ExitCode)
	}
	return resp.Outcome + " " + resp.Code
}

// sleepMarker is a duration for sleep(1) no other process has in its
// argv: the round's commands are found by it in /proc.
func sleepMarker(rng *rand.Rand) string {
	return fmt.Sprintf("600.%012d", rng.Int64N(1e12))
}

// markedProcs lists the live processes whose argv holds marker.
func markedProcs(marker string) []int {
	return procs.Live(func(p procs.Proc) bool { return strings.Contains(p.Cmdline, marker) })
}

// survivors waits until no process of markers is left, or the lockout's
// grace (and 2 s for the kernel to tear the sandboxes down) has passed
// since it; it kills and returns the markers whose processes outlived it.
func survivors(since time.Time, markers []string) []string {
	deadline := since.Add(server.DefaultKillGrace + 2*time.Second)
	for {
		var alive []string
		var pids []int
		for _, m := range markers {
			if p := markedProcs(m); len(p) > 0 {
				alive, pids = append(alive, m), append(pids, p...)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			return alive
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRunning waits (bounded) until each marker has a process.
func waitRunning(markers []string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		all := true
		for _, m := range markers {
			all = all && len(markedProcs(m)) > 0
		}
		if all {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chaosRand is the suite's random source: seeded from COILY_CHAOS_SEED
// when set (to replay a run), else from the clock; the seed is logged.
func chaosRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COILY_CHAOS_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("COILY_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("random seed %d (COILY_CHAOS_SEED replays it)", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// randDuration is a duration in [lo, hi).
func randDuration(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// The moments a round's lockout lands at.
var lockoutPhases = []string{"before admission", "mid set-up", "while running"}

// A lockout at a random moment while commands run in bubblewrap from the
// local socket and relayed through a real bridge, with the id tricks a
// caller controls: a relayed request under a running Exec's request id,
// and a second body under a running relayed id (through the folder, and
// straight to the server as a second bridge would). Every request is
// answered, every execution allowed has its exec.result, at most one body
// under an id runs, and no process of the round outlives the lockout's
// grace. Unlocked between rounds (demo's key is replaced).
func chaosLockoutEvery(t *testing.T, rounds int) []*chaosResult {
	r := newLockoutRig(t, chaosLockoutPolicy)
	rng := chaosRand(t)
	res := &chaosResult{name: "lockout of every transport, with id tricks", rounds: rounds}
	a := &chaosAudit{}
	outcomes := map[string]int{}
	var kills []time.Duration
	strays := 0
	relayedByPhase := make([][][]string, len(lockoutPhases))
	for i := range rounds {
		lr := r.lockoutRound(t, rng, i, res, a)
		relayedByPhase[i%len(lockoutPhases)] = append(relayedByPhase[i%len(lockoutPhases)], lr.relayed...)
		for k, v := range lr.outcomes {
			outcomes[k] += v
		}
		strays += lr.strays
		if lr.killedIn > 0 {
			kills = append(kills, lr.killedIn)
		}
		t0 := time.Now()
		r.unlock(t)
		d, err := r.probe(t, t0)
		if err != nil {
			t.Fatalf("round %d: %v\nserver log:\n%s\nbridge log:\n%s", i, err, r.serve.log, r.bridge.log)
		}
		res.recover = append(res.recover, d)
	}
	r.serve.stop()
	allowed := a.check(t, r.dir, res)
	var admitted []string
	for p, ids := range relayedByPhase {
		n := 0
		for _, bodies := range ids {
			if slices.ContainsFunc(bodies, func(m string) bool { _, ok := allowed[m]; return ok }) {
				n++
			}
		}
		admitted = append(admitted, fmt.Sprintf("%s %d of %d", lockoutPhases[p], n, len(ids)))
	}
	res.notes = append(res.notes, "relayed ids with a body allowed before the lockout: "+strings.Join(admitted, ", "))
	res.notes = append(res.notes, "answers: "+countsText(outcomes),
		"from the lockout to the last process of the round gone: "+medianMax(kills),
		fmt.Sprintf("answers the bridge wrote after the request's client had read its own (a second body's; no client reads them): %d", strays),
		"seconds to recover: from the unlock to an exec answered through the bridge with demo's new key")
	return []*chaosResult{res}
}

// lockoutRoundResult is what one round saw beyond the counts.
type lockoutRoundResult struct {
	outcomes map[string]int // "transport: answer" -> how many
	killedIn time.Duration  // from the lockout to no process left
	strays   int            // answers left in the folder that no client read
	relayed  [][]string     // the bodies relayed under each id
}

// lockoutRound runs one round: see chaosLockoutEvery.
func (r *lockoutRig) lockoutRound(t *testing.T, rng *rand.Rand, round int, res *chaosResult, a *chaosAudit) lockoutRoundResult {
	t.Helper()
	const bound = 30 * time.Second
	phase := round % len(lockoutPhases)
	out := lockoutRoundResult{outcomes: map[string]int{}}
	note := func(format string, args ...any) {
		res.notes = append(res.notes, fmt.Sprintf("round %d (%s): ", round, lockoutPhases[phase])+fmt.Sprintf(format, args...))
	}
	mLocal, mUnderL, mR, mDupFile, mDupRPC := sleepMarker(rng), sleepMarker(rng), sleepMarker(rng), sleepMarker(rng), sleepMarker(rng)
	out.relayed = [][]string{{mUnderL}, {mR, mDupFile, mDupRPC}}
	// Each command ignores SIGTERM half the time: only the kill after the
	// grace stops it. The local one always does.
	sleeper := func(m string) []string {
		script := "sleep " + m + "; :"
		if m == mLocal || rng.IntN(2) == 0 {
			script = "trap '' TERM; " + script
		}
		return []string{"/bin/sh", "-c", script}
	}
	all := []string{mLocal, mUnderL, mR, mDupFile, mDupRPC}
	a.add(all...)
	a.once(mR, mDupFile, mDupRPC)
	if phase < 2 {
		// Through the folder, a second body under an id is one only while
		// the bridge holds the first: renamed over a request not yet read,
		// it replaces it. Before R runs, only a second bridge (below) can
		// send one, racing the first.
		all = slices.DeleteFunc(all, func(m string) bool { return m == mDupFile })
	}

	local := r.startExec(t, sleeper(mLocal)...)
	select {
	case <-local.started:
	case <-time.After(bound):
	}
	if local.id == "" {
		t.Fatalf("the local Exec did not start: %v", local.err)
	}
	R := descriptor.NewID()
	underL := r.awaitResponse(local.id, bound)
	first := r.awaitResponse(R, bound)
	r.put(t, local.id, sleeper(mUnderL)...)
	r.put(t, R, sleeper(mR)...)
	res.requests += len(all) + 1 // the Exec, two relayed, the second bodies (their answer is R's), the lockout
	var dupRPC <-chan *coilyv1.RelayResponse
	seconds := func() {
		if phase == 2 {
			r.put(t, R, sleeper(mDupFile)...)
		}
		dupRPC = r.relayRPC(t, R, bound, sleeper(mDupRPC)...)
	}
	var delay time.Duration
	switch phase {
	case 0: // the relayed requests are on their way to the server
		delay = randDuration(rng, 0, 8*time.Millisecond)
		seconds()
	case 1: // bubblewrap being set up
		seconds()
		delay = randDuration(rng, 5*time.Millisecond, 250*time.Millisecond)
	case 2:
		if !waitRunning([]string{mLocal, mUnderL, mR}, 20*time.Second) {
			note("the commands did not all start within 20 s")
		}
		seconds()
		delay = randDuration(rng, 0, 100*time.Millisecond)
	}
	time.Sleep(delay) // the moment, not synchronisation
	tLock := time.Now()
	if err := r.lockout(bound); err != nil {
		res.unanswered++
		note("the lockout was not answered: %v", err)
	}
	alive := survivors(tLock, all)
	if len(alive) > 0 {
		res.survived += len(alive)
		note("alive %s after the lockout's grace: %s", (time.Since(tLock)).Round(time.Millisecond), strings.Join(alive, ", "))
	} else {
		out.killedIn = time.Since(tLock)
	}

	if !local.answered(bound) {
		res.unanswered++
		note("the local Exec was not answered")
	} else {
		out.outcomes["local Exec: "+local.outcome()]++
	}
	for _, w := range []struct {
		what string
		ch   <-chan *descriptor.Response
	}{{"relayed under the Exec's id", underL}, {"relayed", first}} {
		resp := <-w.ch
		if resp == nil {
			res.unanswered++
			note("%s: no answer within %s", w.what, bound)
			continue
		}
		out.outcomes[w.what+": "+responseText(resp)]++
	}
	if dup := <-dupRPC; dup == nil {
		res.unanswered++
		note("a second body relayed straight to the server: no answer within %s", bound)
	} else {
		what := "a second body relayed straight: "
		switch {
		case dup.GetDuplicate():
			what += "duplicate"
		case len(dup.GetResponse()) == 0:
			what += "RPC " + dup.GetId()
		default:
			if resp, err := descriptor.ParseResponse(dup.GetResponse()); err == nil {
				what += responseText(resp)
			}
		}
		out.outcomes[what]++
	}
	out.strays = r.settleFolder(t, note)
	return out
}

// settleFolder waits (bounded) until the bridge has handled every request
// file, then removes the answers nobody reads (a second body's, written
// once the first's was read) and returns how many there were.
func (r *lockoutRig) settleFolder(t *testing.T, note func(string, ...any)) int {
	t.Helper()
	reqs := descriptor.Path(r.mount, descriptor.RequestsDir, "")
	deadline := time.Now().Add(15 * time.Second)
	for {
		entries, _ := os.ReadDir(reqs)
		if len(entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			note("%d request files still unhandled after 15 s", len(entries))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resps := descriptor.Path(r.mount, descriptor.ResponsesDir, "")
	entries, _ := os.ReadDir(resps)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(resps, e.Name()))
	}
	return len(entries)
}

// probe runs a command through the bridge and one over the local socket
// until both succeed, and returns the time since t0 when they did.
func (r *lockoutRig) probe(t *testing.T, t0 time.Time) (time.Duration, error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for relayed, local := false, false; ; time.Sleep(20 * time.Millisecond) {
		if !relayed {
			id := descriptor.NewID()
			ch := r.awaitResponse(id, 30*time.Second)
			r.put(t, id, "/bin/sh", "-c", "echo ok")
			resp := <-ch
			relayed = resp != nil && resp.Outcome == descriptor.OutcomeExit && resp.ExitCode == 0
		}
		if !local {
			x := r.startExec(t, "/bin/sh", "-c", "true")
			local = x.answered(30*time.Second) && x.err == nil && x.exit.GetExitCode() == 0
		}
		if relayed && local {
			return time.Since(t0), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no exec succeeded within 60 s of the unlock (relayed %v, local %v)", relayed, local)
		}
	}
}

// countsText renders counts as "a ×2, b ×1" in key order.
func countsText(m map[string]int) string {
	if len(m) == 0 {
		return "not reached"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// medianMax is the median and the worst of ds in seconds.
func medianMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f s", benchstat.Percentile(ds, 50).Seconds(), benchstat.Percentile(ds, 100).Seconds())
}
