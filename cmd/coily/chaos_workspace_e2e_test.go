package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/testserver"
)

// chaosWorkspacePolicy: the local operator plants in workspace hostile
// (plantgit may write git data) and runs sleep in a temporary workspace
// (commands in one named workspace run one at a time); sandbox demo,
// relayed through the bridge, runs sh in workspace other.
const chaosWorkspacePolicy = `version: 1
limits: {concurrency: 16, per_principal: 16}
workspaces: {hostile: %s, other: %s}
roles:
  operator:
    permissions: [status, relay, keys, exec, lockout, unlock]
    commands: [plant, plantgit, sleeper]
    sandboxes: [demo]
  demo-sandbox:
    permissions: [exec]
    commands: [other]
grants:
  - principals: ["sandbox:demo"]
    roles: [demo-sandbox]
commands:
  - {name: plant, binary: /bin/sh, args: ["**"], flags: any, workspace: hostile}
  - {name: plantgit, binary: /usr/bin/env, args: ["**"], flags: any, workspace: hostile, writable: [.git]}
  - {name: sleeper, binary: /bin/sleep, args: ["*"]}
  - {name: other, binary: /bin/sh, args: ["**"], flags: any, workspace: other}
`

// hostilePlant is what a command leaves in its workspace: argv before the
// script, and the script for the n-th plant of the run.
type hostilePlant struct {
	name   string
	argv   []string
	script func(n int) string
	// left reports whether the plant is still where the owner's tools
	// (git, a shell in the workspace) would find it.
	left func(ws string, n int) bool
}

// lexists reports whether path exists (not following a link).
func lexists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// longName is the 250-byte name of the n-th plant's repository.
func longName(n int) string {
	p := fmt.Sprintf("r%d-", n)
	return p + strings.Repeat("x", 250-len(p))
}

var hostilePlants = []hostilePlant{
	{"FIFOs at a fake repository's HEAD and config", []string{"/bin/sh"}, func(n int) string {
		return fmt.Sprintf("mkdir -p fifo%[1]d/objects fifo%[1]d/refs && mkfifo fifo%[1]d/HEAD fifo%[1]d/config", n)
	}, func(ws string, n int) bool { return lexists(filepath.Join(ws, fmt.Sprintf("fifo%d/HEAD", n))) }},
	{"a bare repository under a 250-byte name", []string{"/bin/sh"}, func(n int) string {
		return "git init -q --bare " + longName(n)
	}, func(ws string, n int) bool { return lexists(filepath.Join(ws, longName(n))) }},
	{"70 nested directories", []string{"/bin/sh"}, func(n int) string {
		return fmt.Sprintf("mkdir -p deep%d%s && echo x > deep%d%s/f", n, strings.Repeat("/d", 70), n, strings.Repeat("/d", 70))
	}, func(ws string, n int) bool {
		return lexists(filepath.Join(ws, fmt.Sprintf("deep%d%s/f", n, strings.Repeat("/d", 70))))
	}},
	{"chmod 0777 .", []string{"/bin/sh"}, func(int) string { return "chmod 0777 ." }, func(ws string, _ int) bool {
		fi, err := os.Stat(ws)
		return err == nil && fi.Mode().Perm()&0o002 != 0
	}},
	{"an interactive rebase under .git/rebase-merge (writable: [.git])", []string{"/usr/bin/env", "sh"}, func(int) string {
		return "mkdir -p .git/rebase-merge && echo 'exec touch pwned' > .git/rebase-merge/git-rebase-todo && echo onto > .git/rebase-merge/onto"
	}, func(ws string, _ int) bool { return lexists(filepath.Join(ws, ".git/rebase-merge")) }},
}

// workspaceRig is a lockoutRig with two named workspaces and a ledger
// whose run log is in workspace other (where sandbox demo's commands
// run).
type workspaceRig struct {
	*lockoutRig
	hostile, other string
	l              *chaosLedger
}

