package notify

import (
	"sync"
	"time"
)

// CheckpointEvery is how often Checkpoints copies a checkpoint that does
// not follow a stop control's record.
const CheckpointEvery = time.Hour

// Checkpoints sends copies of the audit log's signed checkpoints through
// the notifications (event checkpoint): every one signed right after a
// change of what the trust point admits (a lockout, a pause, an unlock,
// a resume, a reload, a restore, a repair), others at most once per
// CheckpointEvery. A copy checks nothing itself: it is evidence for
// `coily audit verify --checkpoint`, which proves the log still holds
// what it commits to.
type Checkpoints struct {
	Notify func(Event)
	Now    func() time.Time // nil: time.Now

	mu   sync.Mutex
	last time.Time
}

// Offer is told every checkpoint signed; stop says it follows a change of
// the stop state.
func (c *Checkpoints) Offer(signed []byte, stop bool) {
	if c == nil || c.Notify == nil {
		return
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	c.mu.Lock()
	send := stop || c.last.IsZero() || now.Sub(c.last) >= CheckpointEvery
	if send {
		c.last = now
	}
	c.mu.Unlock()
	if send {
		c.Notify(Event{Kind: KindCheckpoint, Time: now, Checkpoint: append([]byte(nil), signed...)})
	}
}
