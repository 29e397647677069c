package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/console"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/recorder"
)

// slowLimits are the limits of the tests of slow peers: short, so that a
// test waits for them in seconds, long enough to tell "at once" from
// "at the timeout" on a loaded machine.
var slowLimits = httpserve.Limits{ReadHeaderTimeout: 6 * time.Second, ReadTimeout: 6 * time.Second,
	WriteTimeout: 6 * time.Second, IdleTimeout: 2 * time.Second, PeerConns: 4}

// TestSlowPeerHeldOff: a tailnet peer with no permission opens its cap of
// connections and three more, each sending its headers a byte at a time
// and never ending them. Three are closed at once, the others when the
// header timeout passes, and the owner is served meanwhile; the refusals
// are recorded once for the window and summed up at close.
func TestSlowPeerHeldOff(t *testing.T) {
	tc := startTailnetConsoleWith(t, console.Config{Limits: slowLimits, Heartbeat: time.Second})
	intruder := tc.in.TailnetNode(t, "intruder", "tag:stranger")
	phone := tc.in.TailnetNode(t, "phone", "tag:owner")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := testserver.HoldMany(t, slowLimits.PeerConns+3, func() (net.Conn, error) { return intruder.Dial(ctx, "tcp", "coily:80") },
		"coily", 100*time.Millisecond)
	checkHeld(t, held, 3, slowLimits, func() {
		resp, err := phone.HTTPClient().Get("http://coily/api/status")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("the owner, while another peer holds its cap: %d", resp.StatusCode)
		}
	})
	rec := tc.in.WaitAudit(t, func(r audit.Record) bool { return r.Method == "web:connection" })
	if rec.Principal != "tag:stranger" || rec.Code != "rate-limit" || rec.Decision != "refuse" || rec.Transport != "web" {
		t.Errorf("connection refusal recorded as %+v", rec)
	}
	tc.c.Close()
	sum := tc.in.WaitAudit(t, func(r audit.Record) bool {
		return r.Event == recorder.EventRefusalSummary && r.Details["sample_method"] == "web:connection"
	})
	if sum.Principal != "tag:stranger" || sum.Details["count"] != "2" {
		t.Errorf("summary of the connection refusals: %+v", sum)
	}
	recs, err := audit.Tail(tc.in.StateDir+"/audit", 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Method == "web:connection" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d records of refused connections in one window, want 1", n)
	}
}

// checkHeld reads what became of a slow peer's connections: the first
// refused were closed at once, without an answer; then, while the others
// are still held, meanwhile runs; the others are closed by the header
// timeout, not before.
func checkHeld(t *testing.T, held <-chan testserver.Held, refused int, lim httpserve.Limits, meanwhile func()) {
	t.Helper()
	for i := range refused {
		select {
		case h := <-held:
			if d := h.Closed.Sub(h.Opened); d > lim.ReadHeaderTimeout/2 || h.Bytes != 0 {
				t.Fatalf("connection %d past the cap: closed after %s with %d bytes; want at once, none", i, d, h.Bytes)
			}
		case <-time.After(lim.ReadHeaderTimeout / 2):
			t.Fatalf("only %d connections past the cap were closed at once, want %d", i, refused)
		}
	}
	meanwhile()
	select {
	case h := <-held:
		t.Fatalf("a connection within the cap closed after %s, before the header timeout", h.Closed.Sub(h.Opened))
	default:
	}
	for i := range lim.PeerConns {
		select {
		case h := <-held:
			if d := h.Closed.Sub(h.Opened); d < lim.ReadHeaderTimeout*3/4 || h.Bytes != 0 {
				t.Errorf("connection %d within the cap: closed after %s with %d bytes; want the header timeout, %s", i, d, h.Bytes, lim.ReadHeaderTimeout)
			}
		case <-time.After(lim.ReadHeaderTimeout + 10*time.Second):
			t.Fatalf("connection %d within the cap outlived the header timeout", i)
		}
	}
}

