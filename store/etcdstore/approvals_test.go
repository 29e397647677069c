package etcdstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/internal/poll"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

const secretHead = "token=ghp_NOT_IN_ETCD_IN_CLEAR"

func pendingApproval(id string) *coilyv1.Approval {
	return &coilyv1.Approval{Id: id, RequestId: "r-" + id, Requester: "alice", Argv: []string{"gh", "secret", "set"},
		State: coilyv1.ApprovalState_APPROVAL_STATE_PENDING, CreatedAt: timestamppb.Now(),
		StdinHead: []byte(secretHead), Env: map[string]string{"X": secretHead}}
}

func post(t *testing.T, s *etcdstore.Store, a *coilyv1.Approval) (<-chan *coilyv1.Approval, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := s.PostApproval(ctx, a)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	return ch, cancel
}

// An approval posted on one host is listed on the others, sealed in etcd
// (its stdin head and env never in clear), under a key with its id
// escaped; a second post of its id is refused.
func TestApprovalPosted(t *testing.T) {
	hs := threeHosts(t)
	id := "a/../b%2F"
	post(t, hs[0], pendingApproval(id))
	for _, h := range hs {
		list, err := h.PendingApprovals(context.Background())
		if err != nil || len(list) != 1 || list[0].GetId() != id || string(list[0].GetStdinHead()) != secretHead {
			t.Fatalf("list: %v %v", list, err)
		}
	}
	resp := get(t, prefix(t), clientv3.WithPrefix())
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != prefix(t)+"approvals/a%2F..%2Fb%252F/asked" || resp.Kvs[0].Lease == 0 {
		t.Fatalf("stored as %v", resp.Kvs)
	}
	if strings.Contains(string(resp.Kvs[0].Value), "ghp_") {
		t.Fatal("the approval is in etcd in clear")
	}
	if _, err := hs[1].PostApproval(context.Background(), pendingApproval(id)); err == nil {
		t.Fatal("a second post of one id was accepted")
	}
}

// Three hosts decide one approval at once: one decision is written, the
// others read it (won false); the poster hears it.
func TestApprovalSettledOnce(t *testing.T) {
	hs := threeHosts(t)
	ch, _ := post(t, hs[0], pendingApproval("once"))
	var wg sync.WaitGroup
	wins := make([]bool, 3)
	states := make([]coilyv1.ApprovalState, 3)
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := coilyv1.ApprovalState_APPROVAL_STATE_APPROVED
			if i == 1 {
				st = coilyv1.ApprovalState_APPROVAL_STATE_DENIED
			}
			a, won, err := h.SettleApproval(context.Background(), "once", st, "bob", "", nil)
			if err != nil {
				t.Errorf("settle on %d: %v", i, err)
				return
			}
			wins[i], states[i] = won, a.GetState()
		}()
	}
	wg.Wait()
	n := 0
	for i := range wins {
		if wins[i] {
			n++
		}
		if states[i] != states[0] {
			t.Fatalf("hosts read different outcomes: %v", states)
		}
	}
	if n != 1 {
		t.Fatalf("%d decisions won", n)
	}
	if d := <-ch; d.GetState() != states[0] || d.GetDecidedBy() != "bob" {
		t.Fatalf("the poster heard %v, want %v", d, states[0])
	}
}

// Under a lockout in etcd, a decision is the lockout's rejection; the
// check sees the approval and may refuse; an unknown id is not found.
func TestApprovalSettleRules(t *testing.T) {
	s := open(t)
	post(t, s, pendingApproval("mine"))
	refused := func(a *coilyv1.Approval) error {
		if a.GetRequester() == "alice" {
			return store.ErrDamaged
		}
		return nil
	}
	if _, _, err := s.SettleApproval(context.Background(), "mine", coilyv1.ApprovalState_APPROVAL_STATE_APPROVED, "alice", "", refused); err == nil {
		t.Fatal("the check's refusal was not kept")
	}
	if _, _, err := s.SettleApproval(context.Background(), "nobody's", coilyv1.ApprovalState_APPROVAL_STATE_APPROVED, "bob", "", nil); err == nil {
		t.Fatal("an unknown approval was decided")
	} else {
		wantErr(t, err, store.ErrNotFound)
	}
	if err := s.SetLockout(store.Stop{Active: true, By: "carol"}); err != nil {
		t.Fatal(err)
	}
	a, won, err := s.SettleApproval(context.Background(), "mine", coilyv1.ApprovalState_APPROVAL_STATE_APPROVED, "bob", "", nil)
	if err != nil || !won || a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_REJECTED {
		t.Fatalf("approved under a lockout: %v %v %v", a, won, err)
	}
}

// A host that dies with a pending approval takes it with it (its lease
// expires): it leaves the lists and can no longer be decided. A host that
// ends its wait revokes it at once.
func TestApprovalHostGone(t *testing.T) {
	a := openCfg(t, etcdstore.Config{ApprovalLease: time.Second})
	b := open(t)
	post(t, a, pendingApproval("dies"))
	_, done := post(t, b, pendingApproval("ends"))
	if list, err := b.PendingApprovals(context.Background()); err != nil || len(list) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	done()
	a.Close()
	poll.Until(t, 30*time.Second, "the dead host's approval goes", func() bool {
		list, err := b.PendingApprovals(context.Background())
		return err == nil && len(list) == 0
	})
	for _, id := range []string{"dies", "ends"} {
		_, _, err := b.SettleApproval(context.Background(), id, coilyv1.ApprovalState_APPROVAL_STATE_APPROVED, "bob", "", nil)
		wantErr(t, err, store.ErrNotFound)
	}
}

// A record that does not read (garbage, a decision of no known state, an
// approval sealed for another id, a key that is no approval's) is
// ErrCorrupt, never skipped.
func TestApprovalCorrupt(t *testing.T) {
	s := open(t)
	post(t, s, pendingApproval("good"))
	sealed := get(t, prefix(t)+"approvals/good/asked").Kvs[0].Value
	for name, kv := range map[string][2]string{
		"garbage":        {"approvals/x/asked", "not sealed"},
		"moved":          {"approvals/other/asked", string(sealed)},
		"bad state":      {"approvals/good/decided", `{"state":"APPROVAL_STATE_PENDING"}`},
		"null decision":  {"approvals/good/decided", `null`},
		"not one name":   {"approvals/a/b/asked", "x"},
		"unknown record": {"approvals/good/other", "x"},
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			post(t, s, pendingApproval("good"))
			if _, err := raw(t).Put(context.Background(), prefix(t)+kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
			_, err := s.PendingApprovals(context.Background())
			wantErr(t, err, store.ErrCorrupt)
		})
	}
}
