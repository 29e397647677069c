// Package approvals holds the approvals waiting for a human: an Exec whose
// rule asks for one registers it, waits until it is decided, expires or is
// cancelled, and everyone watching hears of every change. Approvals live
// in memory: a request waiting for one is an open Exec stream, which does
// not survive a restart either. Every decision is audited by the server.
//
// With a Board (several hosts sharing their state in etcd), every pending
// approval is also posted there: it is listed and watched on every host,
// may be decided on any, and is decided once across them all (the
// board's create-only decision), the waiting host learning the decision
// from the board. Its expiry, cancellation and a lockout's rejection are
// settled through the board too, so an approval racing them has one
// outcome. A board that cannot be reached refuses (state-unavailable).
package approvals

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// Queue holds the approvals waiting for a human, and the watchers that
// want to hear about every change.
type Queue struct {
	now func() time.Time
	// observe hears how long each approval waited and how it ended (the
	// metrics); nil hears nothing.
	observe func(coilyv1.ApprovalState, time.Duration)

	// board shares the approvals with the other hosts; nil: this host
	// alone, in memory.
	board Board

	mu       sync.Mutex
	pending  map[string]*Ticket
	watchers map[chan *coilyv1.Approval]struct{}
}

// Ticket is one approval, held by the Exec that waits for it.
type Ticket struct {
	q       *Queue
	a       *coilyv1.Approval // guarded by q.mu; copies go out
	decided chan struct{}     // closed once the state leaves pending
	rule    *policy.Rule      // the rule that asked for it (immutable)
	// remote carries the decision the board learnt (nil: no board);
	// unpost ends the board's record once settled here.
	remote <-chan *coilyv1.Approval
	unpost context.CancelFunc
	err    error // why the board failed it, guarded by q.mu
}

// Request is what an approval is asked for: the Exec request, who asked
// and the rule that wants a human's word.
type Request struct {
	ID        string // the Exec's request id
	Requester string // the caller's principal
	Exec      *coilyv1.ExecRequest
	Rule      *policy.Rule // the rule that admits it
	// Confirm is the rule whose approval it needs: Rule itself, or a
	// confirm rule whose obligation the request matches (nil: Rule).
	Confirm *policy.Rule
}

// stdinHead is how much of a request's standard input an approver sees.
const stdinHead = 512

// watchBuffer bounds how far a watcher may lag before it is dropped.
const watchBuffer = 64

// New returns an empty queue. observe, if not nil, hears how long each
// approval waited and how it ended. The approvals are shared through
// shared when it is a Board (etcdstore), else kept here alone.
func New(now func() time.Time, observe func(coilyv1.ApprovalState, time.Duration), shared any) *Queue {
	b, _ := shared.(Board)
	return &Queue{now: now, observe: observe, board: b, pending: map[string]*Ticket{}, watchers: map[chan *coilyv1.Approval]struct{}{}}
}

// Create registers a pending approval for an Exec.
func (q *Queue) Create(r Request, ttl time.Duration) *Ticket {
	now := q.now()
	ap := &Ticket{q: q, decided: make(chan struct{}), rule: r.Rule, a: &coilyv1.Approval{
		Id: descriptor.NewID(), RequestId: r.ID, Requester: r.Requester, Argv: r.Exec.GetArgv(), Rule: r.Rule.Name,
		CreatedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(ttl)),
		State: coilyv1.ApprovalState_APPROVAL_STATE_PENDING, RequestNote: r.Exec.GetNote(),
		Cwd: r.Exec.GetCwd(), Env: maps.Clone(r.Exec.GetEnv()),
	}}
	if r.Confirm != nil && r.Confirm != r.Rule {
		ap.a.Rule, ap.a.AllowedBy = r.Confirm.Name, r.Rule.Name
	}
	if in := r.Exec.GetStdin(); len(in) > 0 {
		sum := sha256.Sum256(in)
		ap.a.StdinBytes, ap.a.StdinSha256 = int64(len(in)), hex.EncodeToString(sum[:])
		ap.a.StdinHead = bytes.Clone(in[:min(len(in), stdinHead)])
	}
	ap.unpost = func() {}
	if q.board != nil {
		q.post(ap)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending[ap.a.GetId()] = ap
	q.notify(ap.a)
	if ap.err != nil { // not shared: Wait refuses it at once
		q.settleLocked(ap, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, "", "")
	}
	return ap
}