// TestUnadmittedBodyNotRead: a peer with no permission posts a lockout
// with a huge body, or a chunked one, and never sends the rest: it is
// refused, audited, at once, without the server waiting for the body,
// and its connection is closed. The owner's own slow body is read up to
// the read timeout, then refused.
func TestUnadmittedBodyNotRead(t *testing.T) {
	tc := startTailnetConsoleWith(t, console.Config{Limits: slowLimits, Heartbeat: time.Second})
	intruder := tc.in.TailnetNode(t, "intruder", "tag:stranger")
	phone := tc.in.TailnetNode(t, "phone", "tag:owner")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const head = "POST /api/lockout HTTP/1.1\r\nHost: coily\r\nContent-Type: application/json\r\n"
	for _, rest := range []string{
		"Content-Length: 100000000\r\n\r\n{\"reason\":\"",
		"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"rea\r\n",
		"Content-Length: 100\r\n\r\n{\"reason\":\"",
	} {
		c, err := intruder.Dial(ctx, "tcp", "coily:80")
		if err != nil {
			t.Fatal(err)
		}
		p := testserver.SendPartial(t, c, head+rest)
		if p.Status != http.StatusForbidden || p.Answered > slowLimits.ReadTimeout/2 || p.Closed > slowLimits.ReadTimeout/2 {
			t.Errorf("%q: %d after %s, closed after %s; want 403 at once, then closed", rest, p.Status, p.Answered, p.Closed)
		}
	}
	tc.in.WaitAudit(t, func(r audit.Record) bool {
		return r.Principal == "tag:stranger" && r.Code == "permission-denied" && strings.HasSuffix(r.Method, "/Lockout")
	})
	c, err := phone.Dial(ctx, "tcp", "coily:80")
	if err != nil {
		t.Fatal(err)
	}
	p := testserver.SendPartial(t, c, "POST /api/pause HTTP/1.1\r\nHost: coily\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"re")
	if p.Status != http.StatusBadRequest || p.Answered < slowLimits.ReadTimeout*9/10 || p.Answered > slowLimits.ReadTimeout+10*time.Second {
		t.Errorf("the owner's slow body: %d after %s; want 400 after the read timeout, %s", p.Status, p.Answered, slowLimits.ReadTimeout)
	}
	st, err := tc.in.Client.API.Status(ctx, &coilyv1.StatusRequest{})
	if err != nil || st.GetLockout().GetActive() || st.GetPause().GetActive() {
		t.Fatalf("after the refused requests: %v %v", st, err)
	}
}

// TestStreamsOutliveTimeouts: the event streams are long-lived GETs: they
// stream for several times the read and write timeouts and still deliver.
func TestStreamsOutliveTimeouts(t *testing.T) {
	lim := httpserve.Limits{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		IdleTimeout: time.Second}
	tc := startTailnetConsoleWith(t, console.Config{Limits: lim, Heartbeat: 100 * time.Millisecond})
	client := tc.in.TailnetNode(t, "phone", "tag:owner").HTTPClient()
	start := time.Now()
	records := openStream(t, client, "http://coily/api/audit/stream?event=pause")
	approvals := openStream(t, client, "http://coily/api/approvals/stream")
	for _, s := range []<-chan string{records, approvals} {
		for time.Since(start) < 3*lim.ReadTimeout {
			nextLine(t, s, ": ping")
		}
	}
	if _, err := tc.in.Client.API.Pause(context.Background(), &coilyv1.PauseRequest{Reason: "late"}); err != nil {
		t.Fatal(err)
	}
	nextLine(t, records, "event: record")
	if _, err := tc.in.Client.API.Resume(context.Background(), &coilyv1.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	done := execAsync(tc.in, "/bin/echo", "confirm", "late")
	nextLine(t, approvals, "event: approval")
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(nextLine(t, approvals, "data: "), "data: ")), &a); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post("http://coily/api/approvals/"+a.ID+"/deny", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitOutcome(t, done, 10*time.Second)
}

// openStream opens an event stream and delivers its lines until the test
// ends.
func openStream(t *testing.T, c *http.Client, url string) <-chan string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("%s: %d", url, resp.StatusCode)
	}
	lines, stop := make(chan string), make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		resp.Body.Close()
		<-ended
	})
	return lines
}

// nextLine reads lines until one that begins with prefix, failing if the
// stream ends or none comes within 10 s.
func nextLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended waiting for %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q within 10 s", prefix)
		}
	}
}
