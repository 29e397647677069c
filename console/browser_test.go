package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"tailscale.com/tsnet"

	"coily.dev/coily/audit"
	"coily.dev/coily/console"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/visible"
)

// The browser tests drive Debian's chromium, headless, in a phone-sized
// window, against the console served on the server's node of a private
// tailnet (internal/devnet), exactly as `coily serve --tailnet --web`
// serves it (HTTP on the node's port 80: a dev tailnet issues no
// certificates).
//
// A browser has no tailnet of its own here, so each one gets a tailnet
// identity the way a phone's browser does through its OS's Tailscale: its
// traffic to the console leaves from a node of the tailnet. The node is a
// tsnet node of the test (tagged tag:owner or tag:watch), and chromium
// reaches it as its HTTP proxy (--proxy-server): a forward proxy on
// 127.0.0.1 that dials the console from that node, and nothing else. The
// browser asks for http://coily/ itself (the Host and Origin the console
// sees are the real ones), and its pages on 127.0.0.1 bypass the proxy,
// as loopback does by default: that is where the hostile page of the
// cross-origin test lives.

// chromiumPath finds Debian's chromium: missing, the test skips, or fails
// under CI=true (scripts/test.sh installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("COILY_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (scripts/test.sh installs it)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// tailnetConsole is a server on a private tailnet with the console on its
// node.
type tailnetConsole struct {
	in *testserver.Instance
	c  *console.Console
}

func startTailnetConsole(t *testing.T) *tailnetConsole {
	t.Helper()
	return startTailnetConsoleWith(t, console.Config{Heartbeat: time.Second})
}

// startTailnetConsoleWith is startTailnetConsole with cfg's heartbeat and
// limits.
func startTailnetConsoleWith(t *testing.T, cfg console.Config) *tailnetConsole {
	t.Helper()
	return startTailnetConsolePolicy(t, testserver.WebPolicy, cfg)
}

// startTailnetConsolePolicy is startTailnetConsoleWith serving policy.
func startTailnetConsolePolicy(t *testing.T, policy string, cfg console.Config) *tailnetConsole {
	t.Helper()
	in := testserver.Start(t, testserver.Options{Policy: policy, Tailnet: true, KillGrace: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := console.ListenNode(ctx, in.Node, logger, true)
	if err != nil {
		t.Fatal(err)
	}
	if ln.TLS || ln.URL != "http://coily."+devnet.MagicDNSDomain+"/" {
		t.Fatalf("console listener: %+v", ln)
	}
	cfg.Server, cfg.Hosts, cfg.Logger = in.Server, ln.Hosts, logger
	c, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Serve(ln.Listener) }()
	t.Cleanup(func() {
		c.Close()
		if err := <-done; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	return &tailnetConsole{in: in, c: c}
}

// browser is one chromium with a tailnet identity.
type browser struct {
	ctx    context.Context
	node   *tsnet.Server
	errs   []string
	errsMu sync.Mutex
}

// newBrowser joins a node named name with tag, serves the forward proxy
// from it and starts chromium behind that proxy in a 390×844 window.
func (tc *tailnetConsole) newBrowser(t *testing.T, chromium, name, tag string) *browser {
	t.Helper()
	node := tc.in.TailnetNode(t, name, tag)
	proxy := httptest.NewServer(forwardProxy(node, "coily"))
	t.Cleanup(proxy.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.ProxyServer(proxy.URL), chromedp.WindowSize(390, 844),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	b := &browser{ctx: bctx, node: node}
	var watchers sync.WaitGroup
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		watchers.Wait()
	})
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// A dialog (an alert an injected script opened) or an uncaught
	// exception (a page broken by its own policy) is a failure.
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	exceptions := chromedp.Events(bctx, runtime.ExceptionThrown)
	watchers.Add(2)
	go func() {
		defer watchers.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.fail("a dialog opened: " + ev.Message)
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		defer watchers.Done()
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.fail("uncaught exception: " + ev.ExceptionDetails.Text + " " + fmt.Sprint(ev.ExceptionDetails.Exception))
		}
	}()
	return b
}

// screenshot saves the page as NAME.png in $COILY_CONSOLE_SCREENSHOTS,
// when set (for people to look at; the tests do not read them).
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("COILY_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644)
	}
	if err != nil {
		t.Log(errors.Join(errors.New("screenshot"), err))
	}
}

func (b *browser) fail(msg string) {
	b.errsMu.Lock()
	defer b.errsMu.Unlock()
	b.errs = append(b.errs, msg)
}

// check fails the test with what the browser reported.
func (b *browser) check(t *testing.T) {
	t.Helper()
	b.errsMu.Lock()
	defer b.errsMu.Unlock()
	for _, e := range b.errs {
		t.Error(e)
	}
	b.errs = nil
}

