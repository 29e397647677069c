package gitproxy

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/internal/standin"
	"coily.dev/coily/refusal"
)

// A push of one ref goes upstream as one receive-pack POST of the agent's
// own pack, with no advertisement asked first; several go by git push;
// upstream's refusal reaches the agent with what upstream said.
func TestPushForwardedAsOnePOST(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	for i, name := range []string{"a", "b"} {
		c := e.commit(work, name, "change "+name)
		before := len(e.up.Requests())
		e.git(work, "push", "--quiet", "origin", "agent/x")
		if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != c {
			t.Fatalf("push %d: upstream at %q, want %s", i, got, c)
		}
		var push []string
		for _, l := range e.up.Requests()[before:] {
			if strings.Contains(l, "receive-pack") {
				push = append(push, l)
			}
		}
		if len(push) != 1 || !strings.HasPrefix(push[0], "POST /owner/app/git-receive-pack") {
			t.Fatalf("push %d: upstream's receive-pack requests %q, want one POST", i, push)
		}
		if r := e.lastPush(); r.Decision != "allow" || r.Details["upstream"] != "upstream accepted 1 ref update(s)" {
			t.Fatalf("push %d record: %+v", i, r)
		}
	}
	// Two refs at once go by git push (atomic), which asks for the
	// advertisement first.
	e.git(work, "branch", "agent/y")
	c := e.commit(work, "two", "two refs")
	before := len(e.up.Requests())
	e.git(work, "push", "--quiet", "origin", "agent/x", "agent/y")
	if x, y := e.up.Ref(t, "owner/app", "refs/heads/agent/x"), e.up.Ref(t, "owner/app", "refs/heads/agent/y"); x != c || y == "" {
		t.Fatalf("two refs: upstream at %s and %s, want %s and agent/y", x, y, c)
	}
	if reqs := e.up.Requests()[before:]; len(reqs) != 2 || !strings.Contains(reqs[0], "service=git-receive-pack") {
		t.Fatalf("two refs: upstream saw %q, want git push's advertisement and POST", reqs)
	}
	hook := filepath.Join(e.up.Dir("owner/app"), "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'agent/x is frozen upstream' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.commit(work, "c", "change c")
	out, err := e.try(work, "push", "origin", "agent/x")
	if err == nil || !strings.Contains(out, "upstream refused: refs/heads/agent/x (pre-receive hook declined): agent/x is frozen upstream") {
		t.Fatalf("push upstream refuses: err=%v\n%s", err, out)
	}
}

// forward reaches only the upstream's pinned address, sends the agent's
// pack after the proxy's own command, follows no redirect, and takes
// nothing but a report that names the update as done for a success.
func TestForwardHostileUpstream(t *testing.T) {
	const old, new = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	report := func(lines ...string) string { return status(lines...) }
	cases := []struct {
		name   string
		status int
		ctype  string
		body   string
		want   string // in the refusal; "" for a success
	}{
		{"accepted", 200, "", report("unpack ok", "ok refs/heads/x"), ""},
		{"refused", 200, "", band(2, "no\n") + report("unpack ok", "ng refs/heads/x hook declined"), "upstream refused: refs/heads/x (hook declined): no"},
		{"lease", 200, "", band(2, "error: cannot lock ref 'refs/heads/x': is at 3 but expected 1\n") + report("unpack ok", "ng refs/heads/x failed to update ref"),
			"not upstream's current value; fetch and try again (refs/heads/x: failed to update ref: error: cannot lock ref"},
		{"unpack failed", 200, "", report("unpack index-pack abnormal exit"), "upstream refused: unpack index-pack abnormal exit"},
		{"another ref reported", 200, "", report("unpack ok", "ok refs/heads/y"), "does not name refs/heads/x alone"},
		{"ours and another", 200, "", report("unpack ok", "ok refs/heads/x", "ok refs/heads/y"), "does not name refs/heads/x alone"},
		{"truncated", 200, "", band(1, pkt("unpack ok\n")), "upstream's answer"},
		{"redirect", 302, "", "", "HTTP 302"},
		{"unauthorized", 401, "", "", "HTTP 401"},
		{"wrong content type", 200, "text/html", report("unpack ok", "ok refs/heads/x"), "HTTP 200 (text/html)"},
	}
	var elsewhere atomic.Int32
	other := tlsUpstream(t, func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []byte
			var auth, path string
			srv := tlsUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got, auth, path = b, r.Header.Get("Authorization"), r.URL.Path
				mu.Unlock()
				if c.status == 302 {
					http.Redirect(w, r, other.URL+r.URL.Path, c.status)
					return
				}
				ct := c.ctype
				if ct == "" {
					ct = "application/x-git-receive-pack-result"
				}
				w.Header().Set("Content-Type", ct)
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			})
			tlsCfg, err := tlsConfig("upstream.example", srv.CAFile)
			if err != nil {
				t.Fatal(err)
			}
			// The URL's host does not resolve: only the pinned address is
			// dialled.
			up := &upstream{url: "https://upstream.example/owner/app", addr: srv.Host, tls: tlsCfg, auth: "Basic dG9rZW4="}
			packFile := filepath.Join(t.TempDir(), "pack")
			if err := os.WriteFile(packFile, []byte("PACK the agent's bytes"), 0o600); err != nil {
				t.Fatal(err)
			}
			ps := &push{pack: packFile, updates: []*update{{old: old, new: new, ref: "refs/heads/x"}}}
			p := &Proxy{cfg: Config{UpstreamTimeout: time.Minute}}
			err = p.forward(context.Background(), ps, up, int64(len("PACK the agent's bytes")))
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("forward: %v, want %q", err, c.want)
			}
			if err != nil && refusal.As(err).Code != refusal.PolicyDeny {
				t.Fatalf("refusal code %s", refusal.As(err).Code)
			}
			mu.Lock()
			defer mu.Unlock()
			line := old + " " + new + " refs/heads/x\x00report-status side-band-64k quiet agent=git/coily\n"
			if want := pkt(line) + "0000PACK the agent's bytes"; string(got) != want || auth != "Basic dG9rZW4=" || path != "/owner/app/git-receive-pack" {
				t.Fatalf("upstream got %q at %s (auth %q), want %q", got, path, auth, want)
			}
		})
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("a redirect was followed %d times", n)
	}
}

