package console_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"coily.dev/coily/audit"
	"coily.dev/coily/console"
	"coily.dev/coily/internal/testserver"
)

// credsPolicy adds to WebPolicy a confirm rule whose command gets a token
// in its environment, git's credential helper for a host and an ssh key.
const credsPolicy = testserver.WebPolicy + `  - name: confirm-push
    binary: /bin/true
    args: ["**"]
    confirm: true
    confirm_timeout: 5m
    network: proxied
    sandbox: bwrap
    egress:
      allow: ["git.example.com:22", "git.example.com:443"]
      ssh_known_hosts:
        - git.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc/ZoQpu+kbUW14vnzWUqdg3h7xYZiIeekiNxXkELZs
    credentials: {GH_TOKEN: "file:gh"}
    git_credentials:
      - {host: git.example.com, password: "file:git"}
    ssh_keys:
      - {key: "file:deploy", hosts: [git.example.com]}
`

// badText is what a renderer that missed a field writes.
var badText = []string{"undefined", "null", "NaN", "[object Object]"}

// TestBrowserRendersEveryKind writes one record of every kind the audit
// package knows (audit.Kinds) and renders the audit page, then an
// approval of a rule with credentials: no card is of an unknown kind, no
// page shows "undefined", "null", "NaN" or "[object Object]", the
// credentials (configured and used) and approved_by are shown, and a
// hostile principal, rule or credential renders as text.
func TestBrowserRendersEveryKind(t *testing.T) {
	chromium := chromiumPath(t)
	tc := startTailnetConsolePolicy(t, credsPolicy, console.Config{Heartbeat: time.Second})
	owner := tc.newBrowser(t, chromium, "phone", "tag:owner")
	const home = "http://coily/"
	const hostile = `<img src=x onerror="document.title='pwned'">`
	zero := 0
	for _, kind := range audit.Kinds {
		rec := audit.Record{Event: kind, Principal: "tag:agent" + hostile, Rule: "push" + hostile, Transport: "tailnet",
			RequestID: "req-" + kind, Argv: []string{"/usr/bin/git", "push", hostile}, Decision: "allow",
			Details: map[string]string{"approval_id": "appr-1", "approved_by": "tag:owner" + hostile, "note" + hostile: "n" + hostile},
			Lists: map[string][]string{"credentials": {"GH_TOKEN=file:gh"}, "ssh_keys": {"file:deploy=git.example.com" + hostile},
				"git_credentials": {"git.example.com:443=file:git"}, "env": {"LANG"}},
			CredentialsUsed: []string{"env GH_TOKEN from file:gh", "ssh agent key file:deploy" + hostile + ": 2 signature(s)"},
			ExitCode:        &zero}
		if kind == "approval.request" {
			rec.Decision, rec.ExitCode = "", nil // as the server writes it: no decision yet
		}
		if _, err := tc.in.Audit.Append(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	defer owner.check(t)
	owner.do(t, chromedp.Navigate(home+"audit"))
	waitFor(t, owner, "a card of every kind", `new Set([...document.querySelectorAll("#records .record")].map(r => r.getAttribute("data-event"))).size >= `+
		strconv.Itoa(len(audit.Kinds)), 20*time.Second)
	owner.screenshot(t, "audit-every-kind")
	for _, kind := range audit.Kinds {
		card := `[...document.querySelectorAll("#records .record")].find(r => r.getAttribute("data-event") === "` + kind + `" && r.textContent.includes("req-` + kind + `"))`
		text := eval[string](t, owner, card+`?.textContent ?? ""`)
		if text == "" {
			t.Errorf("no card for %s", kind)
			continue
		}
		for _, bad := range badText {
			if strings.Contains(text, bad) {
				t.Errorf("the %s card shows %q: %s", kind, bad, text)
			}
		}
		if eval[bool](t, owner, card+`.querySelector(".unknown-kind") !== null`) {
			t.Errorf("the page has no title for records of kind %s (audit.js kinds)", kind)
		}
		for _, want := range []string{"approved by tag:owner" + hostile, "credentials (rule): credentials GH_TOKEN=file:gh", "ssh_keys file:deploy=git.example.com",
			"git_credentials git.example.com:443=file:git", "credentials used: env GH_TOKEN from file:gh; ssh agent key file:deploy" + hostile + ": 2 signature(s)",
			"tag:agent" + hostile, "rule push" + hostile, "note" + hostile + "=n" + hostile} {
			if !strings.Contains(text, want) {
				t.Errorf("the %s card lacks %q: %s", kind, want, text)
			}
		}
	}
	checkNoInjection(t, owner)

	// An approval of the rule with credentials: each is named.
	done := execAsync(tc.in, "/bin/true", "push", hostile)
	owner.do(t, chromedp.Navigate(home))
	waitFor(t, owner, "the approval", `document.querySelectorAll("#approvals .approval").length === 1`, 10*time.Second)
	id := eval[string](t, owner, `document.querySelector("#approvals .approval").getAttribute("data-approval-id")`)
	owner.do(t, chromedp.Navigate(home+"approvals/"+id))
	waitFor(t, owner, "the approval page", `!document.getElementById("approval").hidden`, 10*time.Second)
	owner.screenshot(t, "approval-credentials")
	creds := eval[string](t, owner, `document.getElementById("credentials").textContent`)
	for _, want := range []string{"env GH_TOKEN", "git credential helper for https://git.example.com:443", "ssh agent key for git.example.com"} {
		if !strings.Contains(creds, want) {
			t.Errorf("the approval's credentials %q lack %q", creds, want)
		}
	}
	page := eval[string](t, owner, `document.getElementById("approval").textContent`)
	for _, bad := range append(badText, "file:") { // names and hosts, never references
		if strings.Contains(page, bad) {
			t.Errorf("the approval page shows %q: %s", bad, page)
		}
	}
	checkNoInjection(t, owner)
	owner.do(t, chromedp.Click(chromedp.ID("deny")))
	if o := waitOutcome(t, done, 10*time.Second); o.err == nil || !strings.Contains(o.err.Error(), "confirm-rejected") {
		t.Fatalf("denied exec: %+v", o)
	}
}

// checkNoInjection fails when a page's hostile text became elements or
// ran.
func checkNoInjection(t *testing.T, b *browser) {
	t.Helper()
	if n := eval[int](t, b, `document.querySelectorAll("img, iframe, object, embed, script:not([src])").length`); n != 0 {
		t.Errorf("%d elements were injected into the page", n)
	}
	if title := eval[string](t, b, `document.title`); title == "pwned" {
		t.Error("a hostile field ran as script")
	}
}
