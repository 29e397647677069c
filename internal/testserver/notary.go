package testserver

import (
	"log/slog"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/audit/notary"
	"coily.dev/coily/notify"
	"coily.dev/coily/server"
	"coily.dev/coily/stateguard"
	"coily.dev/coily/store"
)

// startNotary signs the audit log's checkpoints as coily serve does: the
// state file's key (made at the first start), its last checkpoint
// trusted, every checkpoint kept in it, the log named origin.
// Copies go to notifier, when set.
func (in *Instance) startNotary(t testing.TB, notifier server.Notifier, origin string) {
	t.Helper()
	if origin == "" {
		origin = "coily/test"
	}
	s, err := in.db.EnsureAuditSigner(func() (string, string, error) { return audit.GenerateSigner(origin) }, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	trusted := stateguard.TrustedTree(in.db, in.Audit.Dir())
	var copies func([]byte, bool)
	if notifier != nil { // as coily serve sends them
		copies = (&notify.Checkpoints{Notify: notifier.Notify}).Offer
	}
	in.Notary, err = notary.Start(notary.Config{Log: in.Audit, Key: s.Key, Trusted: trusted, Every: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Copy: copies,
		Keep: func(signed []byte, at time.Time) error {
			return in.db.SetAuditCheckpoint(store.AuditCheckpoint{Signed: signed, At: at})
		}})
	if err != nil {
		t.Fatal(err)
	}
}
