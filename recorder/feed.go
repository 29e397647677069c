package recorder

import (
	"sync"

	"coily.dev/coily/audit"
)

// auditFeedBuffer bounds how far a subscriber may lag before it is cut
// off (it reconnects and reads the backlog again).
const auditFeedBuffer = 256

// auditFeed hands every record the recorder appends to the subscribers of
// the live audit log (the web console's stream). Records arrive in the
// order their appends finished, which concurrent appends may make differ
// from their sequence; a subscriber orders by Seq.
type auditFeed struct {
	mu     sync.Mutex
	subs   map[chan audit.Record]struct{}
	closed bool
}

// subscribe returns a channel of the records appended from now on, and
// the function that ends the subscription. The channel is closed when the
// subscriber falls more than auditFeedBuffer records behind, when the
// server shuts down, or by the returned function.
func (f *auditFeed) subscribe() (<-chan audit.Record, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan audit.Record, auditFeedBuffer)
	if f.closed {
		close(ch)
		return ch, func() {}
	}
	if f.subs == nil {
		f.subs = map[chan audit.Record]struct{}{}
	}
	f.subs[ch] = struct{}{}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// publish sends r to every subscriber, never blocking: one too far behind
// is dropped.
func (f *auditFeed) publish(r audit.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- r:
		default:
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// close ends every subscription and refuses new ones (Shutdown).
func (f *auditFeed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for ch := range f.subs {
		delete(f.subs, ch)
		close(ch)
	}
}
