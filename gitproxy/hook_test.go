package gitproxy

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
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

// A push that waits for an approval says so while it waits: git shows
// the hook's line naming the approval (the id the queue lists) and how
// to approve it, as it comes, before anyone decides: the proxy sends the
// push's answer on as git writes it.
func TestPushWaitingSaysSo(t *testing.T) {
	e := newEnv(t, "")
	old, body := e.forcedPush()
	var n int
	fmt.Sscanf(body[:4], "%04x", &n) // the command, asking for sideband as git does
	body = pkt(body[4:n]+" side-band-64k") + body[n:]
	ch, stop := e.queue.Watch()
	defer stop()
	said := make(chan string, 1)
	answered := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.url("owner/app")+"/git-receive-pack", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		var got strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			progress := sideband2(got.String())
			if i := strings.Index(progress, "coily: waiting for approval"); i >= 0 && strings.Contains(progress[i:], "\n") {
				select {
				case said <- progress:
				default:
				}
			}
			if err != nil {
				answered <- got.String()
				return
			}
		}
	}()
	var id string
	for a := range ch {
		if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			id = a.GetId()
			break
		}
	}
	want := "coily: waiting for approval " + id + " (up to 1m0s): the console's Approvals, or coily approvals approve " + id + "\n"
	select {
	case got := <-said:
		if !strings.Contains(got, want) {
			t.Fatalf("the waiting push says %q, want %q", got, want)
		}
	case got := <-answered:
		t.Fatalf("the push was answered before its approval: %q", got)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting push says nothing")
	}
	if _, err := e.queue.Decide(id, "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, ""); err != nil {
		t.Fatal(err)
	}
	if got := <-answered; !strings.Contains(got, "ok refs/heads/agent/x") {
		t.Fatalf("the approved push's answer: %q", got)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got == old {
		t.Fatal("the approved push did not reach upstream")
	}
}

// sideband2 is what the whole pkt-lines of a receive-pack answer carry on
// sideband 2 (git shows it as "remote: …").
func sideband2(s string) string {
	var out strings.Builder
	for len(s) >= 4 {
		n, err := strconv.ParseUint(s[:4], 16, 16)
		if err != nil || n != 0 && (n < 4 || int(n) > len(s)) {
			break
		}
		if n == 0 {
			n = 4
		} else if n > 4 && s[4] == 2 {
			out.WriteString(s[5:n])
		}
		s = s[n:]
	}
	return out.String()
}
