package fleet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coily.dev/coily/approvals"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store/etcdstore"
)

// approvalPolicy is the console's policy (the local caller asks, tag:owner
// decides), with /bin/true for servers' probe and `echo soon …`, whose
// approval expires after a second.
var approvalPolicy = strings.Replace(testserver.WebPolicy, "commands:\n  - {name: confirm-echo",
	"commands:\n  - {name: confirm-soon, binary: /bin/echo, args: [soon, \"**\"], sandbox: native, confirm: true, confirm_timeout: 1s}\n"+
		"  - {name: \"true\", binary: /bin/true, args: [\"**\"], flags: any, sandbox: native}\n  - {name: confirm-echo", 1)

func approvalServers(t *testing.T) [3]*node {
	t.Helper()
	if !strings.Contains(approvalPolicy, "confirm-soon") {
		t.Fatal("testserver.WebPolicy changed: no place for the test's rules")
	}
	o := testserver.WebOptions()
	o.Policy = approvalPolicy
	return serversWith(t, o, etcdstore.Config{})
}

// asked is an Exec waiting for an approval, and how it ended.
type asked struct {
	done   chan error
	stdout *strings.Builder
	mu     *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// ask starts an Exec of argv on n that needs an approval.
func (n *node) ask(argv ...string) asked {
	a := asked{done: make(chan error, 1), stdout: &strings.Builder{}, mu: &sync.Mutex{}}
	go func() {
		_, err := n.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: argv}, lockedWriter{a.mu, a.stdout}, nopWriter{})
		a.done <- err
	}()
	return a
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// ended is how the Exec ended, and what it printed.
func (a asked) ended(t *testing.T) (string, error) {
	t.Helper()
	select {
	case err := <-a.done:
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.stdout.String(), err
	case <-time.After(within):
		t.Fatal("the Exec waiting for its approval did not end")
		return "", nil
	}
}

func ownerReq() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = testserver.WebOwner
	return r
}

// pending is the approvals n lists, as the console shows them.
func (n *node) pending(t *testing.T) []approvals.Pending {
	t.Helper()
	p, err := n.Server.WebApprovals(ownerReq())
	if err != nil {
		t.Fatalf("list approvals: %v", err)
	}
	return p
}

// waitPending waits until n lists one pending approval and returns its id.
func (n *node) waitPending(t *testing.T) *coilyv1.Approval {
	t.Helper()
	var p []approvals.Pending
	poll.Until(t, within, "the approval is listed", func() bool {
		p = n.pending(t)
		return len(p) == 1
	})
	return p[0].Approval
}

func (n *node) decide(id string, approve bool) (*coilyv1.Approval, error) {
	return n.Server.WebDecide(ownerReq(), id, approve, "from the test")
}

// An approval asked on A is listed on B and C, and C's watch sees it
// asked then approved; its requester may not
// approve it on B; the owner approves it on B, and A runs the command; it
// is then listed nowhere, and a later decision is refused.
func TestApprovalDecidedOnAnotherHost(t *testing.T) {
	ns := approvalServers(t)
	a, b, c := ns[0], ns[1], ns[2]
	w, err := c.Server.WebWatchApprovals(ownerReq())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	x := a.ask("/bin/echo", "confirm", "from A")
	ap := b.waitPending(t)
	if got := c.waitPending(t); got.GetId() != ap.GetId() || got.GetRequester() == "" || strings.Join(got.GetArgv(), " ") != "/bin/echo confirm from A" {
		t.Fatalf("C lists %v, B %v", got, ap)
	}
	self := &coilyv1.DecideRequest{Id: ap.GetId(), Verdict: coilyv1.Verdict_VERDICT_APPROVE}
	if _, err := b.Client.API.Decide(context.Background(), self); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the requester approved its own request on B: %v", err)
	}
	d, err := b.decide(ap.GetId(), true)
	if err != nil || d.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_APPROVED || d.GetDecidedBy() != "tag:owner" {
		t.Fatalf("decide on B: %v %v", d, err)
	}
	out, err := x.ended(t)
	if err != nil || out != "confirm from A\n" {
		t.Fatalf("A's Exec after B's approval: %q %v", out, err)
	}
	var seen []coilyv1.ApprovalState
	for len(seen) < 2 {
		select {
		case ch, ok := <-w.Changes:
			if !ok {
				t.Fatalf("C's watch ended after %v", seen)
			}
			if ch.GetId() == ap.GetId() {
				seen = append(seen, ch.GetState())
			}
		case <-time.After(within):
			t.Fatalf("C's watch saw %v of A's approval", seen)
		}
	}
	if seen[0] != coilyv1.ApprovalState_APPROVAL_STATE_PENDING || seen[1] != coilyv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("C's watch saw %v", seen)
	}
	for _, n := range ns {
		poll.Until(t, within, "the decided approval leaves the lists", func() bool { return len(n.pending(t)) == 0 })
	}
	if _, err := c.decide(ap.GetId(), false); codeOf(err) != refusal.BadRequest {
		t.Fatalf("a decision after the approval ended: %v, want bad-request", err)
	}
}

