package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
)

// The console's callers (testserver.WebNodes), and an address outside
// the tailnet.
const (
	ownerAddr    = testserver.WebOwner
	watchAddr    = testserver.WebWatcher
	agentAddr    = testserver.WebAgent
	strangerAddr = testserver.WebStranger
	unknownAddr  = testserver.WebUnknown
	outsideAddr  = "192.0.2.1:40010"
)

// startWeb serves the console's policy, in which the agent may also
// pause the server.
func startWeb(t *testing.T) *testserver.Instance {
	t.Helper()
	o := testserver.WebOptions()
	o.Policy = strings.Replace(o.Policy, "permissions: [exec]\n", "permissions: [exec, pause]\n", 1)
	if o.Policy == testserver.WebPolicy {
		t.Fatal("the agent's permissions are not in testserver.WebPolicy")
	}
	return testserver.Start(t, o)
}

func webReq(method, path, remote string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	return r
}

// TestWebAuthorizationMatrix walks every console action for every caller
// class: the same table as gRPC decides, refusals are audited with the
// transport "web", and an action without an expectation fails the test.
func TestWebAuthorizationMatrix(t *testing.T) {
	in := startWeb(t)
	allowed := map[access.WebAction][]string{
		access.WebPage:           {"owner", "watch", "agent"},
		access.WebStatus:         {"owner", "watch", "agent"},
		access.WebApprovals:      {"owner"},
		access.WebDecide:         {"owner"},
		access.WebLockout:        {"owner"},
		access.WebPause:          {"owner", "agent"},
		access.WebResume:         {"owner"},
		access.WebKill:           {"owner"},
		access.WebAudit:          {"owner"},
		access.WebWatchApprovals: {"owner"},
	}
	classes := []struct{ name, addr string }{
		{"owner", ownerAddr}, {"watch", watchAddr}, {"agent", agentAddr},
		{"stranger", strangerAddr}, {"unknown", unknownAddr}, {"outside", outsideAddr},
	}
	for _, a := range access.WebActions() {
		want, ok := allowed[a]
		if !ok {
			t.Errorf("console action %q has no expectation", a)
			continue
		}
		for _, c := range classes {
			err := in.Server.WebAdmit(webReq(http.MethodGet, "/", c.addr), a)
			if slices.Contains(want, c.name) != (err == nil) {
				t.Errorf("%s doing %s: err=%v, want allowed=%v", c.name, a, err, slices.Contains(want, c.name))
				continue
			}
			if err == nil {
				continue
			}
			code := refusal.As(err).Code
			wantCode := refusal.PermissionDenied
			if c.name == "unknown" || c.name == "outside" {
				wantCode = refusal.Unauthenticated
			}
			if code != wantCode || refusal.As(err).AuditID == "" {
				t.Errorf("%s doing %s: code %s audit %q, want %s and an audit id", c.name, a, code, refusal.As(err).AuditID, wantCode)
			}
		}
	}
	if err := in.Server.WebAdmit(webReq(http.MethodGet, "/", ownerAddr), access.WebAction("nope")); refusal.As(err).Code != refusal.PermissionDenied {
		t.Errorf("unknown action: %v", err)
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool {
		return r.Method == "web:kill" && r.Principal == "tag:watch" && r.Decision == "refuse"
	})
	if rec.Transport != access.TransportWeb || rec.Code != string(refusal.PermissionDenied) {
		t.Errorf("refused kill audited as %+v", rec)
	}
}

// TestWebControlsAuditedAsTwins: lockout, pause and resume from the
// console are the gRPC handlers' own records, with the transport "web".
func TestWebControlsAuditedAsTwins(t *testing.T) {
	in := startWeb(t)
	if _, err := in.Server.WebPause(webReq(http.MethodPost, "/api/pause", agentAddr), "agent stops itself"); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Server.WebResume(webReq(http.MethodPost, "/api/resume", agentAddr), ""); refusal.As(err).Code != refusal.PermissionDenied {
		t.Fatalf("agent resumed: %v", err)
	}
	if _, err := in.Server.WebResume(webReq(http.MethodPost, "/api/resume", ownerAddr), "back"); err != nil {
		t.Fatal(err)
	}
	lo, err := in.Server.WebLockout(webReq(http.MethodPost, "/api/lockout", ownerAddr), "from the phone")
	if err != nil || !lo.GetLockout().GetActive() || lo.GetLockout().GetBy() != "tag:owner" {
		t.Fatalf("lockout: %v %v", lo, err)
	}
	for _, ev := range []string{"pause", "resume", "lockout"} {
		rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == ev && r.Decision == "allow" })
		if rec.Transport != access.TransportWeb || rec.Peer == "" || rec.Method == "" {
			t.Errorf("%s audited as %+v", ev, rec)
		}
	}
	// Locked out: status and the audit still answer; pause does not.
	st, err := in.Server.WebStatus(webReq(http.MethodGet, "/api/status", watchAddr))
	if err != nil || !st.Status.GetLockout().GetActive() || !st.ExecsShown {
		t.Fatalf("status under lockout: %+v %v", st, err)
	}
	if _, err := in.Server.WebPause(webReq(http.MethodPost, "/api/pause", ownerAddr), ""); refusal.As(err).Code != refusal.LockoutActive {
		t.Fatalf("pause under lockout: %v", err)
	}
	as, err := in.Server.WebAudit(webReq(http.MethodGet, "/api/audit/stream", ownerAddr), 5)
	if err != nil {
		t.Fatalf("audit under lockout: %v", err)
	}
	as.Close()
	// An agent sees the state, not the commands of others.
	st, err = in.Server.WebStatus(webReq(http.MethodGet, "/api/status", agentAddr))
	if err != nil || st.ExecsShown || st.Execs != nil {
		t.Fatalf("agent's status: %+v %v", st, err)
	}
}

