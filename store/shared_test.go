package store_test

import (
	"path/filepath"
	"testing"

	"coily.dev/coily/internal/storetest"
	"coily.dev/coily/store"
)

// counted is the state file as the contract sees it, counting its writes.
type counted struct{ *store.DB }

func (c counted) Writes(testing.TB) int64 { return store.PageWrites(c.DB) }

// The state file keeps the shared state's contract (one host).
func TestShared(t *testing.T) {
	storetest.Shared(t, storetest.ByPrune, func(t *testing.T) store.Shared {
		d, err := store.Open(filepath.Join(t.TempDir(), "coily.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return counted{d}
	})
}