// Two approvers decide one approval at once, on A and on B: exactly one
// decision stands, the other is refused as already decided, and A's Exec
// ends as the standing one says.
func TestApprovalDecidedOnce(t *testing.T) {
	ns := approvalServers(t)
	a, b := ns[0], ns[1]
	for round := range 6 {
		x := a.ask("/bin/echo", "confirm", "race")
		id := b.waitPending(t).GetId()
		approveOnA := round%2 == 0
		start := make(chan struct{})
		type answer struct {
			a   *coilyv1.Approval
			err error
		}
		answers := make([]answer, 2)
		var wg sync.WaitGroup
		for i, n := range []*node{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := n.decide(id, (i == 0) == approveOnA)
				answers[i] = answer{d, err}
			}()
		}
		close(start)
		wg.Wait()
		var won *coilyv1.Approval
		for _, an := range answers {
			switch {
			case an.err == nil && won == nil:
				won = an.a
			case an.err == nil:
				t.Fatalf("round %d: both decisions stood: %v", round, answers)
			case codeOf(an.err) != refusal.BadRequest:
				t.Fatalf("round %d: the losing decision: %v, want bad-request", round, an.err)
			}
		}
		if won == nil {
			t.Fatalf("round %d: no decision stood: %v %v", round, answers[0].err, answers[1].err)
		}
		out, err := x.ended(t)
		switch won.GetState() {
		case coilyv1.ApprovalState_APPROVAL_STATE_APPROVED:
			if err != nil || out != "confirm race\n" {
				t.Fatalf("round %d: approved, but the Exec: %q %v", round, out, err)
			}
		default:
			if codeOf(err) != refusal.ConfirmRejected || out != "" {
				t.Fatalf("round %d: denied, but the Exec: %q %v", round, out, err)
			}
		}
	}
}

// An approval on B racing the expiry on A has one outcome: the approver
// told it stands sees the command run; the approver refused sees it
// expire.
func TestApprovalExpiryRacesApprove(t *testing.T) {
	ns := approvalServers(t)
	a, b := ns[0], ns[1]
	for round := range 4 {
		x := a.ask("/bin/echo", "soon", "or never")
		ap := b.waitPending(t)
		// Aimed at the expiry (not a synchronisation: either outcome is
		// checked to be whole).
		time.Sleep(time.Until(ap.GetExpiresAt().AsTime()))
		d, derr := b.decide(ap.GetId(), true)
		out, err := x.ended(t)
		switch {
		case derr == nil:
			if d.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_APPROVED || err != nil || out != "soon or never\n" {
				t.Fatalf("round %d: approved (%v) but the Exec: %q %v", round, d, out, err)
			}
		case codeOf(derr) == refusal.BadRequest:
			if codeOf(err) != refusal.ConfirmTimeout || out != "" {
				t.Fatalf("round %d: the approval was refused as expired, but the Exec: %q %v", round, out, err)
			}
		default:
			t.Fatalf("round %d: decide: %v", round, derr)
		}
	}
}

// A lockout on A rejects its pending approval everywhere: B cannot
// approve it after A's Lockout returned. A lockout taken on C does the
// same to A's next approval, whether or not A has heard of it yet.
func TestLockoutRejectsApprovalsEverywhere(t *testing.T) {
	ns := approvalServers(t)
	a, b, c := ns[0], ns[1], ns[2]
	for _, locker := range []*node{a, c} {
		x := a.ask("/bin/echo", "confirm", "locked")
		id := b.waitPending(t).GetId()
		if err := locker.lockout(t, "approvals"); err != nil {
			t.Fatal(err)
		}
		if d, err := b.decide(id, true); err == nil {
			t.Fatalf("approved on B after the lockout: %v", d)
		}
		if out, err := x.ended(t); codeOf(err) != refusal.LockoutActive || out != "" {
			t.Fatalf("the Exec waiting for approval under a lockout: %q %v", out, err)
		}
		locker.unlock(t)
		for _, n := range ns {
			poll.Until(t, within, "the unlock reaches every server", func() bool { return n.exec("/bin/true") == nil })
		}
	}
}

// A host cut from the cluster cannot decide (state-unavailable); healed,
// it can, and the asking host runs the command.
func TestCutHostCannotDecide(t *testing.T) {
	ns := approvalServers(t)
	a, b := ns[0], ns[1]
	x := a.ask("/bin/echo", "confirm", "after the heal")
	id := b.waitPending(t).GetId()
	b.link.Cut()
	if d, err := b.decide(id, true); codeOf(err) != refusal.StateUnavailable {
		t.Fatalf("a cut host decided: %v %v", d, err)
	}
	if _, err := b.Server.WebApprovals(ownerReq()); codeOf(err) != refusal.StateUnavailable {
		t.Fatalf("a cut host listed the approvals: %v", err)
	}
	b.link.Heal()
	poll.Until(t, within, "the healed host decides", func() bool {
		_, err := b.decide(id, true)
		return err == nil
	})
	if out, err := x.ended(t); err != nil || out != "confirm after the heal\n" {
		t.Fatalf("A's Exec after the healed host's approval: %q %v", out, err)
	}
}