// Wait blocks until the approval is decided, expires, or ctx ends, and
// returns nil only when it was approved.
func (q *Queue) Wait(ctx context.Context, ap *Ticket) (*coilyv1.Approval, error) {
	t := time.NewTimer(ap.a.GetExpiresAt().AsTime().Sub(q.now()))
	defer t.Stop()
	select {
	case <-ap.decided:
	case d, ok := <-ap.remote:
		q.learn(ap, d, ok)
	case <-t.C:
		q.Settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_EXPIRED, "", "")
	case <-ctx.Done():
		q.Settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, "", "")
	}
	a := ap.Snapshot()
	if err := ap.failed(); err != nil {
		return a, refusal.Wrap(refusal.StateUnavailable, err, "approval %s: shared state unavailable", a.GetId())
	}
	switch a.GetState() {
	case coilyv1.ApprovalState_APPROVAL_STATE_APPROVED:
		return a, nil
	case coilyv1.ApprovalState_APPROVAL_STATE_DENIED:
		return a, refusal.New(refusal.ConfirmRejected, "approval %s denied by %s%s", a.GetId(), a.GetDecidedBy(), noteSuffix(a.GetNote()))
	case coilyv1.ApprovalState_APPROVAL_STATE_EXPIRED:
		return a, refusal.New(refusal.ConfirmTimeout, "approval %s expired without a decision", a.GetId())
	case coilyv1.ApprovalState_APPROVAL_STATE_REJECTED:
		return a, refusal.New(refusal.LockoutActive, "approval %s rejected: the server was locked out", a.GetId())
	default:
		return a, refusal.Wrap(refusal.Internal, ctx.Err(), "request cancelled while waiting for approval %s", a.GetId())
	}
}

func noteSuffix(note string) string {
	if note == "" {
		return ""
	}
	return ": " + note
}

// Settle moves a pending approval to a final state; it reports false if it
// was no longer pending (someone else settled it first). With a board it
// is settled there first, once across every host.
func (q *Queue) Settle(ap *Ticket, st coilyv1.ApprovalState, by, note string) bool {
	if q.board != nil {
		return q.settleShared(ap, st, by, note)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.settleLocked(ap, st, by, note)
}

// settleLocked settles ap here. Must hold q.mu.
func (q *Queue) settleLocked(ap *Ticket, st coilyv1.ApprovalState, by, note string) bool {
	if ap.a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
		return false
	}
	ap.unpost()
	ap.a.State, ap.a.DecidedBy, ap.a.Note = st, by, note
	if q.observe != nil {
		q.observe(st, q.now().Sub(ap.a.GetCreatedAt().AsTime()))
	}
	delete(q.pending, ap.a.GetId())
	close(ap.decided)
	q.notify(ap.a)
	return true
}

// Decide records an approver's verdict. The requester may never decide its
// own request. With a board, the approval may be any host's.
func (q *Queue) Decide(id, approver string, v coilyv1.Verdict, note string) (*coilyv1.Approval, error) {
	if q.board != nil {
		return q.decideShared(id, approver, verdictState(v), note)
	}
	q.mu.Lock()
	ap, ok := q.pending[id]
	var requester string
	if ok {
		requester = ap.a.GetRequester()
	}
	q.mu.Unlock()
	switch {
	case !ok:
		return nil, refusal.New(refusal.BadRequest, "no pending approval %q", id)
	case requester == approver:
		return nil, refusal.New(refusal.PermissionDenied, "%s may not decide its own request", approver)
	}
	if !q.Settle(ap, verdictState(v), approver, note) {
		return nil, refusal.New(refusal.BadRequest, "approval %q was settled before this decision", id)
	}
	return ap.Snapshot(), nil
}