// do runs steps with a deadline.
func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression (awaiting a promise).
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate in the page until it is truthy.
func waitFor(t *testing.T, b *browser, what, expr string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within))); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// forwardProxy is an HTTP forward proxy for one host: it sends the
// browser's requests for http://host/… over the tailnet from node, and
// refuses every other destination (it is no open proxy).
func forwardProxy(node *tsnet.Server, host string) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: host})
			pr.Out.Host = host
		},
		Transport:     &http.Transport{DialContext: node.Dial, DisableKeepAlives: false, MaxIdleConns: 8},
		FlushInterval: -1,
		// A stream the browser leaves ends in a cancelled request: no news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || r.URL.Host != host || r.URL.Scheme != "http" {
			http.Error(w, "this proxy reaches http://"+host+"/ only", http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

// execAsync runs an Exec as the local operator and delivers its outcome.
type execOutcome struct {
	exit   *coilyv1.ExecExit
	stdout string
	err    error
}

func execAsync(in *testserver.Instance, argv ...string) <-chan execOutcome {
	ch := make(chan execOutcome, 1)
	go func() {
		var out strings.Builder
		exit, err := in.Client.Exec(context.Background(), &coilyv1.ExecRequest{Argv: argv}, &out, io.Discard)
		ch <- execOutcome{exit, out.String(), err}
	}()
	return ch
}

func waitOutcome(t *testing.T, ch <-chan execOutcome, within time.Duration) execOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(within):
		t.Fatalf("exec did not end within %s", within)
	}
	return execOutcome{}
}