// tlsUpstream serves h over TLS for upstream.example (and localhost) on
// loopback.
func tlsUpstream(t *testing.T, h http.HandlerFunc) *standin.Server {
	return standin.TLS(t).Serve(t, h, "upstream.example")
}

// A pack of one update that holds an object the update does not need (a
// blob no ref reaches), or bytes after its end, is not forwarded as it is:
// upstream gets what git push sends, the update's objects alone; an
// honest pack is forwarded byte for byte, and nothing after it.
func TestForwardSendsOnlyWhatTheUpdateNeeds(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	for _, c := range []struct {
		name  string
		extra bool
		junk  int
	}{{"honest", false, 0}, {"bytes after the pack", false, 200 << 10}, {"an object no ref reaches", true, 0}, {"bytes after a pack", false, 1 << 10}} {
		t.Run(c.name, func(t *testing.T) {
			old := e.up.Ref(t, "owner/app", "refs/heads/agent/x")
			commit := e.commit(work, c.name, c.name)
			objs := strings.Fields(e.git(work, "rev-list", "--objects", "--no-object-names", commit, "--not", "origin/main"))
			if old != "" {
				objs = strings.Fields(e.git(work, "rev-list", "--objects", "--no-object-names", commit, "--not", old))
			}
			blob := ""
			if c.extra {
				blob = strings.TrimSpace(string(e.gitIn(work, "EXFIL: no ref reaches this\n", "hash-object", "-w", "--stdin")))
				objs = append(objs, blob)
			}
			pack := e.gitIn(work, strings.Join(objs, "\n")+"\n", "pack-objects", "--stdout", "-q")
			if old == "" {
				old = strings.Repeat("0", 40)
			}
			line := old + " " + commit + " refs/heads/agent/x\x00report-status side-band-64k\n"
			body := pkt(line) + "0000" + string(pack) + strings.Repeat("J", c.junk)
			before := e.up.Received("git-receive-pack")
			resp, err := http.Post(e.url("owner/app")+"/git-receive-pack", "application/x-git-receive-pack-request", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			sent := e.up.Received("git-receive-pack") - before
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); c.junk > 0 && got != commit {
				// Git may refuse a body that goes on after its pack (its
				// index-pack does, as under git http-backend): then
				// nothing goes upstream.
				if sent != 0 || !strings.Contains(string(answer), "unpacker error") {
					t.Fatalf("upstream at %q after a push with %d bytes after its pack, %d bytes sent; the proxy answered %q", got, c.junk, sent, answer)
				}
				return
			}
			if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != commit {
				t.Fatalf("upstream at %q, want %s; the proxy answered %s: %q", got, commit, resp.Status, answer)
			}
			if want := int64(len(pkt(forwardedLine(old, commit))) + 4 + len(pack)); !c.extra && sent != want {
				t.Errorf("upstream read %d bytes of receive-pack body for a pack of %d (and %d after it)", sent, len(pack), c.junk)
			}
			if c.extra {
				cmd := exec.Command("git", "cat-file", "-t", blob)
				cmd.Dir = e.up.Dir("owner/app")
				if out, err := cmd.CombinedOutput(); err == nil {
					t.Fatalf("upstream holds the object no ref reaches (%s)", out)
				}
			}
		})
	}
}

// forwardedLine is the command line the proxy sends upstream for an update.
func forwardedLine(old, new string) string {
	return old + " " + new + " refs/heads/agent/x\x00report-status side-band-64k quiet agent=git/coily\n"
}
