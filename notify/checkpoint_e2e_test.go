package notify_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/notify"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// TestServerSendsCheckpoints: the checkpoint signed right after a lockout
// reaches the phone's topic (low priority) and the webhook verbatim, and
// the copy saved to a file is one `coily audit verify --checkpoint`
// accepts (it opens with the host's verifier key and the log holds it);
// ordinary checkpoints come at most hourly (the first at start is one).
func TestServerSendsCheckpoints(t *testing.T) {
	ks, _ := fileKeystore(t)
	ntfy := standin.NtfyServer(t, ntfyToken)
	rcv := newReceiver(t)
	d, _ := start(t, notify.Config{Keystore: ks})
	pol := strings.NewReplacer("NTFY", ntfy.URL, "HOOK", rcv.URL).Replace(e2ePolicy)
	sub := standin.Subscribe(t, ntfy.URL, "coily", ntfyToken)
	in := testserver.Start(t, testserver.Options{Policy: pol, Keystore: ks, Notifier: d, Checkpoints: true})
	first := sub.Next(t, 5*time.Second) // the start's checkpoint
	if first.Title != "coily: audit checkpoint" || first.Priority != 1 {
		t.Fatalf("first message %+v", first)
	}
	if p := rcv.next(t, 5*time.Second); p.Event != notify.EventCheckpoint || p.Checkpoint != first.Message {
		t.Fatalf("webhook payload %+v", p)
	}
	if _, err := in.Notary.Sign(); err != nil { // nothing new: no copy
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := in.Client.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: "witnessed"}); err != nil {
		t.Fatal(err)
	}
	var cp *standin.NtfyMessage
	for cp == nil {
		m := sub.Next(t, 5*time.Second)
		if m.Title == "coily: audit checkpoint" {
			cp = &m
		}
	}
	signer, err := in.Store().AuditSigner()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "checkpoint")
	if err := os.WriteFile(file, []byte(cp.Message), 0o600); err != nil {
		t.Fatal(err)
	}
	saved, _ := os.ReadFile(file)
	c, err := audit.OpenCheckpoint(saved, signer.Verifier)
	if err != nil {
		t.Fatalf("the phone's copy does not open: %v\n%s", err, saved)
	}
	lockout := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "lockout" })
	if c.N < int64(lockout.Seq) {
		t.Fatalf("the copy covers %d records, the lockout is record %d", c.N, lockout.Seq)
	}
	if _, err := audit.VerifyCheckpoint(in.Audit.Dir(), c); err != nil {
		t.Fatalf("verify --checkpoint of the copy: %v", err)
	}
}
