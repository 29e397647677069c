package fleet_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/fleet"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// startSigning starts n again, signing checkpoints as coily serve does.
func (n *node) startSigning(t *testing.T) {
	t.Helper()
	s := n.store
	n.Instance = testserver.Start(t, testserver.Options{StateDir: n.StateDir, KillGrace: killGrace,
		SandboxUIDs: server.UIDRange{Off: true}, AuditMaxFileSize: 2 << 10, Checkpoints: true,
		Shared: func(*store.DB) store.Shared { return s }, Fleet: fleet.New(fleet.Config{Store: s, Logger: quiet})})
}

// On etcd, each host keeps the checkpoint of its own log in its own state
// file: one host restarting after another locked out and unlocked, and
// after records of its own, raises no alarm; its log cut back is found at
// its start, and the lockout it comes up with is the fleet's.
func TestFleetHostChecksItsOwnCheckpoint(t *testing.T) {
	ns := serversWith(t, testserver.Options{AuditMaxFileSize: 2 << 10, Checkpoints: true}, etcdstore.Config{})
	a, b := ns[0], ns[1]
	for range 6 {
		if err := a.exec("/bin/true"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.lockout(t, "B locks out"); err != nil {
		t.Fatal(err)
	}
	everyRefuses(t, ns[:], "B's lockout reaches every server")
	b.unlock(t)
	everyAdmits(t, ns[:], "B's unlock reaches every server")
	a.WaitAudit(t, func(r audit.Record) bool { return r.Event == audit.EventUnlockRemote })
	for range 2 {
		a.Stop()
		a.startSigning(t)
		everyAdmits(t, ns[:], "every server admits after A's restart")
	}
	ca, err := a.Store().AuditCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.Store().AuditCheckpoint()
	if err != nil || string(ca.Signed) == string(cb.Signed) {
		t.Fatalf("A's and B's checkpoints: %q %q %v", ca.Signed, cb.Signed, err)
	}
	if recs, err := audit.TailMatching(a.Audit.Dir(), 1, func(r audit.Record) bool { return r.Event == audit.EventStateRestore }); err != nil || len(recs) > 0 {
		t.Fatalf("a false alarm on A: %+v %v", recs, err)
	}

	a.Stop()
	files, _ := filepath.Glob(filepath.Join(a.StateDir, "audit", "*.jsonl"))
	newest := files[0]
	for _, f := range files {
		if auditOrder(f) > auditOrder(newest) {
			newest = f
		}
	}
	os.Remove(newest)
	a.startSigning(t)
	everyRefuses(t, ns[:], "A's log found short locks out every server")
	st, err := a.store.Stops()
	if err != nil || !strings.Contains(st.Lockout.Reason, "does not hold the checkpoint") {
		t.Fatalf("the fleet's lockout: %+v %v", st.Lockout, err)
	}
}

// auditOrder sorts YYYY-MM.jsonl before YYYY-MM.0001.jsonl.
func auditOrder(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".jsonl")
	month, part, _ := strings.Cut(base, ".")
	return month + "." + strings.Repeat("0", 4-len(part)) + part
}
