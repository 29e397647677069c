package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/store"
)

// The two records of one approval, below approvals/<id>/.
const (
	partAsked   = "asked"
	partDecided = "decided"
)

// decision is the record of how an approval ended: written once
// (CreateRevision 0), by whichever host decided or settled it first.
type decision struct {
	State string `json:"state"`
	By    string `json:"by,omitempty"`
	Note  string `json:"note,omitempty"`
}

// approvalKeys are the keys of approval id's two records.
func (s *Store) approvalKeys(id string) (asked, decided string, err error) {
	e, err := name("approval id", id)
	if err != nil {
		return "", "", err
	}
	dir := s.prefix + dirApprovals + e + "/"
	return dir + partAsked, dir + partDecided, nil
}

// splitApprovalKey reads a key listed under dir (the approvals' directory)
// as an approval id and which of its records it is. Anything else is
// ErrCorrupt: nothing else writes there.
func splitApprovalKey(dir, key string) (id, part string, err error) {
	rest, ok := strings.CutPrefix(key, dir)
	e, part, ok2 := strings.Cut(rest, "/")
	bad := !ok || !ok2 || e == "" || (part != partAsked && part != partDecided)
	if !bad {
		id, err = url.PathUnescape(e)
		bad = err != nil || url.PathEscape(id) != e
	}
	if bad {
		return "", "", fmt.Errorf("%w: key %q is not an approval's record", store.ErrCorrupt, key)
	}
	return id, part, nil
}

// sealApproval seals what the approver is shown (it may hold the head of
// the request's standard input), bound to the approval's id.
func (s *Store) sealApproval(a *coilyv1.Approval) (string, error) {
	data, err := proto.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("etcdstore: encode approval: %w", err)
	}
	nonce := make([]byte, s.seal.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return string(s.seal.Seal(nonce, nonce, data, approvalAAD(a.GetId()))), nil
}

func approvalAAD(id string) []byte { return append([]byte("coily approval\x00"), id...) }

// openApproval unseals and decodes the asked record of approval id: it
// must name that approval, pending.
func (s *Store) openApproval(id string, kv *mvccpb.KeyValue) (*coilyv1.Approval, error) {
	n, v := s.seal.NonceSize(), kv.Value
	if len(v) < n+s.seal.Overhead() {
		return nil, fmt.Errorf("%w: %s: sealed approval too short", store.ErrCorrupt, kv.Key)
	}
	data, err := s.seal.Open(nil, v[:n], v[n:], approvalAAD(id))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: the approval does not unseal (another seal key, or not this approval's)", store.ErrCorrupt, kv.Key)
	}
	a := &coilyv1.Approval{}
	if err := proto.Unmarshal(data, a); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, kv.Key, err)
	}
	if a.GetId() != id || a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
		return nil, fmt.Errorf("%w: %s: record of approval %q in state %s", store.ErrCorrupt, kv.Key, a.GetId(), a.GetState())
	}
	return a, nil
}

// parseDecision decodes a decided record: one of the final states.
func parseDecision(key string, data []byte) (decision, error) {
	var d decision
	if err := decode(key, data, &d); err != nil {
		return decision{}, err
	}
	switch coilyv1.ApprovalState(coilyv1.ApprovalState_value[d.State]) {
	case coilyv1.ApprovalState_APPROVAL_STATE_APPROVED, coilyv1.ApprovalState_APPROVAL_STATE_DENIED,
		coilyv1.ApprovalState_APPROVAL_STATE_EXPIRED, coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED,
		coilyv1.ApprovalState_APPROVAL_STATE_REJECTED:
		return d, nil
	}
	return decision{}, fmt.Errorf("%w: %s: %q is not how an approval ends", store.ErrCorrupt, key, d.State)
}

// applied is a copy of a as decided by d.
func (d decision) applied(a *coilyv1.Approval) *coilyv1.Approval {
	out := proto.Clone(a).(*coilyv1.Approval)
	out.State, out.DecidedBy, out.Note = coilyv1.ApprovalState(coilyv1.ApprovalState_value[d.State]), d.By, d.Note
	return out
}

