package recorder

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/audit"
)

// Refusal floods (docs/operations.md, "Audit log"): each caller's first
// floodBudget refusals of a floodWindow are recorded one by one; past that,
// its refusals are gathered in batches, and each batch is written as one
// refusal.summary record (how many, by code) before any of its refusals is
// answered. So a flood from one caller grows the log by at most one summary
// per floodBatch — kilobytes, not megabytes, a second — and every refusal
// is counted in a durable record before its caller hears of it: a crash
// loses no count. The caller of a flood waits up to floodBatch for each
// answer, which slows the flood too.
const (
	floodWindow = 10 * time.Second
	floodBudget = 20
	floodBatch  = 100 * time.Millisecond
	// maxFloodCallers bounds the callers counted at once; floodOverflow is
	// the caller the others are counted as past it.
	maxFloodCallers = 8192
	floodOverflow   = "(too many callers)"
	// EventRefusalSummary is the record of refusals counted, not written.
	EventRefusalSummary = "refusal.summary"
)

// Window is the span over which a caller's refusals are counted against
// its budget (the connection cap's summaries use it too).
const Window = floodWindow

type floodGuard struct {
	mu      sync.Mutex
	callers map[string]*floodCount
}

// floodCount is one caller's refusals in the current window.
type floodCount struct {
	start     time.Time // the window's start
	recorded  int       // refusals recorded one by one in the window
	batch     *refusalBatch
	lastWrite time.Time // of the caller's last summary
}

// refusalBatch is a caller's refusals waiting for their summary record.
type refusalBatch struct {
	count       int
	codes       map[string]int
	first, last time.Time
	sample      audit.Record
	recorded    int // refusals recorded one by one in the window, for the record
	notBefore   time.Time
	done        chan struct{} // closed once the summary is written (or failed)
	rec         audit.Record
	err         error
}

// admit says whether a refusal by caller at now is recorded on its own
// (nil). If not, it returns the batch the refusal joined, and whether this
// refusal leads it (writes its summary).
func (g *floodGuard) admit(caller string, r audit.Record, now time.Time) (b *refusalBatch, lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.callers == nil {
		g.callers = map[string]*floodCount{}
	}
	c := g.callers[caller]
	if c == nil || now.Sub(c.start) >= floodWindow && c.batch == nil {
		if len(g.callers) > maxFloodCallers/2 {
			g.pruneLocked(now) // forget quiet callers
		}
		if c == nil && len(g.callers) >= maxFloodCallers {
			// Bounded: past this many callers at once, the newcomers share
			// one budget (and their refusals one batch).
			caller = floodOverflow
			if c = g.callers[caller]; c != nil {
				return g.countLocked(c, r, now)
			}
		}
		c = &floodCount{start: now, lastWrite: time.Time{}}
		if old := g.callers[caller]; old != nil {
			c.lastWrite = old.lastWrite
		}
		g.callers[caller] = c
	}
	return g.countLocked(c, r, now)
}

// countLocked counts a refusal of caller c (see admit).
func (g *floodGuard) countLocked(c *floodCount, r audit.Record, now time.Time) (b *refusalBatch, lead bool) {
	if c.recorded < floodBudget && now.Sub(c.start) < floodWindow {
		c.recorded++
		return nil, false
	}
	if c.batch == nil {
		c.batch = &refusalBatch{codes: map[string]int{}, first: now, sample: r,
			notBefore: c.lastWrite.Add(floodBatch), done: make(chan struct{})}
		lead = true
	}
	b = c.batch
	b.count++
	b.codes[r.Code]++
	b.last, b.recorded = now, c.recorded
	return b, lead
}

// pruneLocked forgets callers with nothing pending whose window has ended.
func (g *floodGuard) pruneLocked(now time.Time) {
	for k, c := range g.callers {
		if c.batch == nil && now.Sub(c.start) >= floodWindow {
			delete(g.callers, k)
		}
	}
}

// take closes caller's batch b to newcomers: later refusals start the
// next batch.
func (g *floodGuard) take(caller string, b *refusalBatch, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range []string{caller, floodOverflow} {
		if c := g.callers[k]; c != nil && c.batch == b {
			c.batch, c.lastWrite = nil, now
			return
		}
	}
}

// summarise answers a refusal that joined batch b: the leader waits out
// the batch, writes its summary and wakes the others; the others wait for
// it (or for their caller to go away: their count is in the batch). The
// record returned is the summary that counts the refusal.
func (r *Recorder) summarise(ctx context.Context, caller string, b *refusalBatch, lead bool) (audit.Record, error) {
	if !lead {
		select {
		case <-b.done:
			return b.rec, b.err
		case <-ctx.Done():
			return audit.Record{}, nil
		}
	}
	if wait := time.Until(b.notBefore); wait > 0 {
		time.Sleep(wait) // the leader's own answer waits too: that is the throttle
	}
	r.flood.take(caller, b, r.cfg.Now())
	b.rec, b.err = r.Append(context.WithoutCancel(ctx), summaryRecord(b), true)
	if b.err != nil {
		r.cfg.Log.Error("audit write failed: refusal summary", "caller", caller, "count", b.count, "err", b.err)
	}
	close(b.done)
	return b.rec, b.err
}

// summaryRecord is the audit record of a closed batch.
func summaryRecord(b *refusalBatch) audit.Record {
	return Summary(b.sample, b.count, b.codes, b.first, b.last, b.recorded)
}

// Summary is the refusal.summary record of count refusals like sample
// (its caller, method and code), by code, between first and last, after
// recorded refusals of the caller were recorded one by one.
func Summary(sample audit.Record, count int, byCode map[string]int, first, last time.Time, recorded int) audit.Record {
	var codes []string
	for _, code := range slices.Sorted(maps.Keys(byCode)) {
		codes = append(codes, code+"="+strconv.Itoa(byCode[code]))
	}
	return audit.Record{Event: EventRefusalSummary, Principal: sample.Principal, Transport: sample.Transport,
		Peer: sample.Peer, Decision: "refuse", Code: sample.Code,
		Reason: fmt.Sprintf("%d more refusals of this caller were counted, not recorded one by one", count),
		Details: map[string]string{"count": strconv.Itoa(count),
			"first": first.UTC().Format(time.RFC3339Nano), "last": last.UTC().Format(time.RFC3339Nano),
			"recorded_in_window": strconv.Itoa(recorded), "sample_method": sample.Method},
		Lists: map[string][]string{"codes": codes}}
}

// CallerKey names the caller of a refusal, as the flood control counts
// it (floodKey).
func CallerKey(r audit.Record) string { return floodKey(r) }

// floodKey names the caller of a refusal: its principal, else what stays
// the same across its connections and processes — the address of a
// tailnet peer without its port, the uid of a local one without its pid —
// so that a caller who cannot be identified gets no fresh budget by
// reconnecting or by starting another process.
func floodKey(r audit.Record) string {
	if r.Principal != "" {
		return r.Principal
	}
	return r.Transport + " " + stablePeer(r.Peer)
}

// stablePeer drops from a peer what changes per connection or process:
// "uid=N pid=P" → "uid=N"; "[node ]addr:port" → "addr".
func stablePeer(peer string) string {
	if uid, _, ok := strings.Cut(peer, " pid="); ok && strings.HasPrefix(uid, "uid=") {
		return uid
	}
	last := peer
	if i := strings.LastIndexByte(peer, ' '); i >= 0 {
		last = peer[i+1:]
	}
	if ap, err := netip.ParseAddrPort(last); err == nil {
		return ap.Addr().Unmap().String()
	}
	return peer
}
