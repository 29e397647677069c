package approvals

import (
	"context"
	"errors"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// Board is where several hosts share their approvals (*etcdstore.Store).
// Its errors wrap store.ErrUnavailable when it cannot be reached and
// store.ErrCorrupt when a record cannot be read.
type Board interface {
	// PostApproval records a pending approval, kept while ctx lives.
	// The channel carries its decision (state, decider, note) once one
	// is written on any host, or is closed without one when the record
	// is lost or ctx ends.
	PostApproval(ctx context.Context, a *coilyv1.Approval) (<-chan *coilyv1.Approval, error)
	// SettleApproval writes approval id's decision unless one was
	// written first (then won is false and the approval is returned as
	// that decision left it). check sees the approval first and may
	// refuse. Under a lockout it writes the lockout's rejection instead.
	// An approval that is not there is store.ErrNotFound.
	SettleApproval(ctx context.Context, id string, st coilyv1.ApprovalState, by, note string,
		check func(*coilyv1.Approval) error) (a *coilyv1.Approval, won bool, err error)
	// PendingApprovals lists every host's pending approvals, oldest first.
	PendingApprovals(ctx context.Context) ([]*coilyv1.Approval, error)
	// FollowApprovals sends the pending approvals, then every change;
	// it is closed when ctx ends or the board cannot be followed.
	FollowApprovals(ctx context.Context) <-chan *coilyv1.Approval
}

// post shares ap's approval on the board; a failure is kept (ap.err) and
// refuses the request.
func (q *Queue) post(ap *Ticket) {
	ctx, cancel := context.WithCancel(context.Background())
	remote, err := q.board.PostApproval(ctx, ap.a)
	if err != nil {
		cancel()
		ap.err = err
		return
	}
	ap.remote, ap.unpost = remote, cancel
}

// learn settles ap as the board says it was decided elsewhere; a record
// lost undecided ends the wait state-unavailable.
func (q *Queue) learn(ap *Ticket, d *coilyv1.Approval, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !ok {
		if ap.a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			ap.err = errors.New("the approval's shared record was lost before a decision")
		}
		q.settleLocked(ap, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, "", "")
		return
	}
	q.settleLocked(ap, d.GetState(), d.GetDecidedBy(), d.GetNote())
}

// settleShared settles ap on the board first: the decision written there
// (this one or one before it) is the one applied here. When the board
// cannot be reached, an approval is not applied (the approver is told);
// any other end is applied here at once, refused state-unavailable (it
// never runs), the board's record left to its lease.
func (q *Queue) settleShared(ap *Ticket, st coilyv1.ApprovalState, by, note string) bool {
	a, won, err := q.board.SettleApproval(context.Background(), ap.a.GetId(), st, by, note, nil)
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case err != nil && st == coilyv1.ApprovalState_APPROVAL_STATE_APPROVED:
		return false
	case err != nil:
		if ap.a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			ap.err = err
		}
		return q.settleLocked(ap, st, by, note)
	}
	q.settleLocked(ap, a.GetState(), a.GetDecidedBy(), a.GetNote())
	return won
}

// decideShared decides any host's approval on the board, after the
// checks Decide makes here; the waiting host learns it from the board.
func (q *Queue) decideShared(id, approver string, st coilyv1.ApprovalState, note string) (*coilyv1.Approval, error) {
	check := func(a *coilyv1.Approval) error {
		if a.GetRequester() == approver {
			return refusal.New(refusal.PermissionDenied, "%s may not decide its own request", approver)
		}
		return nil
	}
	a, won, err := q.board.SettleApproval(context.Background(), id, st, approver, note, check)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, refusal.New(refusal.BadRequest, "no pending approval %q", id)
	case errors.Is(err, store.ErrUnavailable):
		return nil, refusal.Wrap(refusal.StateUnavailable, err, "approvals: shared state unavailable")
	case err != nil && refusal.As(err).Code == refusal.PermissionDenied:
		return nil, err
	case err != nil:
		return nil, refusal.Wrap(refusal.Internal, err, "approvals: shared state unreadable")
	case !won:
		return nil, refusal.New(refusal.BadRequest, "approval %q was settled before this decision", id)
	}
	q.mu.Lock()
	if ap, ok := q.pending[id]; ok {
		q.settleLocked(ap, a.GetState(), a.GetDecidedBy(), a.GetNote())
	}
	q.mu.Unlock()
	if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_REJECTED {
		return nil, refusal.New(refusal.LockoutActive, "approval %q rejected: a lockout is in force", id)
	}
	return a, nil
}

func (q *Queue) listShared(ctx context.Context) ([]*coilyv1.Approval, error) {
	list, err := q.board.PendingApprovals(ctx)
	if err != nil {
		return nil, refusal.Wrap(stateCode(err), err, "approvals: shared state unavailable")
	}
	return list, nil
}

func stateCode(err error) refusal.Code {
	if errors.Is(err, store.ErrUnavailable) {
		return refusal.StateUnavailable
	}
	return refusal.Internal
}

// watchShared follows the board: every host's pending approvals, then
// every change. The channel is closed if the watcher falls watchBuffer
// changes behind or the board cannot be followed (it reconnects), and by
// the returned cancel.
func (q *Queue) watchShared() (<-chan *coilyv1.Approval, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	in := q.board.FollowApprovals(ctx)
	ch := make(chan *coilyv1.Approval, watchBuffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		defer cancel()
		for a := range in {
			select {
			case ch <- a:
			default: // too far behind: dropped, it will reconnect
				return
			}
		}
	}()
	return ch, func() {
		cancel()
		for range in { // drained so the follower ends
		}
		<-done
	}
}

// failed is why the board failed ap, if it did.
func (ap *Ticket) failed() error {
	ap.q.mu.Lock()
	defer ap.q.mu.Unlock()
	return ap.err
}
