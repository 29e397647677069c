package notify

import (
	"maps"
	"sync"
	"time"
)

// Refusals the count leaves out: while the server is locked out or
// paused every call is refused, as the owner asked.
var uncountedCodes = map[string]bool{"lockout-active": true, "pause-active": true}

// Bounds of the refusal count.
const (
	// maxRefusalCallers bounds the callers counted at once; past it, the
	// newcomers are counted together as overflowCaller.
	maxRefusalCallers = 4096
	overflowCaller    = "(too many callers)"
	// maxCodes bounds the codes counted per caller (refusal codes are a
	// fixed set; this only guards the map).
	maxCodes = 32
)

// refusalCounter counts each caller's refusals in fixed windows: a window
// opens at a caller's first refusal and lasts the policy's
// refusals.window; the refusal that brings the count to refusals.count
// makes one notification, and the window's later refusals make none.
type refusalCounter struct {
	mu      sync.Mutex
	callers map[string]*refusalWindow
}

type refusalWindow struct {
	start, last time.Time
	count       int
	codes       map[string]int
	notified    bool
}

// add counts r at now and returns the notification it triggers, if any.
func (c *refusalCounter) add(r Refusal, now time.Time, threshold int, window time.Duration) (*Refusals, bool) {
	if uncountedCodes[r.Code] {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.callers == nil {
		c.callers = map[string]*refusalWindow{}
	}
	caller := r.Caller
	w := c.callers[caller]
	if w == nil || now.Sub(w.start) >= window || now.Before(w.start) {
		if w == nil && len(c.callers) >= maxRefusalCallers/2 {
			c.pruneLocked(now, window)
		}
		if w == nil && len(c.callers) >= maxRefusalCallers {
			caller = overflowCaller
			if w = c.callers[caller]; w != nil && now.Sub(w.start) < window && !now.Before(w.start) {
				return c.countLocked(caller, w, r, now, threshold, window)
			}
		}
		w = &refusalWindow{start: now, codes: map[string]int{}}
		c.callers[caller] = w
	}
	return c.countLocked(caller, w, r, now, threshold, window)
}

func (c *refusalCounter) countLocked(caller string, w *refusalWindow, r Refusal, now time.Time, threshold int, window time.Duration) (*Refusals, bool) {
	w.count++
	w.last = now
	if _, ok := w.codes[r.Code]; ok || len(w.codes) < maxCodes {
		w.codes[r.Code]++
	}
	if w.notified || w.count < threshold {
		return nil, false
	}
	w.notified = true
	return &Refusals{Caller: caller, Count: w.count, Codes: maps.Clone(w.codes), First: w.start, Last: now, Window: window}, true
}

// pruneLocked forgets callers whose window has ended.
func (c *refusalCounter) pruneLocked(now time.Time, window time.Duration) {
	for k, w := range c.callers {
		if now.Sub(w.start) >= window {
			delete(c.callers, k)
		}
	}
}
