package fleet_test

import (
	"context"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/fleet"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
)

// start starts n again on its state directory (stopped before, by Stop
// or stop), with a new sync of the same shared state.
func (n *node) start(t *testing.T) {
	t.Helper()
	s := n.store
	n.Instance = testserver.Start(t, testserver.Options{StateDir: n.StateDir, KillGrace: killGrace,
		SandboxUIDs: server.UIDRange{Off: true},
		Shared:      func(*store.DB) store.Shared { return s }, Fleet: fleet.New(fleet.Config{Store: s, Logger: quiet})})
}

func (n *node) pause(t *testing.T) {
	t.Helper()
	if _, err := n.Client.API.Pause(context.Background(), &coilyv1.PauseRequest{Reason: "test"}); err != nil {
		t.Fatalf("pause: %v", err)
	}
}

func (n *node) resume(t *testing.T) {
	t.Helper()
	if _, err := n.Client.API.Resume(context.Background(), &coilyv1.ResumeRequest{Reason: "test"}); err != nil {
		t.Fatalf("resume: %v", err)
	}
}

// wantStoredOpen fails unless the shared state holds neither a lockout
// nor a pause: what a restart just wrote (CrossCheck runs before Start
// returns).
func wantStoredOpen(t *testing.T, n *node, what string) {
	t.Helper()
	st, err := n.store.Stops()
	if err != nil || st.Lockout.Active || st.Pause.Active {
		t.Fatalf("%s: the shared state holds lockout %+v, pause %+v (%v): a restart put back what another host lifted",
			what, st.Lockout, st.Pause, err)
	}
}

// A restart does not put back a lockout or a pause another host lifted,
// whether the restarted server was up when it was lifted (it audits
// unlock.remote / resume.remote, and its log tells the truth) or down
// (the shared state's record of the unlock is newer than its log's
// lockout): every server admits after it.
func TestRestartKeepsARemoteLoosening(t *testing.T) {
	ns := servers(t)
	a, b := ns[0], ns[1]

	if err := a.lockout(t, "A locks out"); err != nil {
		t.Fatal(err)
	}
	everyRefuses(t, ns[:], "the lockout reaches every server")
	b.unlock(t)
	everyAdmits(t, ns[:], "B's unlock reaches every server")
	a.WaitAudit(t, func(r audit.Record) bool { return r.Event == audit.EventUnlockRemote })
	a.Stop()
	a.start(t)
	wantStoredOpen(t, a, "A restarted after B's unlock")
	everyAdmits(t, ns[:], "every server admits after A's restart")

	if err := a.lockout(t, "A locks out again"); err != nil {
		t.Fatal(err)
	}
	everyRefuses(t, ns[:], "the second lockout reaches every server")
	a.Stop()
	b.unlock(t) // A is down: its log never hears of it
	a.start(t)
	wantStoredOpen(t, a, "A restarted after an unlock while it was down")
	everyAdmits(t, ns[:], "every server admits after A's second restart")

	a.pause(t)
	for _, n := range ns {
		poll.Until(t, within, "the pause reaches every server", func() bool { return codeOf(n.exec("/bin/true")) == refusal.PauseActive })
	}
	b.resume(t)
	everyAdmits(t, ns[:], "B's resume reaches every server")
	a.WaitAudit(t, func(r audit.Record) bool { return r.Event == audit.EventResumeRemote })
	a.Stop()
	a.start(t)
	wantStoredOpen(t, a, "A restarted after B's resume")

	a.pause(t)
	poll.Until(t, within, "the pause reaches B", func() bool { return codeOf(b.exec("/bin/true")) == refusal.PauseActive })
	a.Stop()
	b.resume(t)
	a.start(t)
	wantStoredOpen(t, a, "A restarted after a resume while it was down")
	everyAdmits(t, ns[:], "every server admits at the end")
}