// PostApproval records a pending approval, created once (its id never
// used before), under a lease of its own that this host keeps alive while
// ctx lives: a host that dies, or ends ctx, leaves nothing behind (both
// records go with the lease, revoked once ctx ends). The channel carries
// the approval's decision (its state, decider and note) when one is
// written, wherever; it is closed without one if the record is lost
// (its lease expired while this host was cut off) or ctx ends.
func (s *Store) PostApproval(ctx context.Context, a *coilyv1.Approval) (<-chan *coilyv1.Approval, error) {
	ak, dk, err := s.approvalKeys(a.GetId())
	if err != nil {
		return nil, err
	}
	v, err := s.sealApproval(a)
	if err != nil {
		return nil, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	lease, err := s.cli.Grant(cctx, s.approvalTTL)
	if err != nil {
		return nil, s.fail("post approval", err)
	}
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(ak), "=", 0), clientv3.Compare(clientv3.CreateRevision(dk), "=", 0)).
		Then(clientv3.OpPut(ak, v, clientv3.WithLease(lease.ID))).Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("approval %q exists", a.GetId())
	}
	var keep <-chan *clientv3.LeaseKeepAliveResponse
	if err == nil {
		keep, err = s.cli.KeepAlive(ctx, lease.ID)
	}
	if err != nil {
		s.revoke(lease.ID)
		return nil, s.fail("post approval", err)
	}
	out := make(chan *coilyv1.Approval, 1)
	go s.await(ctx, a.GetId(), lease.ID, resp.Header.Revision+1, keep, out)
	return out, nil
}

// await sends approval id's decision on out, then, once ctx ends, revokes
// its lease.
func (s *Store) await(ctx context.Context, id string, lease clientv3.LeaseID, rev int64, keep <-chan *clientv3.LeaseKeepAliveResponse, out chan<- *coilyv1.Approval) {
	defer s.revoke(lease)
	go func() {
		for range keep { // the client closes it when ctx ends or the lease is lost
		}
	}()
	d, err := s.awaitDecision(ctx, id, rev)
	if err == nil {
		out <- d.applied(&coilyv1.Approval{Id: id})
	}
	close(out)
	<-ctx.Done()
}

// revoke ends a lease and so deletes the records under it; a failure
// leaves them to expire with it.
func (s *Store) revoke(lease clientv3.LeaseID) {
	ctx, cancel := s.call(context.Background())
	defer cancel()
	s.cli.Revoke(ctx, lease) //nolint:errcheck // it expires anyway
}

// errLost is an approval whose record went before it was decided.
var errLost = fmt.Errorf("%w: the approval's record is gone (its lease expired)", store.ErrUnavailable)

// awaitDecision watches approval id's records from rev until it is
// decided or its asked record goes. A watch that cannot resume (the
// history compacted) reads the records again and watches on from there.
func (s *Store) awaitDecision(ctx context.Context, id string, rev int64) (decision, error) {
	ak, dk, err := s.approvalKeys(id)
	if err != nil {
		return decision{}, err
	}
	for {
		wctx, cancel := context.WithCancel(ctx)
		d, done, err := s.watchDecision(wctx, ak, dk, rev)
		cancel()
		if done || ctx.Err() != nil {
			return d, cmpErr(err, ctx.Err())
		}
		gctx, gcancel := s.call(ctx)
		resp, gerr := s.cli.Txn(gctx).Then(clientv3.OpGet(ak), clientv3.OpGet(dk)).Commit()
		gcancel()
		if gerr != nil {
			continue // still out of reach: watch again, from where it was
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			d, err := parseDecision(dk, kvs[0].Value)
			return d, err
		}
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return decision{}, errLost
		}
		rev = resp.Header.Revision + 1
	}
}

func cmpErr(err, other error) error {
	if err != nil {
		return err
	}
	return other
}

