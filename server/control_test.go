package server_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// startRunning starts an Exec and returns once the command has printed its
// first output, with a channel that delivers the Exec's outcome.
func startRunning(t *testing.T, in *testserver.Instance, argv ...string) <-chan result {
	t.Helper()
	started := make(chan struct{})
	done := make(chan result, 1)
	w := &signalWriter{first: started}
	go func() {
		exit, err := in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: argv}, w, w)
		done <- result{exit: exit, err: err}
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("exec ended before it started: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("command did not start")
	}
	return done
}

type signalWriter struct {
	once  sync.Once
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.first) })
	return len(p), nil
}

func TestLockoutKillsEverythingAndPersists(t *testing.T) {
	in := testserver.Start(t, testserver.Options{}) // default 5 s SIGTERM→SIGKILL grace
	var pids []int
	var runs []<-chan result
	for i, script := range []string{
		"sleep 30 & echo $! > %[1]s; echo $$ >> %[1]s; echo go; wait",
		"sleep 30 & echo $! > %[1]s; echo $$ >> %[1]s; echo go; wait",
		// This one ignores SIGTERM (and so does its sleep): only SIGKILL ends it.
		"trap '' TERM; sleep 30 & echo $! > %[1]s; echo $$ >> %[1]s; echo go; wait; wait",
	} {
		pidFile := filepath.Join(in.StateDir, fmt.Sprintf("pids%d", i))
		runs = append(runs, startRunning(t, in, "/bin/sh", "-c", fmt.Sprintf(script, pidFile)))
		pids = append(pids, readPids(t, pidFile)...)
	}

	start := time.Now()
	resp, err := in.Client.API.Lockout(context.Background(), &coilyv1.LockoutRequest{Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetKilled() != 3 || !resp.GetLockout().GetActive() {
		t.Fatalf("lockout response %v", resp)
	}
	waitGone(t, pids, 6*time.Second-time.Since(start))
	for _, done := range runs {
		r := <-done
		wantCode(t, r.err, refusal.LockoutActive)
	}
	if r := execArgv(t, in, "/bin/true"); r.err == nil {
		t.Fatal("exec allowed while locked out")
	} else {
		wantCode(t, r.err, refusal.LockoutActive)
	}

	// A restarted server is still locked.
	in = in.Restart(testserver.Options{})
	wantCode(t, execArgv(t, in, "/bin/true").err, refusal.LockoutActive)
	st, err := in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
	if err != nil || !st.GetLockout().GetActive() || st.GetLockout().GetReason() != "test" {
		t.Fatalf("status after restart: %v %v", st, err)
	}

	if _, err := in.Client.API.Unlock(context.Background(), &coilyv1.UnlockRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := execArgv(t, in, "/bin/echo", "back"); r.err != nil || r.stdout != "back\n" {
		t.Fatalf("after unlock: %q %v", r.stdout, r.err)
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "lockout" })
	if rec.Killed != 3 || rec.Decision != "allow" || rec.Principal == "" {
		t.Fatalf("lockout audit record %+v", rec)
	}
}

func TestPauseLetsRunningFinish(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	marker := filepath.Join(in.StateDir, "finish")
	running := startRunning(t, in, "/bin/sh", "-c",
		"echo started; while [ ! -e "+marker+" ]; do sleep 0.01; done; echo finished")

	resp, err := in.Client.API.Pause(context.Background(), &coilyv1.PauseRequest{Reason: "coffee"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRunning() != 1 {
		t.Fatalf("pause response %v", resp)
	}
	wantCode(t, execArgv(t, in, "/bin/true").err, refusal.PauseActive)

	touch(t, marker)
	if r := <-running; r.err != nil || r.exit.GetExitCode() != 0 {
		t.Fatalf("running command did not complete: %+v", r)
	}
	// Pause survives a restart too.
	in = in.Restart(testserver.Options{})
	wantCode(t, execArgv(t, in, "/bin/true").err, refusal.PauseActive)
	if _, err := in.Client.API.Resume(context.Background(), &coilyv1.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := execArgv(t, in, "/bin/true"); r.err != nil {
		t.Fatal(r.err)
	}
}

// Lockout wins over pause, and a second lockout keeps the first's record.
func TestLockoutWhilePaused(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	ctx := context.Background()
	if _, err := in.Client.API.Pause(ctx, &coilyv1.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	resp, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "second"})
	if err != nil || resp.GetLockout().GetReason() != "first" {
		t.Fatalf("second lockout: %v %v", resp, err)
	}
	wantCode(t, execArgv(t, in, "/bin/true").err, refusal.LockoutActive)
}
