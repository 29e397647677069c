package approvals

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

func pendingExec(requester string) Request {
	return Request{ID: descriptor.NewID(), Requester: requester,
		Exec: &coilyv1.ExecRequest{Argv: []string{"/usr/bin/git", "push", "--force"}, Note: "why"},
		Rule: &policy.Rule{Name: "git-push-force"}}
}

type waitResult struct {
	a   *coilyv1.Approval
	err error
}

func waitAsync(as *Queue, ctx context.Context, ap *Ticket) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		a, err := as.Wait(ctx, ap)
		ch <- waitResult{a, err}
	}()
	return ch
}

func codeOf(err error) refusal.Code {
	var r *refusal.Error
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

func TestApprovalOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		ttl      time.Duration
		act      func(as *Queue, ap *Ticket, cancel context.CancelFunc)
		state    coilyv1.ApprovalState
		wantCode refusal.Code // "" = approved
	}{
		{"approved", time.Minute, func(as *Queue, ap *Ticket, _ context.CancelFunc) {
			if _, err := as.Decide(ap.a.GetId(), "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, "ok"); err != nil {
				panic(err)
			}
		}, coilyv1.ApprovalState_APPROVAL_STATE_APPROVED, ""},
		{"denied", time.Minute, func(as *Queue, ap *Ticket, _ context.CancelFunc) {
			if _, err := as.Decide(ap.a.GetId(), "tag:owner", coilyv1.Verdict_VERDICT_DENY, "not today"); err != nil {
				panic(err)
			}
		}, coilyv1.ApprovalState_APPROVAL_STATE_DENIED, refusal.ConfirmRejected},
		{"expired", 20 * time.Millisecond, func(*Queue, *Ticket, context.CancelFunc) {},
			coilyv1.ApprovalState_APPROVAL_STATE_EXPIRED, refusal.ConfirmTimeout},
		{"requester gone", time.Minute, func(_ *Queue, _ *Ticket, cancel context.CancelFunc) { cancel() },
			coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED, refusal.Internal},
		{"lockout", time.Minute, func(as *Queue, _ *Ticket, _ context.CancelFunc) {
			if n := as.RejectAll(); n != 1 {
				panic(n)
			}
		}, coilyv1.ApprovalState_APPROVAL_STATE_REJECTED, refusal.LockoutActive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := New(time.Now, nil, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ap := as.Create(pendingExec("tag:agent"), tt.ttl)
			done := waitAsync(as, ctx, ap)
			tt.act(as, ap, cancel)
			r := <-done
			if r.a.GetState() != tt.state || codeOf(r.err) != tt.wantCode {
				t.Fatalf("state %s err %v, want %s %q", r.a.GetState(), r.err, tt.state, tt.wantCode)
			}
			if tt.wantCode == "" && r.err != nil {
				t.Fatal(r.err)
			}
			if as.PendingCount() != 0 {
				t.Fatal("settled approval still pending")
			}
			// Settled is final: a late decision is refused.
			if _, err := as.Decide(ap.a.GetId(), "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, ""); codeOf(err) != refusal.BadRequest {
				t.Fatalf("late decision: %v", err)
			}
		})
	}
}

