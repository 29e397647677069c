package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// approvals holds the approvals waiting for a human, and the watchers that
// want to hear about every change. Approvals live in memory: a request
// waiting for one is an open Exec stream, which does not survive a restart
// either. Every decision is in the audit log.
type approvals struct {
	now func() time.Time
	// observe hears how long each approval waited and how it ended (the
	// metrics); nil hears nothing.
	observe func(coilyv1.ApprovalState, time.Duration)

	mu       sync.Mutex
	pending  map[string]*approval
	watchers map[chan *coilyv1.Approval]struct{}
}

type approval struct {
	a       *coilyv1.Approval // guarded by approvals.mu; copies go out
	decided chan struct{}     // closed once the state leaves pending
	rule    *policy.Rule      // the rule that asked for it (immutable)
}

// stdinHead is how much of a request's standard input an approver sees.
const stdinHead = 512

// watchBuffer bounds how far a watcher may lag before it is dropped.
const watchBuffer = 64

func newApprovals(now func() time.Time) *approvals {
	return &approvals{now: now, pending: map[string]*approval{}, watchers: map[chan *coilyv1.Approval]struct{}{}}
}

// create registers a pending approval for an Exec.
func (as *approvals) create(x *execution, ttl time.Duration) *approval {
	now := as.now()
	ap := &approval{decided: make(chan struct{}), rule: x.rule, a: &coilyv1.Approval{
		Id: newID(), RequestId: x.id, Requester: x.caller.Principal, Argv: x.req.GetArgv(), Rule: x.rule.Name,
		CreatedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(ttl)),
		State: coilyv1.ApprovalState_APPROVAL_STATE_PENDING, RequestNote: x.req.GetNote(),
		Cwd: x.req.GetCwd(), Env: maps.Clone(x.req.GetEnv()),
	}}
	if in := x.req.GetStdin(); len(in) > 0 {
		sum := sha256.Sum256(in)
		ap.a.StdinBytes, ap.a.StdinSha256 = int64(len(in)), hex.EncodeToString(sum[:])
		ap.a.StdinHead = bytes.Clone(in[:min(len(in), stdinHead)])
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	as.pending[ap.a.GetId()] = ap
	as.notify(ap.a)
	return ap
}

// wait blocks until the approval is decided, expires, or ctx ends, and
// returns nil only when it was approved.
func (as *approvals) wait(ctx context.Context, ap *approval) (*coilyv1.Approval, error) {
	t := time.NewTimer(ap.a.GetExpiresAt().AsTime().Sub(as.now()))
	defer t.Stop()
	select {
	case <-ap.decided:
	case <-t.C:
		as.settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_EXPIRED, "", "")
	case <-ctx.Done():
		as.settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, "", "")
	}
	as.mu.Lock()
	a := proto.Clone(ap.a).(*coilyv1.Approval)
	as.mu.Unlock()
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

// settle moves a pending approval to a final state; it reports false if it
// was no longer pending (someone else settled it first).
func (as *approvals) settle(ap *approval, st coilyv1.ApprovalState, by, note string) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	if ap.a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
		return false
	}
	ap.a.State, ap.a.DecidedBy, ap.a.Note = st, by, note
	if as.observe != nil {
		as.observe(st, as.now().Sub(ap.a.GetCreatedAt().AsTime()))
	}
	delete(as.pending, ap.a.GetId())
	close(ap.decided)
	as.notify(ap.a)
	return true
}

// decide records an approver's verdict. The requester may never decide its
// own request.
func (as *approvals) decide(id, approver string, v coilyv1.Verdict, note string) (*coilyv1.Approval, error) {
	as.mu.Lock()
	ap, ok := as.pending[id]
	var requester string
	if ok {
		requester = ap.a.GetRequester()
	}
	as.mu.Unlock()
	switch {
	case !ok:
		return nil, refusal.New(refusal.BadRequest, "no pending approval %q", id)
	case requester == approver:
		return nil, refusal.New(refusal.PermissionDenied, "%s may not decide its own request", approver)
	}
	st := coilyv1.ApprovalState_APPROVAL_STATE_DENIED
	if v == coilyv1.Verdict_VERDICT_APPROVE {
		st = coilyv1.ApprovalState_APPROVAL_STATE_APPROVED
	}
	if !as.settle(ap, st, approver, note) {
		return nil, refusal.New(refusal.BadRequest, "approval %q was settled before this decision", id)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	return proto.Clone(ap.a).(*coilyv1.Approval), nil
}

// rejectAll rejects every pending approval (Lockout).
func (as *approvals) rejectAll() int {
	as.mu.Lock()
	all := make([]*approval, 0, len(as.pending))
	for _, ap := range as.pending {
		all = append(all, ap)
	}
	as.mu.Unlock()
	n := 0
	for _, ap := range all {
		if as.settle(ap, coilyv1.ApprovalState_APPROVAL_STATE_REJECTED, "lockout", "") {
			n++
		}
	}
	return n
}

// list returns the pending approvals, oldest first.
func (as *approvals) list() []*coilyv1.Approval {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.sortedLocked()
}

// PendingApproval is a pending approval with the rule that asked for it
// (under the policy the request was decided by).
type PendingApproval struct {
	Approval *coilyv1.Approval
	Rule     *policy.Rule
}

// detailed returns the pending approvals with their rules, oldest first.
func (as *approvals) detailed() []PendingApproval {
	as.mu.Lock()
	defer as.mu.Unlock()
	list := as.sortedLocked()
	out := make([]PendingApproval, len(list))
	for i, a := range list {
		out[i] = PendingApproval{Approval: a, Rule: as.pending[a.GetId()].rule}
	}
	return out
}

// sortedLocked copies the pending approvals, oldest first. Must hold as.mu.
func (as *approvals) sortedLocked() []*coilyv1.Approval {
	out := make([]*coilyv1.Approval, 0, len(as.pending))
	for _, ap := range as.pending {
		out = append(out, proto.Clone(ap.a).(*coilyv1.Approval))
	}
	slices.SortFunc(out, func(a, b *coilyv1.Approval) int {
		return a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime())
	})
	return out
}

// watch subscribes to changes; the channel first carries the pending
// approvals. It is closed if the watcher falls more than watchBuffer
// changes behind, and by the returned cancel.
func (as *approvals) watch() (<-chan *coilyv1.Approval, func()) {
	as.mu.Lock()
	defer as.mu.Unlock()
	pending := as.sortedLocked()
	ch := make(chan *coilyv1.Approval, len(pending)+watchBuffer)
	for _, a := range pending {
		ch <- a
	}
	as.watchers[ch] = struct{}{}
	return ch, func() {
		as.mu.Lock()
		defer as.mu.Unlock()
		if _, ok := as.watchers[ch]; ok {
			delete(as.watchers, ch)
			close(ch)
		}
	}
}

// notify sends a copy of a to every watcher. Must hold as.mu.
func (as *approvals) notify(a *coilyv1.Approval) {
	for ch := range as.watchers {
		select {
		case ch <- proto.Clone(a).(*coilyv1.Approval):
		default: // too far behind: drop the watcher, it will reconnect
			delete(as.watchers, ch)
			close(ch)
		}
	}
}

// snapshot copies the approval's current state.
func (ap *approval) snapshot(as *approvals) *coilyv1.Approval {
	as.mu.Lock()
	defer as.mu.Unlock()
	return proto.Clone(ap.a).(*coilyv1.Approval)
}

func (as *approvals) pendingCount() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return len(as.pending)
}
