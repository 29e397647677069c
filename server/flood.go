package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/audit"
)

// Refusal floods (docs/operations.md, "Audit log"): each caller's first
// floodBudget refusals of a floodWindow are recorded one by one; the rest
// are counted, and one refusal.summary record per caller and window says
// how many, by code. A flood from one caller grows the log by kilobytes,
// not megabytes, and every refusal is still counted.
const (
	floodWindow = 10 * time.Second
	floodBudget = 20
	// EventRefusalSummary is the record of refusals counted, not written.
	EventRefusalSummary = "refusal.summary"
)

type floodGuard struct {
	mu      sync.Mutex
	callers map[string]*floodCount
}

type floodCount struct {
	start       time.Time // the window's start
	recorded    int
	suppressed  int
	codes       map[string]int
	first, last time.Time // of the suppressed ones
	sample      audit.Record
}

// admit says whether a refusal by caller at now is recorded on its own; if
// not, it is counted for the caller's summary.
func (g *floodGuard) admit(caller string, r audit.Record, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.callers == nil {
		g.callers = map[string]*floodCount{}
	}
	c := g.callers[caller]
	if c == nil || now.Sub(c.start) >= floodWindow && c.suppressed == 0 {
		c = &floodCount{start: now, codes: map[string]int{}}
		g.callers[caller] = c
	}
	if c.recorded < floodBudget && now.Sub(c.start) < floodWindow {
		c.recorded++
		return true
	}
	if c.suppressed == 0 {
		c.first, c.sample = now, r
	}
	c.suppressed++
	c.codes[r.Code]++
	c.last = now
	return false
}

// due takes the counts whose window has ended (all of them with force).
func (g *floodGuard) due(now time.Time, force bool) map[string]*floodCount {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]*floodCount{}
	for caller, c := range g.callers {
		if !force && now.Sub(c.start) < floodWindow {
			continue
		}
		if c.suppressed > 0 {
			out[caller] = c
		}
		delete(g.callers, caller)
	}
	return out
}

// flushRefusals writes the summaries that are due.
func (s *Server) flushRefusals(force bool) {
	due := s.flood.due(s.cfg.Now(), force)
	for _, caller := range slices.Sorted(maps.Keys(due)) {
		c := due[caller]
		var codes []string
		for _, code := range slices.Sorted(maps.Keys(c.codes)) {
			codes = append(codes, code+"="+strconv.Itoa(c.codes[code]))
		}
		rec := audit.Record{Event: EventRefusalSummary, Principal: c.sample.Principal, Transport: c.sample.Transport,
			Peer: c.sample.Peer, Decision: "refuse", Code: c.sample.Code,
			Reason: fmt.Sprintf("%d more refusals of this caller were counted, not recorded one by one", c.suppressed),
			Details: map[string]string{"count": strconv.Itoa(c.suppressed), "codes": strings.Join(codes, ","),
				"first": c.first.UTC().Format(time.RFC3339Nano), "last": c.last.UTC().Format(time.RFC3339Nano),
				"recorded_in_window": strconv.Itoa(c.recorded), "sample_method": c.sample.Method}}
		if _, err := s.cfg.Audit.Append(context.Background(), rec); err != nil {
			s.log.Error("audit write failed: refusal summary", "caller", caller, "count", c.suppressed, "err", err)
		}
	}
}

// summariseRefusals flushes due summaries until the server shuts down,
// then flushes everything.
func (s *Server) summariseRefusals() {
	defer s.bg.Done()
	t := time.NewTicker(floodWindow / 2)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushRefusals(false)
		case <-s.quit:
			s.flushRefusals(true)
			return
		}
	}
}

// floodKey names the caller of a refusal: its principal, else its peer.
func floodKey(r audit.Record) string {
	if r.Principal != "" {
		return r.Principal
	}
	return r.Transport + " " + r.Peer
}