func newWorkspaceRig(t *testing.T) *workspaceRig {
	t.Helper()
	requireBwrap(t)
	root := shortDir(t)
	w := &workspaceRig{hostile: filepath.Join(root, "hostile"), other: filepath.Join(root, "other")}
	for _, d := range []string{w.hostile, w.other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", w.hostile).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	testserver.SandboxWorkspace(t, w.hostile)
	testserver.SandboxWorkspace(t, w.other)
	w.lockoutRig = newLockoutRig(t, fmt.Sprintf(chaosWorkspacePolicy, w.hostile, w.other))
	w.l = newChaosLedger(t)
	w.l.runlog = filepath.Join(w.other, "runs.log")
	return w
}

func (w *workspaceRig) grpc() chaosTransport {
	return chaosTransport{name: "gRPC", args: []string{"--socket", w.serve.socket}}
}

// statusWithin runs `coily status` with a bound; ok is false when it did
// not answer within it.
func (w *workspaceRig) statusWithin(within time.Duration) (locked, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	b, err := exec.CommandContext(ctx, coilyBin, "--socket", w.serve.socket, "status").Output()
	return chaosLockedRe.Match(b), err == nil
}

// What a command leaves in its own workspace blocks nothing else: per
// round, every plant (in a random order) is made by an allowed command in
// workspace hostile while, at a random moment, sandbox demo's command in
// workspace other is relayed through the bridge, a sleeper starts (in a
// temporary workspace) and Status is asked. After each: the plant was answered within the
// bound, Status answers, demo's command ran, the server did not lock
// itself out (it may refuse workspace hostile alone), and a lockout kills
// the sleeper. The next command in workspace hostile is noted.
func chaosHostileWorkspace(t *testing.T, rounds int) []*chaosResult {
	w := newWorkspaceRig(t)
	rng := chaosRand(t)
	res := &chaosResult{name: "hostile workspace (5 plants a round)", rounds: rounds}
	a := &chaosAudit{}
	seen := map[string]map[string]int{} // plant -> "plant: …" / "next: …" -> count
	n := 0
rounds:
	for i := range rounds {
		for _, p := range rng.Perm(len(hostilePlants)) {
			n++
			plant := hostilePlants[p]
			if seen[plant.name] == nil {
				seen[plant.name] = map[string]int{}
			}
			what := fmt.Sprintf("round %d, %s", i, plant.name)
			blocked := w.plantRound(t, rng, what, plant.argv, plant.script(n), res, a, seen[plant.name])
			if plant.left(w.hostile, n) {
				seen[plant.name]["left in place"]++
			}
			if blocked {
				res.notes = append(res.notes, "stopped after "+what+": the server is blocked")
				break rounds
			}
		}
	}
	w.serve.stop()
	cnt := w.l.check(w.dir)
	res.lost += cnt.lost
	res.twice += cnt.twice
	for _, note := range cnt.notes {
		if !strings.Contains(note, " unanswered: ") { // counted where it happened
			res.notes = append(res.notes, note)
		}
	}
	a.check(t, w.dir, res)
	for _, plant := range hostilePlants {
		res.notes = append(res.notes, plant.name+": "+countsText(seen[plant.name]))
	}
	res.notes = append(res.notes, "seconds to recover: from the plant's answer to the next command in workspace hostile answered exit 0")
	return []*chaosResult{res}
}

// plantBound is how long a plant round's requests have, together, to be
// answered.
const plantBound = 30 * time.Second

// plantRound plants once and checks what follows; see
// chaosHostileWorkspace. It reports whether a request went unanswered
// within the bound (the server is blocked: the rounds stop there).
func (w *workspaceRig) plantRound(t *testing.T, rng *rand.Rand, what string, argv []string, script string, res *chaosResult, a *chaosAudit, seen map[string]int) bool {
	t.Helper()
	deadline := time.Now().Add(plantBound)
	left := func() time.Duration { return max(time.Until(deadline), 100*time.Millisecond) }
	unanswered0 := res.unanswered
	note := func(format string, args ...any) {
		res.notes = append(res.notes, what+": "+fmt.Sprintf(format, args...))
	}
	plant := w.l.startArgv(w.grpc(), argv, script)
	time.Sleep(randDuration(rng, 0, 200*time.Millisecond)) // the moment, not synchronisation
	other := w.l.start(w.relay(), "echo other")
	m := sleepMarker(rng)
	a.add(m)
	sleeper := w.startExec(t, "/bin/sleep", m)
	res.requests += 6 // plant, demo's command, sleeper, status twice, lockout

	if _, ok := w.statusWithin(left()); !ok {
		res.unanswered++
		note("Status was not answered while the plant ran")
	}
	if !plant.wait(left()) {
		res.unanswered++
		note("the plant was not answered within %s", plantBound)
	}
	answeredAt := time.Now()
	seen["plant: "+callText(plant)]++
	if !other.wait(left()) {
		res.unanswered++
		note("demo's command in workspace other was not answered within %s of the plant", plantBound)
	} else if other.code != 0 || other.stdout.String() != "other\n" {
		res.othersRefused++
		note("demo's command in workspace other: %s %q", callText(other), other.stderr.String())
	}
	if locked, ok := w.statusWithin(left()); !ok {
		res.unanswered++
		note("Status was not answered after the plant")
	} else if locked {
		res.othersRefused++
		note("the server locked itself out")
	}
	w.lockoutKills(t, sleeper, m, left, res, note)

	res.requests++
	next := w.l.start(w.grpc(), "true")
	if !next.wait(left()) {
		res.unanswered++
		note("the next command in workspace hostile was not answered within %s of the plant", plantBound)
	}
	seen["next command there: "+callText(next)]++
	if next.answered && next.code == 0 {
		res.recover = append(res.recover, time.Since(answeredAt))
	}
	return res.unanswered > unanswered0
}

// lockoutKills checks that the sleeper runs, then that a lockout kills it
// within its grace and its Exec is answered; it unlocks after.
func (w *workspaceRig) lockoutKills(t *testing.T, sleeper *chaosExec, m string, left func() time.Duration, res *chaosResult, note func(string, ...any)) {
	t.Helper()
	select {
	case <-sleeper.started:
	case <-time.After(left()):
	}
	switch {
	case sleeper.id == "":
		res.othersRefused++
		note("the sleeper did not start: %s", sleeper.outcome())
	case !waitRunning([]string{m}, 10*time.Second):
		note("the sleeper did not run within 10 s")
	}
	tLock := time.Now()
	if err := w.lockout(left()); err != nil {
		res.unanswered++
		note("the lockout was not answered: %v", err)
	}
	if alive := survivors(tLock, []string{m}); len(alive) > 0 {
		res.survived++
		note("the sleeper was alive %s after the lockout", time.Since(tLock).Round(time.Millisecond))
	}
	if !sleeper.answered(left()) {
		res.unanswered++
		note("the sleeper's Exec was not answered after the lockout")
	}
	w.unlock(t)
}

// callText is a call's answer as a short text.
func callText(c *chaosCall) string {
	switch {
	case !c.answered:
		return "unanswered"
	case c.refusal != "":
		return "refused " + c.refusal
	}
	return fmt.Sprintf("exit %d", c.code)
}