// watchDecision is one watch of an approval's records from rev: done when
// it is decided or its record is gone; not done (read again) when the
// watch failed.
func (s *Store) watchDecision(ctx context.Context, ak, dk string, rev int64) (decision, bool, error) {
	for wr := range s.watchPrefix(ctx, strings.TrimSuffix(ak, partAsked), rev) {
		if wr.Err() != nil {
			return decision{}, false, nil
		}
		for _, ev := range wr.Events {
			switch k := string(ev.Kv.Key); {
			case k == dk && ev.Type == clientv3.EventTypePut:
				d, err := parseDecision(k, ev.Kv.Value)
				return d, true, err
			case k == ak && ev.Type == clientv3.EventTypeDelete:
				return decision{}, true, errLost
			}
		}
	}
	if ctx.Err() == nil { // the watch closed under a live wait: the store is closing
		return decision{}, true, errLost
	}
	return decision{}, true, ctx.Err()
}

// SettleApproval decides approval id once across every host: it reads
// the approval, the decision if any and the lockout at one revision, and
// writes the decision only if none was written, the approval is still
// there and the lockout has not changed since (CreateRevision 0 and
// ModRevision compares). check (may be nil) sees the approval first, and
// may refuse. Under a lockout the decision written is the lockout's
// rejection, whatever was asked. It returns the approval as decided and
// whether this call's decision is the one: false when another was written
// first. An approval that is not there is store.ErrNotFound.
func (s *Store) SettleApproval(ctx context.Context, id string, st coilyv1.ApprovalState, by, note string, check func(*coilyv1.Approval) error) (*coilyv1.Approval, bool, error) {
	ak, dk, err := s.approvalKeys(id)
	if err != nil {
		return nil, false, err
	}
	lk := s.prefix + keyLockout
	var out *coilyv1.Approval
	var won bool
	err = s.retryIn(ctx, "settle approval", func(ctx context.Context) error {
		ctx, cancel := s.call(ctx)
		defer cancel()
		resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(ak), clientv3.OpGet(dk), clientv3.OpGet(lk)).Commit()
		if err != nil {
			return err
		}
		asked, decided, locked := rangeOf(resp, 0), rangeOf(resp, 1), rangeOf(resp, 2)
		if asked == nil {
			return fmt.Errorf("%w: no pending approval %q", store.ErrNotFound, id)
		}
		a, err := s.openApproval(id, asked)
		if err != nil {
			return err
		}
		if decided != nil {
			d, err := parseDecision(dk, decided.Value)
			out, won = d.applied(a), false
			return err
		}
		if check != nil {
			if err := check(a); err != nil {
				return err
			}
		}
		d := decision{State: st.String(), By: by, Note: note}
		var lockRev int64
		if locked != nil {
			var stop store.Stop
			if err := decode(lk, locked.Value, &stop); err != nil {
				return err
			}
			if stop.Active {
				d = decision{State: coilyv1.ApprovalState_APPROVAL_STATE_REJECTED.String(), By: "lockout"}
			}
			lockRev = locked.ModRevision
		}
		v, err := json.Marshal(d)
		if err != nil {
			return err
		}
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(ak), "=", asked.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(dk), "=", 0), clientv3.Compare(clientv3.ModRevision(lk), "=", lockRev)).
			Then(clientv3.OpPut(dk, string(v), clientv3.WithLease(clientv3.LeaseID(asked.Lease)))).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return fmt.Errorf("%w: no pending approval %q (its host is gone)", store.ErrNotFound, id)
		case err != nil:
			return err
		case !tr.Succeeded:
			return errConflict
		}
		out, won = d.applied(a), true
		return nil
	})
	return out, won, err
}

// rangeOf is the one key read by the i-th get of a transaction, or nil.
func rangeOf(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// PendingApprovals lists the approvals waiting for a decision on any host,
// oldest first.
func (s *Store) PendingApprovals(ctx context.Context) ([]*coilyv1.Approval, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+dirApprovals, clientv3.WithPrefix())
	if err != nil {
		return nil, s.fail("pending approvals", err)
	}
	v, err := s.readApprovals(resp.Kvs)
	if err != nil {
		return nil, err
	}
	return v.pending(), nil
}

