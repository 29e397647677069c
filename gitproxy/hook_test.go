package gitproxy

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// A push whose hook request the proxy will not read whole (too many
// updates, a line too long) is refused, and git's hook is answered: the
// push ends instead of holding git, its hook and the request forever.
func TestHookRequestTooLargeRefused(t *testing.T) {
	e := newEnv(t, "")
	e.timeout = 45 * time.Second
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "w")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.commit(work, "a", "agent work")
	many := []string{"push", "origin"}
	for i := range maxUpdates + 10 {
		many = append(many, fmt.Sprintf("HEAD:refs/heads/agent/b%d", i))
	}
	long := "HEAD:refs/heads/agent/" + strings.Repeat("x/", maxHookLine/2)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"too many updates", many},
		{"a line too long", []string{"push", "origin", long[:len(long)-1]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.try(work, c.args...)
			if err == nil {
				t.Fatalf("push accepted:\n%s", out)
			}
			if !strings.Contains(out, "bad-request") {
				t.Fatalf("push refused without the proxy's reason:\n%s", out)
			}
			if got := e.lastPush(); got.Decision != "refuse" {
				t.Fatalf("audit: %+v", got)
			}
		})
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/b0"); got != "" {
		t.Fatalf("upstream changed: agent/b0 is %s", got)
	}
}

// An agent that goes away while its push waits for an approval cancels
// the approval; the push ends, audited, and upstream is unchanged.
func TestPushAgentGoneMidApproval(t *testing.T) {
	e := newEnv(t, "")
	old, body := e.forcedPush()
	pushes := len(e.rec.events("git.push"))
	ch, stop := e.queue.Watch()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	go e.post(ctx, body)
	var id string
	for a := range ch {
		if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			id = a.GetId()
			break
		}
	}
	cancel()
	for a := range ch {
		if a.GetId() == id && a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			if a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_CANCELLED {
				t.Fatalf("approval %s", a.GetState())
			}
			break
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(e.rec.events("git.push")) == pushes {
		if time.Now().After(deadline) {
			t.Fatal("the push never ended")
		}
		time.Sleep(10 * time.Millisecond) // polling the audit, with a deadline
	}
	if got := e.lastPush(); got.Decision != "refuse" {
		t.Fatalf("audit: %+v", got)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != old {
		t.Fatalf("upstream's agent/x is %s, want %s", got, old)
	}
}

// forcedPush makes upstream's agent/x and returns it and the body of a
// receive-pack request that forces it to another commit (which the
// test policy sends for approval).
func (e *env) forcedPush() (old, body string) {
	e.t.Helper()
	e.seed("owner/app")
	work := filepath.Join(e.t.TempDir(), "w")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	old = e.commit(work, "a", "one")
	e.git(work, "push", "--quiet", "origin", "agent/x")
	e.git(work, "reset", "--quiet", "--hard", "HEAD^")
	forced := e.commit(work, "b", "forced")
	cmd := gitCmd(work, "pack-objects", "--stdout", "--revs", "--quiet")
	cmd.Stdin = strings.NewReader(forced + "\n^" + old + "\n")
	pack, err := cmd.Output()
	if err != nil {
		e.t.Fatal(err)
	}
	return old, pkt(old+" "+forced+" refs/heads/agent/x\x00report-status") + "0000" + string(pack)
}

// post sends a receive-pack request and returns the answer's status and
// body (0 and the error when there is none).
func (e *env) post(ctx context.Context, body string) (int, string) {
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url("owner/app")+"/git-receive-pack", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(resp)
}
