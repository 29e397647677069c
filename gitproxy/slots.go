package gitproxy

import (
	"sync"

	"coily.dev/coily/refusal"
)

// pushSlots bounds the pushes in flight, in all and per principal: each
// holds a private repository and a quarantine of up to a push's bound on
// disk, and git processes, for as long as its approval waits.
type pushSlots struct {
	mu       sync.Mutex
	total    int
	by       map[string]int
	max, per int
}

// acquire takes a slot for principal, or refuses when none is free; the
// function returned gives it back.
func (s *pushSlots) acquire(principal string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.by[principal] >= s.per:
		return nil, refusal.New(refusal.RateLimit, "%s has %d pushes in flight, the most the proxy takes from one caller", principal, s.per)
	case s.total >= s.max:
		return nil, refusal.New(refusal.RateLimit, "the proxy has %d pushes in flight, the most it takes", s.max)
	}
	if s.by == nil {
		s.by = map[string]int{}
	}
	s.total++
	s.by[principal]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if s.by[principal]--; s.by[principal] == 0 {
			delete(s.by, principal)
		}
	}, nil
}

// inFlight is the number of pushes in flight.
func (s *pushSlots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}
