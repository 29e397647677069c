package stops

import (
	"context"
	"sync"
)

// Workspaces serialises commands in each named workspace: one command at
// a time in each. The zero value is ready to use.
type Workspaces struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the holder is done
}

// Lock waits until no other command runs in the workspace at root, or ctx
// ends. The returned function releases it.
func (w *Workspaces) Lock(ctx context.Context, root string) (func(), error) {
	for {
		w.mu.Lock()
		if w.busy == nil {
			w.busy = map[string]chan struct{}{}
		}
		held, ok := w.busy[root]
		if !ok {
			done := make(chan struct{})
			w.busy[root] = done
			w.mu.Unlock()
			return func() {
				w.mu.Lock()
				delete(w.busy, root)
				w.mu.Unlock()
				close(done)
			}, nil
		}
		w.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