func verdictState(v coilyv1.Verdict) coilyv1.ApprovalState {
	if v == coilyv1.Verdict_VERDICT_APPROVE {
		return coilyv1.ApprovalState_APPROVAL_STATE_APPROVED
	}
	return coilyv1.ApprovalState_APPROVAL_STATE_DENIED
}

// RejectAll rejects every pending approval (Lockout) and says how many.
func (q *Queue) RejectAll() int {
	q.mu.Lock()
	all := make([]*Ticket, 0, len(q.pending))
	for _, ap := range q.pending {
		all = append(all, ap)
	}
	q.mu.Unlock()
	// All at once: with a board each is a write, and a lockout on a host
	// cut off waits for them no longer than for one.
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, ap := range all {
		wg.Go(func() {
			if q.Settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_REJECTED, "lockout", "") {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

// List returns the pending approvals, oldest first: every host's with a
// board (an error when it cannot be read).
func (q *Queue) List(ctx context.Context) ([]*coilyv1.Approval, error) {
	if q.board != nil {
		return q.listShared(ctx)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sortedLocked(), nil
}

// Pending is a pending approval with the rule that asked for it (under
// the policy the request was decided by).
type Pending struct {
	Approval *coilyv1.Approval
	Rule     *policy.Rule
}

// Detailed returns the pending approvals with their rules, oldest first
// (another host's approval has no rule here).
func (q *Queue) Detailed(ctx context.Context) ([]Pending, error) {
	list, err := q.List(ctx)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Pending, len(list))
	for i, a := range list {
		out[i] = Pending{Approval: a}
		if ap, ok := q.pending[a.GetId()]; ok {
			out[i].Rule = ap.rule
		}
	}
	return out, nil
}

// sortedLocked copies the pending approvals, oldest first. Must hold q.mu.
func (q *Queue) sortedLocked() []*coilyv1.Approval {
	out := make([]*coilyv1.Approval, 0, len(q.pending))
	for _, ap := range q.pending {
		out = append(out, proto.Clone(ap.a).(*coilyv1.Approval))
	}
	slices.SortFunc(out, func(a, b *coilyv1.Approval) int {
		return a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime())
	})
	return out
}

// Watch subscribes to changes; the channel first carries the pending
// approvals. It is closed if the watcher falls more than watchBuffer
// changes behind, and by the returned cancel.
func (q *Queue) Watch() (<-chan *coilyv1.Approval, func()) {
	if q.board != nil {
		return q.watchShared()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	pending := q.sortedLocked()
	ch := make(chan *coilyv1.Approval, len(pending)+watchBuffer)
	for _, a := range pending {
		ch <- a
	}
	q.watchers[ch] = struct{}{}
	return ch, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if _, ok := q.watchers[ch]; ok {
			delete(q.watchers, ch)
			close(ch)
		}
	}
}

// notify sends a copy of a to every watcher (with a board, the
// watchers follow the board instead). Must hold q.mu.
func (q *Queue) notify(a *coilyv1.Approval) {
	for ch := range q.watchers {
		select {
		case ch <- proto.Clone(a).(*coilyv1.Approval):
		default: // too far behind: drop the watcher, it will reconnect
			delete(q.watchers, ch)
			close(ch)
		}
	}
}

// Snapshot copies the approval's current state.
func (ap *Ticket) Snapshot() *coilyv1.Approval {
	ap.q.mu.Lock()
	defer ap.q.mu.Unlock()
	return proto.Clone(ap.a).(*coilyv1.Approval)
}

// PendingCount says how many approvals wait for a human.
func (q *Queue) PendingCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}