// waitInFlight polls the console's status until an exec whose argv ends
// with last is in flight (running, when running is set).
func waitInFlight(t *testing.T, in *testserver.Instance, last string, running bool) server.ExecInfo {
	t.Helper()
	var found server.ExecInfo
	testserver.Poll(t, 10*time.Second, "exec in flight", func() bool {
		st, err := in.Server.WebStatus(webReq(http.MethodGet, "/api/status", ownerAddr))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Execs {
			if e.Argv[len(e.Argv)-1] == last && (!running || e.Running) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// TestWebKillRunning kills one running command of two: its process group
// goes, its caller hears command-killed, the other runs on, and the kill
// is audited with the request it killed.
func TestWebKillRunning(t *testing.T) {
	in := startWeb(t)
	pidFile := filepath.Join(in.StateDir, "pids")
	victim := startRunning(t, in, "/bin/sh", "-c", fmt.Sprintf("sleep 30 & echo $! > %[1]s; echo $$ >> %[1]s; echo go; wait; : victim", pidFile))
	other := startRunning(t, in, "/bin/sh", "-c", "echo go; sleep 30; : other")
	pids := readPids(t, pidFile)
	info := waitInFlight(t, in, fmt.Sprintf("sleep 30 & echo $! > %[1]s; echo $$ >> %[1]s; echo go; wait; : victim", pidFile), true)
	if info.Principal == "" || info.Rule != "sh" || info.Admitted.IsZero() {
		t.Fatalf("in-flight info: %+v", info)
	}
	if _, err := in.Server.WebKill(webReq(http.MethodPost, "/api/execs/x/kill", watchAddr), info.RequestID, ""); refusal.As(err).Code != refusal.PermissionDenied {
		t.Fatalf("watcher killed: %v", err)
	}
	running, err := in.Server.WebKill(webReq(http.MethodPost, "/api/execs/x/kill", ownerAddr), info.RequestID, "runaway")
	if err != nil || !running {
		t.Fatalf("kill: running=%v err=%v", running, err)
	}
	select {
	case r := <-victim:
		wantCode(t, r.err, refusal.CommandKilled)
	case <-time.After(10 * time.Second):
		t.Fatal("killed exec did not end")
	}
	waitGone(t, pids, 5*time.Second)
	select {
	case r := <-other:
		t.Fatalf("the other command ended too: %+v", r)
	default:
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "exec.kill" && r.Decision == "allow" })
	if rec.RequestID != info.RequestID || rec.Principal != "tag:owner" || rec.Transport != access.TransportWeb ||
		rec.Reason != "runaway" || rec.Killed != 1 || rec.Details["requester"] != info.Principal || rec.Rule != "sh" {
		t.Errorf("kill audited as %+v", rec)
	}
	in.WaitAudit(t, func(r audit.Record) bool {
		return r.Event == "exec.result" && r.RequestID == info.RequestID && r.Code == string(refusal.CommandKilled)
	})
	if _, err := in.Server.WebKill(webReq(http.MethodPost, "/api/execs/x/kill", ownerAddr), info.RequestID, ""); refusal.As(err).Code != refusal.BadRequest {
		t.Fatalf("second kill of the same request: %v", err)
	}
	if _, err := in.Server.WebKill(webReq(http.MethodPost, "/api/execs/x/kill", ownerAddr), "no-such-id\x1b[2J", ""); refusal.As(err).Code != refusal.BadRequest {
		t.Fatalf("kill of an unknown id: %v", err)
	}
}

// TestWebKillWaitingForApproval: a command killed while it waits for an
// approval never runs; its approval ends with it.
func TestWebKillWaitingForApproval(t *testing.T) {
	in := startWeb(t)
	done := make(chan result, 1)
	go func() { done <- execArgv(t, in, "/bin/echo", "confirm", "never") }()
	var pending []approvals.Pending
	testserver.Poll(t, 10*time.Second, "pending approval", func() bool {
		var err error
		pending, err = in.Server.WebApprovals(webReq(http.MethodGet, "/api/approvals", ownerAddr))
		if err != nil {
			t.Fatal(err)
		}
		return len(pending) == 1
	})
	if pending[0].Rule == nil || pending[0].Rule.Name != "confirm-echo" {
		t.Fatalf("pending approval's rule: %+v", pending[0])
	}
	info := waitInFlight(t, in, "never", false)
	if info.Running || info.ApprovalID != pending[0].Approval.GetId() {
		t.Fatalf("waiting exec: %+v", info)
	}
	if running, err := in.Server.WebKill(webReq(http.MethodPost, "/", ownerAddr), info.RequestID, ""); err != nil || running {
		t.Fatalf("kill: %v %v", running, err)
	}
	select {
	case r := <-done:
		wantCode(t, r.err, refusal.CommandKilled)
	case <-time.After(10 * time.Second):
		t.Fatal("killed exec did not end")
	}
	if p, err := in.Server.WebApprovals(webReq(http.MethodGet, "/", ownerAddr)); err != nil || len(p) != 0 {
		t.Fatalf("approvals after the kill: %v %v", p, err)
	}
}

// TestWebDecideRunsTheCommand approves from the console: the waiting
// exec runs, and the decision is audited with both principals.
func TestWebDecideRunsTheCommand(t *testing.T) {
	in := startWeb(t)
	done := make(chan result, 1)
	go func() { done <- execArgv(t, in, "/bin/echo", "confirm", "ship it") }()
	var pending []approvals.Pending
	testserver.Poll(t, 10*time.Second, "pending approval", func() bool {
		pending, _ = in.Server.WebApprovals(webReq(http.MethodGet, "/", ownerAddr))
		return len(pending) == 1
	})
	id := pending[0].Approval.GetId()
	if _, err := in.Server.WebDecide(webReq(http.MethodPost, "/", watchAddr), id, true, ""); refusal.As(err).Code != refusal.PermissionDenied {
		t.Fatalf("watcher decided: %v", err)
	}
	a, err := in.Server.WebDecide(webReq(http.MethodPost, "/", ownerAddr), id, true, "ok from the phone")
	if err != nil || a.GetState() != coilyv1.ApprovalState_APPROVAL_STATE_APPROVED || a.GetDecidedBy() != "tag:owner" {
		t.Fatalf("decide: %v %v", a, err)
	}
	r := <-done
	if r.err != nil || r.stdout != "confirm ship it\n" {
		t.Fatalf("approved exec: %+v", r)
	}
	rec := in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "approval.decide" && r.Decision == "allow" })
	if rec.Transport != access.TransportWeb || rec.Details["requester"] == "" || rec.Reason != "ok from the phone" {
		t.Errorf("decision audited as %+v", rec)
	}
}

// TestWebAuditStream: the backlog, then records as they are written; the
// server's shutdown ends the stream.
func TestWebAuditStream(t *testing.T) {
	in := startWeb(t)
	if _, err := in.Server.WebPause(webReq(http.MethodPost, "/", ownerAddr), "before"); err != nil {
		t.Fatal(err)
	}
	st, err := in.Server.WebAudit(webReq(http.MethodGet, "/", ownerAddr), 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := len(st.Backlog); n == 0 || st.Backlog[n-1].Event != "pause" {
		t.Fatalf("backlog ends with %+v", st.Backlog)
	}
	if _, err := in.Server.WebResume(webReq(http.MethodPost, "/", ownerAddr), "after"); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case r := <-st.Live:
			if r.Event != "resume" {
				continue
			}
			if r.Seq <= st.Backlog[len(st.Backlog)-1].Seq {
				t.Fatalf("live record %d is not after the backlog", r.Seq)
			}
			in.Stop()
			for range st.Live { // closed by the shutdown
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no live record")
		}
	}
}

func TestWebAuditStreamBacklogBounded(t *testing.T) {
	in := startWeb(t)
	for range 3 {
		if _, err := in.Server.WebPause(webReq(http.MethodPost, "/", ownerAddr), ""); err != nil {
			t.Fatal(err)
		}
	}
	st, err := in.Server.WebAudit(webReq(http.MethodGet, "/", ownerAddr), 2)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if len(st.Backlog) != 2 {
		t.Fatalf("backlog of %d records, asked for 2", len(st.Backlog))
	}
	st, err = in.Server.WebAudit(webReq(http.MethodGet, "/", ownerAddr), -5)
	if err != nil || len(st.Backlog) != 0 {
		t.Fatalf("negative backlog: %v %v", st, err)
	}
	st.Close()

}