// TestBrowserConsole: the acceptance scenarios, in a phone-sized window.
func TestBrowserConsole(t *testing.T) {
	chromium := chromiumPath(t)
	tc := startTailnetConsole(t)
	owner := tc.newBrowser(t, chromium, "phone", "tag:owner")
	watcher := tc.newBrowser(t, chromium, "tv", "tag:watch")
	const home = "http://coily/"

	t.Run("approval appears live, approve runs the command", func(t *testing.T) {
		defer owner.check(t)
		owner.do(t, chromedp.Navigate(home))
		waitFor(t, owner, "the page to know its caller", `document.getElementById("who").textContent === "tag:owner"`, 10*time.Second)
		waitFor(t, owner, "the approvals section", `!document.getElementById("approvals-section").hidden`, 10*time.Second)
		start := time.Now()
		done := execAsync(tc.in, "/bin/echo", "confirm", "deploy v2")
		waitFor(t, owner, "the approval card", `document.querySelector("#approvals .approval pre.argv")?.textContent === "/bin/echo confirm 'deploy v2'"`, 5*time.Second)
		took := time.Since(start)
		owner.screenshot(t, "status-approval")
		if took > time.Second {
			t.Errorf("the approval appeared after %s, want within 1 s", took)
		} else {
			t.Logf("approval on the page %s after the request", took.Round(time.Millisecond))
		}
		owner.do(t, chromedp.Click(chromedp.CSS("#approvals .approval button.approve")))
		o := waitOutcome(t, done, 10*time.Second)
		if o.err != nil || o.stdout != "confirm deploy v2\n" {
			t.Fatalf("approved exec: %+v", o)
		}
		waitFor(t, owner, "the card to go", `document.querySelectorAll("#approvals .approval").length === 0`, 5*time.Second)
		// The result, in the live audit log.
		owner.do(t, chromedp.Navigate(home+"audit?event=exec.result"))
		waitFor(t, owner, "the result record", `[...document.querySelectorAll("#records .record")].some(r =>
			r.textContent.includes("confirm 'deploy v2'") && r.textContent.includes("exit 0"))`, 10*time.Second)
		owner.screenshot(t, "audit")
		rec := tc.in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "approval.decide" && r.Decision == "allow" })
		if rec.Principal != "tag:owner" || rec.Transport != "web" {
			t.Errorf("decision audited as %+v", rec)
		}
	})

	t.Run("hostile argv renders as text", func(t *testing.T) {
		defer owner.check(t)
		argv := append([]string{"/usr/bin/printf", "%s"}, hostileArgs...)
		done := execAsync(tc.in, argv...)
		owner.do(t, chromedp.Navigate(home))
		waitFor(t, owner, "the hostile approval", `document.querySelectorAll("#approvals .approval").length === 1`, 10*time.Second)
		id := eval[string](t, owner, `document.querySelector("#approvals .approval").getAttribute("data-approval-id")`)
		owner.do(t, chromedp.Navigate(home+"approvals/"+id))
		waitFor(t, owner, "the approval page", `!document.getElementById("approval").hidden`, 10*time.Second)
		shown := eval[string](t, owner, `document.getElementById("argv").textContent`)
		if want := visible.Argv(argv); shown != want {
			t.Errorf("argv shown as\n%s\nwant\n%s", shown, want)
		}
		checkVisible(t, "argv on the page", shown)
		owner.screenshot(t, "approval-hostile")
		injected := eval[int](t, owner, `document.querySelectorAll("img, iframe, object, embed, script:not([src]), a[href^='javascript']").length`)
		if injected != 0 {
			t.Errorf("%d elements were injected into the page", injected)
		}
		if children := eval[int](t, owner, `document.getElementById("argv").children.length`); children != 0 {
			t.Errorf("the argv element has %d child elements", children)
		}
		owner.do(t, chromedp.Click(chromedp.ID("deny")))
		if o := waitOutcome(t, done, 10*time.Second); o.err == nil || !strings.Contains(o.err.Error(), "confirm-rejected") {
			t.Fatalf("denied exec: %+v", o)
		}
		waitFor(t, owner, "the decision shown", `document.getElementById("gone").textContent.startsWith("denied by tag:owner")`, 5*time.Second)
	})

	t.Run("no approve permission: no button, and 403", func(t *testing.T) {
		defer watcher.check(t)
		done := execAsync(tc.in, "/bin/echo", "confirm", "not for the tv")
		var id string
		testserver.Poll(t, 10*time.Second, "the approval", func() bool {
			list, _ := tc.in.Client.API.ListApprovals(context.Background(), &coilyv1.ListApprovalsRequest{})
			if len(list.GetApprovals()) == 1 {
				id = list.GetApprovals()[0].GetId()
			}
			return id != ""
		})
		watcher.do(t, chromedp.Navigate(home))
		waitFor(t, watcher, "the page to know its caller", `document.getElementById("who").textContent === "tag:watch"`, 10*time.Second)
		waitFor(t, watcher, "the first render", `document.getElementById("pause-state").textContent !== ""`, 10*time.Second)
		for _, sel := range []string{"#approvals-section", "#lockout", "#resume"} {
			if !eval[bool](t, watcher, `document.querySelector("`+sel+`").hidden`) {
				t.Errorf("%s is shown to a caller without the permission", sel)
			}
		}
		if n := eval[int](t, watcher, `document.querySelectorAll("button.approve, .approval button, .kill").length`); n != 0 {
			t.Errorf("%d approve or kill buttons shown", n)
		}
		// The page asked for nothing the watcher may not have: no refusal
		// of it is in the audit log.
		recs, err := audit.Tail(tc.in.StateDir+"/audit", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Principal == "tag:watch" && r.Decision == "refuse" {
				t.Errorf("the watcher's page was refused: %+v", r)
			}
		}
		status := eval[int](t, watcher, `fetch("/api/approvals/`+id+`/approve", {method: "POST"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("approve from the watcher's page: HTTP %d, want 403", status)
		}
		watcher.do(t, chromedp.Navigate(home+"approvals/"+id))
		waitFor(t, watcher, "the refusal", `document.getElementById("gone").textContent.includes("may not")`, 10*time.Second)
		owner.do(t, chromedp.Navigate(home))
		if s := eval[int](t, owner, `fetch("/api/approvals/`+id+`/deny", {method: "POST"}).then(r => r.status)`); s != 200 {
			t.Fatalf("the owner's deny: HTTP %d", s)
		}
		waitOutcome(t, done, 10*time.Second)
	})

	t.Run("cross-origin POST refused", func(t *testing.T) {
		defer owner.check(t)
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<!doctype html><title>evil</title><form id=f method=post action="http://coily/api/pause"></form><script>
fetch("http://coily/api/lockout", {method: "POST", mode: "no-cors", body: "x"}).then(
  () => { document.title = "sent"; }, e => { document.title = "failed " + e; });
</script>`)
		}))
		defer evil.Close()
		owner.do(t, chromedp.Navigate(evil.URL))
		waitFor(t, owner, "the forged fetch", `document.title === "sent" || document.title.startsWith("failed")`, 10*time.Second)
		rec := tc.in.WaitAudit(t, func(r audit.Record) bool {
			return r.Method == "web:guard" && r.Principal == "tag:owner" && strings.Contains(r.Reason, "cross-origin")
		})
		if rec.Decision != "refuse" || rec.Code != "permission-denied" {
			t.Errorf("forged request audited as %+v", rec)
		}
		// A form posted across origins (no script needed) is refused too.
		ctx, cancel := context.WithTimeout(owner.ctx, 20*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil,
			chromedp.Evaluate[chromedp.Void](`document.getElementById("f").submit()`))); err != nil {
			t.Fatalf("form post: %v", err)
		}
		waitFor(t, owner, "the refusal page", `location.href === "http://coily/api/pause" && document.body.textContent.includes("cross-origin request refused")`, 10*time.Second)
		st, err := tc.in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
		if err != nil || st.GetLockout().GetActive() || st.GetPause().GetActive() {
			t.Fatalf("a forged request took effect: %v %v", st, err)
		}
	})

	t.Run("kill one in-flight exec", func(t *testing.T) {
		defer owner.check(t)
		done := execAsync(tc.in, "/bin/sh", "-c", "echo go; sleep 60; : one")
		owner.do(t, chromedp.Navigate(home))
		waitFor(t, owner, "the running exec", `[...document.querySelectorAll("#execs .exec")].some(e =>
			e.textContent.includes(": one") && e.textContent.includes("running"))`, 10*time.Second)
		rid := eval[string](t, owner, `[...document.querySelectorAll("#execs .exec")].find(e => e.textContent.includes(": one")).getAttribute("data-request-id")`)
		owner.do(t, chromedp.Click(chromedp.CSS(`#execs .exec[data-request-id="`+rid+`"] button.kill`)))
		o := waitOutcome(t, done, 10*time.Second)
		if o.err == nil || !strings.Contains(o.err.Error(), "command-killed") {
			t.Fatalf("killed exec: %+v", o)
		}
		waitFor(t, owner, "the exec to leave the page", `document.querySelectorAll("#execs .exec").length === 0`, 10*time.Second)
	})

	t.Run("audit shows egress rows, as text", func(t *testing.T) {
		defer owner.check(t)
		// A command's result with egress rows, as the server records one
		// for a proxied rule (written straight to the log: a proxied
		// command needs the bwrap sandbox, which the server tests cover).
		exit := 0
		_, err := tc.in.Audit.Append(context.Background(), audit.Record{Event: "exec.result", Principal: "tag:agent",
			Transport: "tailnet", Rule: "gh", Decision: "allow", ExitCode: &exit, Argv: []string{"/usr/bin/gh", "issue", "list"},
			Egress: []audit.EgressRow{
				{Host: "api.github.com", Port: 443, Decision: "allow", Conns: 2, BytesUp: 2048, BytesDown: 3 << 20},
				{Host: "evil\u202emoc.example<b>", Port: 443, Decision: "deny", Reason: "not in rule gh's allowlist", Conns: 1},
			}})
		if err != nil {
			t.Fatal(err)
		}
		owner.do(t, chromedp.Navigate(home+"audit?rule=gh"))
		waitFor(t, owner, "the egress rows", `document.querySelectorAll("#records .egress-row").length === 2`, 10*time.Second)
		rows := eval[[]string](t, owner, `[...document.querySelectorAll("#records .egress-row")].map(r => r.textContent)`)
		if !strings.Contains(rows[0], "api.github.com:443 allow 2 conn · ↑2.0 KiB ↓3.0 MiB") ||
			!strings.Contains(rows[1], `evil\u202emoc.example<b>:443 deny 1 conn`) || !strings.Contains(rows[1], "not in rule gh's allowlist") {
			t.Errorf("egress rows shown as %q", rows)
		}
		if n := eval[int](t, owner, `document.querySelectorAll("#records b").length`); n != 0 {
			t.Errorf("a host name became markup")
		}
		owner.screenshot(t, "audit-egress")
	})

	t.Run("lockout stops in-flight execs", func(t *testing.T) {
		defer owner.check(t)
		first := execAsync(tc.in, "/bin/sh", "-c", "echo go; sleep 60; : first")
		second := execAsync(tc.in, "/bin/sh", "-c", "trap '' TERM; echo go; sleep 60; : second")
		owner.do(t, chromedp.Navigate(home))
		waitFor(t, owner, "both execs running", `[...document.querySelectorAll("#execs .exec .exec-state")].filter(e => e.textContent === "running").length === 2`, 10*time.Second)
		pressed := time.Now()
		owner.do(t, chromedp.Click(chromedp.ID("lockout")))
		for _, ch := range []<-chan execOutcome{first, second} {
			o := waitOutcome(t, ch, 10*time.Second)
			if o.err == nil || !strings.Contains(o.err.Error(), "lockout-active") {
				t.Fatalf("exec after the lockout: %+v", o)
			}
		}
		t.Logf("both execs ended %s after the press (one ignores SIGTERM: SIGKILL after the 1 s grace)", time.Since(pressed).Round(time.Millisecond))
		waitFor(t, owner, "the lockout shown", `document.getElementById("lockout-state").textContent.startsWith("LOCKOUT") &&
			document.getElementById("lockout").hidden`, 10*time.Second)
		waitFor(t, owner, "the killed execs gone from the page", `document.querySelectorAll("#execs .exec").length === 0`, 5*time.Second)
		rec := tc.in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "lockout" })
		if rec.Principal != "tag:owner" || rec.Transport != "web" || rec.Killed != 2 {
			t.Errorf("lockout audited as %+v", rec)
		}
		owner.screenshot(t, "status-locked")
	})
}