func TestApprovalNeverSelfDecided(t *testing.T) {
	as := New(time.Now, nil, nil)
	ap := as.Create(pendingExec("tag:agent"), time.Minute)
	for _, v := range []coilyv1.Verdict{coilyv1.Verdict_VERDICT_APPROVE, coilyv1.Verdict_VERDICT_DENY} {
		if _, err := as.Decide(ap.a.GetId(), "tag:agent", v, ""); codeOf(err) != refusal.PermissionDenied {
			t.Fatalf("self-decision %s: %v", v, err)
		}
	}
	if as.PendingCount() != 1 {
		t.Fatal("a refused self-decision settled the approval")
	}
	if _, err := as.Decide("no-such-id", "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, ""); codeOf(err) != refusal.BadRequest {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestApprovalWatch(t *testing.T) {
	as := New(time.Now, nil, nil)
	first := as.Create(pendingExec("tag:a"), time.Minute)
	ch, cancel := as.Watch()
	defer cancel()
	if a := <-ch; a.GetId() != first.a.GetId() || a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("watch did not start with the pending approval: %v", a)
	}
	second := as.Create(pendingExec("tag:b"), time.Minute)
	if a := <-ch; a.GetId() != second.a.GetId() {
		t.Fatalf("creation not seen: %v", a)
	}
	if _, err := as.Decide(second.a.GetId(), "tag:owner", coilyv1.Verdict_VERDICT_DENY, "no"); err != nil {
		t.Fatal(err)
	}
	if a := <-ch; a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_DENIED || a.GetDecidedBy() != "tag:owner" {
		t.Fatalf("decision not seen: %v", a)
	}
	if got, err := as.List(context.Background()); err != nil || len(got) != 1 || got[0].GetId() != first.a.GetId() {
		t.Fatalf("list %v", got)
	}
}

// A watcher that does not read is cut off rather than blocking decisions.
func TestApprovalSlowWatcherDropped(t *testing.T) {
	as := New(time.Now, nil, nil)
	ch, cancel := as.Watch()
	defer cancel()
	for range watchBuffer + 5 {
		as.Create(pendingExec("tag:a"), time.Minute)
	}
	n := 0
	for range ch {
		n++
	}
	if n != watchBuffer {
		t.Fatalf("watcher got %d before being dropped, want %d", n, watchBuffer)
	}
}

// An approval carries the rest of what will run: the working directory,
// the environment the request passes, and its standard input's size,
// digest and first bytes.
func TestApprovalShowsWhatWillRun(t *testing.T) {
	x := pendingExec("tag:agent")
	in := []byte(strings.Repeat("apiVersion: v1\n", 40)) // 600 bytes
	x.Exec.Cwd, x.Exec.Env, x.Exec.Stdin = "other-checkout", map[string]string{"NO_COLOR": "1"}, in
	as := New(time.Now, nil, nil)
	a := as.Create(x, time.Minute).a
	sum := sha256.Sum256(in)
	if a.GetCwd() != "other-checkout" || a.GetEnv()["NO_COLOR"] != "1" || a.GetStdinBytes() != 600 ||
		a.GetStdinSha256() != hex.EncodeToString(sum[:]) || !bytes.Equal(a.GetStdinHead(), in[:512]) {
		t.Fatalf("approval %v", a)
	}
	x.Exec.Env["NO_COLOR"] = "changed"
	if a.GetEnv()["NO_COLOR"] != "1" {
		t.Fatal("the approval shares the request's environment map")
	}
}

// TestApprovalNamesTheObligation: when a confirm rule's obligation asks for
// the approval of a request another rule admits, the approval names the
// confirm rule (what the approver is asked about) and the admitting one.
func TestApprovalNamesTheObligation(t *testing.T) {
	as := New(time.Now, nil, nil)
	r := pendingExec("tag:agent")
	r.Rule, r.Confirm = &policy.Rule{Name: "git"}, &policy.Rule{Name: "git-push-force"}
	if a := as.Create(r, time.Minute).Snapshot(); a.GetRule() != "git-push-force" || a.GetAllowedBy() != "git" {
		t.Fatalf("obligation: rule %q allowed_by %q, want git-push-force, git", a.GetRule(), a.GetAllowedBy())
	}
	r.Confirm = r.Rule // the rule confirms itself
	if a := as.Create(r, time.Minute).Snapshot(); a.GetRule() != "git" || a.GetAllowedBy() != "" {
		t.Fatalf("own confirm: rule %q allowed_by %q, want git and none", a.GetRule(), a.GetAllowedBy())
	}
	r.Confirm = nil // a relayed descriptor asks
	if a := as.Create(r, time.Minute).Snapshot(); a.GetRule() != "git" || a.GetAllowedBy() != "" {
		t.Fatalf("descriptor's confirm: rule %q allowed_by %q, want git and none", a.GetRule(), a.GetAllowedBy())
	}
}
