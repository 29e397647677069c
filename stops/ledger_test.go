package stops

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// errLedger is a Ledger (a unit seam: the real one is etcdstore's, tested
// in fleet) whose holds all fail with err.
type errLedger struct{ err error }

func (l errLedger) Hold(context.Context, store.Slot, func(store.Tally) error) (func() error, error) {
	return nil, l.err
}
func (errLedger) OnLost(func()) {}

// A ledger's failure is never a slot: out of reach is state-unavailable,
// anything else internal, and the caps' own refusal is returned as is.
func TestLedgerErrors(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte("version: 1\nlimits: {concurrency: 2}\ncommands:\n  - {name: a, binary: /bin/echo}\n"))
	if err != nil {
		t.Fatal(err)
	}
	busy := refusal.New(refusal.ConcurrencyBusy, "full")
	for _, tt := range []struct {
		err  error
		want refusal.Code
	}{
		{fmt.Errorf("hold: %w: %w", store.ErrUnavailable, context.DeadlineExceeded), refusal.StateUnavailable},
		{fmt.Errorf("hold: %w", store.ErrCorrupt), refusal.Internal},
		{errors.New("closed"), refusal.Internal},
		{fmt.Errorf("hold: %w", busy), refusal.ConcurrencyBusy},
	} {
		c, err := New(Config{Store: &memStore{}, Ledger: errLedger{tt.err}})
		if err != nil {
			t.Fatal(err)
		}
		cl := slotExec(t, pol, "p", "a")
		if got := refusal.As(c.TakeSlot(cl)).Code; got != tt.want || cl.Held() {
			t.Errorf("TakeSlot with %v: %q (held %v), want %q", tt.err, got, cl.Held(), tt.want)
		}
		if err := c.AdmitWaiter(cl); err != nil {
			t.Fatal(err)
		}
		if tt.want == refusal.ConcurrencyBusy {
			continue // a wait for a slot goes on waiting
		}
		if got := refusal.As(c.WaitSlot(context.Background(), cl)).Code; got != tt.want || cl.Held() {
			t.Errorf("WaitSlot with %v: %q (held %v), want %q", tt.err, got, cl.Held(), tt.want)
		}
	}
}