// approvalView is the approvals as read: each asked record, and the
// decided ones' decisions.
type approvalView struct {
	asked   map[string]*coilyv1.Approval
	decided map[string]bool
}

func (s *Store) readApprovals(kvs []*mvccpb.KeyValue) (approvalView, error) {
	v := approvalView{asked: map[string]*coilyv1.Approval{}, decided: map[string]bool{}}
	for _, kv := range kvs {
		id, part, err := splitApprovalKey(s.prefix+dirApprovals, string(kv.Key))
		if err != nil {
			return v, err
		}
		if part == partDecided {
			if _, err := parseDecision(string(kv.Key), kv.Value); err != nil {
				return v, err
			}
			v.decided[id] = true
			continue
		}
		if v.asked[id], err = s.openApproval(id, kv); err != nil {
			return v, err
		}
	}
	return v, nil
}

func (v approvalView) pending() []*coilyv1.Approval {
	var out []*coilyv1.Approval
	for id, a := range v.asked {
		if !v.decided[id] {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *coilyv1.Approval) int {
		if c := a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	return out
}

// FollowApprovals sends the pending approvals of every host, then every
// change: an approval asked, decided (with its decision), or gone
// undecided with its host (as cancelled). It is closed when ctx ends or
// the shared state cannot be followed (the follower reconnects).
func (s *Store) FollowApprovals(ctx context.Context) <-chan *coilyv1.Approval {
	out := make(chan *coilyv1.Approval, 16)
	go func() {
		defer close(out)
		s.followApprovals(ctx, out) //nolint:errcheck // the closed channel says it
	}()
	return out
}

func (s *Store) followApprovals(ctx context.Context, out chan<- *coilyv1.Approval) error {
	gctx, cancel := s.call(ctx)
	resp, err := s.cli.Get(gctx, s.prefix+dirApprovals, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return s.fail("follow approvals", err)
	}
	v, err := s.readApprovals(resp.Kvs)
	if err != nil {
		return err
	}
	send := func(a *coilyv1.Approval) bool {
		select {
		case out <- a:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for _, a := range v.pending() {
		if !send(a) {
			return ctx.Err()
		}
	}
	dir := s.prefix + dirApprovals
	for wr := range s.watchPrefix(clientv3.WithRequireLeader(ctx), dir, resp.Header.Revision+1) {
		if err := wr.Err(); err != nil {
			return s.fail("follow approvals", err)
		}
		for _, ev := range wr.Events {
			a, err := v.change(s, dir, ev)
			if err != nil {
				return err
			}
			if a != nil && !send(a) {
				return ctx.Err()
			}
		}
	}
	return s.fail("follow approvals", cmpErr(ctx.Err(), context.Canceled))
}

// change applies one event to the view and says what changed (nil:
// nothing to tell).
func (v approvalView) change(s *Store, dir string, ev *clientv3.Event) (*coilyv1.Approval, error) {
	id, part, err := splitApprovalKey(dir, string(ev.Kv.Key))
	if err != nil {
		return nil, err
	}
	a := v.asked[id]
	switch {
	case part == partAsked && ev.Type == clientv3.EventTypePut:
		if a, err = s.openApproval(id, ev.Kv); err != nil {
			return nil, err
		}
		v.asked[id] = a
		return a, nil
	case part == partDecided && ev.Type == clientv3.EventTypePut && a != nil:
		d, err := parseDecision(string(ev.Kv.Key), ev.Kv.Value)
		if err != nil {
			return nil, err
		}
		v.decided[id] = true
		return d.applied(a), nil
	case part == partAsked && ev.Type == clientv3.EventTypeDelete && a != nil:
		delete(v.asked, id)
		if v.decided[id] {
			delete(v.decided, id)
			return nil, nil
		}
		return decision{State: coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED.String(), Note: "its host is gone"}.applied(a), nil
	}
	return nil, nil
}
