package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/policy"
)

// copyFile copies src to dst with mode 0755.
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func digestOf(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// onePolicy is a policy letting everyone run the given rules.
func onePolicy(t testing.TB, rules string) *policy.Policy {
	t.Helper()
	return parse(t, "bin.yaml", `version: 1
roles:
  all:
    permissions: [exec]
    commands: ["*"]
grants:
  - principals: ["*"]
    roles: [all]
commands:
`+rules)
}

func rule(t testing.TB, p *policy.Policy, name string) *policy.Rule {
	t.Helper()
	for _, r := range p.Rules() {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no rule %q", name)
	return nil
}

func decide(p *policy.Policy, argv ...string) policy.Decision {
	return p.DecideExec(anyone, policy.Request{Argv: argv})
}

func TestBinaryViaSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "mytrue")
	link2 := filepath.Join(dir, "mytrue2")
	if err := os.Symlink("/bin/true", link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mytrue", link2); err != nil { // relative, and a chain
		t.Fatal(err)
	}
	bindir := filepath.Join(dir, "bin")
	if err := os.Symlink("/bin", bindir); err != nil { // a linked directory
		t.Fatal(err)
	}
	real := resolve(t, "/bin/true")

	p := onePolicy(t, `
  - name: by-link
    binary: `+link+`
`)
	r := rule(t, p, "by-link")
	if r.Binary != link || r.Resolved != real || r.Absent != nil {
		t.Fatalf("rule = %+v, want Resolved %s", *r, real)
	}
	for _, argv0 := range []string{link, link2, real, "/bin/true", "/usr/bin/true", filepath.Join(bindir, "true"), dir + "/./mytrue"} {
		if _, err := os.Stat(argv0); err != nil {
			continue // not on this host
		}
		d := decide(p, argv0)
		if d.Result != policy.Allow || d.Rule != r {
			t.Errorf("DecideExec(%s) = %v (%s), want allowed by by-link", argv0, d.Result, d.Reason)
		}
	}
	if d := decide(p, "/bin/false"); d.Result != policy.Deny {
		t.Errorf("DecideExec(/bin/false) = %v (%s)", d.Result, d.Reason)
	}
	if err := r.CheckBinary(); err != nil {
		t.Errorf("CheckBinary() = %v", err)
	}

	// A rule on the real path allows the link, too.
	p2 := onePolicy(t, `
  - name: by-path
    binary: /bin/true
`)
	if d := decide(p2, link2); d.Result != policy.Allow {
		t.Errorf("DecideExec(%s) under a /bin/true rule = %v (%s)", link2, d.Result, d.Reason)
	}

	// Retargeting the link after load: requests by the link now name
	// another file, and the rule's binary no longer checks out.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/false", link); err != nil {
		t.Fatal(err)
	}
	if d := decide(p, link); d.Result != policy.Deny {
		t.Errorf("DecideExec(retargeted link) = %v (%s), want deny", d.Result, d.Reason)
	}
	if d := decide(p, "/bin/true"); d.Result != policy.Allow {
		t.Errorf("DecideExec(/bin/true) after retargeting = %v (%s); the rule keeps what it resolved at load", d.Result, d.Reason)
	}
	if err := r.CheckBinary(); err == nil || !strings.Contains(err.Error(), "no longer resolves") {
		t.Errorf("CheckBinary() after retargeting = %v", err)
	}
}

func TestAbsentBinary(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "gh")
	p := onePolicy(t, `
  - name: gh-token
    effect: deny
    binary: `+missing+`
    args: [auth, token]
    reason: never the token
  - name: gh
    binary: `+missing+`
    args: ["**"]
    flags: any
  - name: a-dir
    binary: `+dir+`
`)
	r := rule(t, p, "gh")
	if r.Absent == nil || r.Resolved != "" {
		t.Fatalf("rule = %+v, want Absent", *r)
	}
	if !strings.Contains(r.Absent.Error(), "is not on this host") || errors.Is(r.Absent, policy.ErrDigest) {
		t.Errorf("Absent = %v", r.Absent)
	}
	if err := r.CheckBinary(); err != r.Absent {
		t.Errorf("CheckBinary() = %v, want %v", err, r.Absent)
	}
	d := decide(p, missing, "issue", "list")
	if d.Result != policy.Deny || d.Rule != nil || !strings.Contains(d.Reason, "binary "+missing+" is not on this host") {
		t.Errorf("DecideExec(absent) = %v, %q, rule %v", d.Result, d.Reason, d.Rule)
	}
	// A deny rule still speaks for the path as written.
	d = decide(p, missing, "auth", "token")
	if d.Result != policy.Deny || d.Rule == nil || d.Rule.Name != "gh-token" {
		t.Errorf("DecideExec(absent, denied) = %v, %q", d.Result, d.Reason)
	}

	// A directory is not a binary.
	if r := rule(t, p, "a-dir"); r.Absent == nil || !strings.Contains(r.Absent.Error(), "not a regular file") {
		t.Errorf("a-dir: Absent = %v", r.Absent)
	}
	if d := decide(p, dir); d.Result != policy.Deny {
		t.Errorf("DecideExec(dir) = %v (%s)", d.Result, d.Reason)
	}

	// Installing the binary after load does not make the rule match: the
	// policy must be reloaded.
	copyFile(t, "/bin/true", missing)
	if d := decide(p, missing); d.Result != policy.Deny || d.Rule != nil {
		t.Errorf("DecideExec(installed after load) = %v (%s)", d.Result, d.Reason)
	}
	p = onePolicy(t, `
  - name: gh
    binary: `+missing+`
`)
	if d := decide(p, missing); d.Result != policy.Allow {
		t.Errorf("DecideExec(after reload) = %v (%s)", d.Result, d.Reason)
	}
}

func TestSHA256Pin(t *testing.T) {
	policy.JudgeAsUID(t, policy.NobodysUID) // the copy is the test's own, not root's
	dir := t.TempDir()
	bin := filepath.Join(dir, "true")
	copyFile(t, "/bin/true", bin)
	good, bad := digestOf(t, bin), digestOf(t, "/bin/echo")
	if good == bad {
		t.Fatal("/bin/true and /bin/echo have the same content")
	}
	p := onePolicy(t, `
  - name: pinned
    binary: `+bin+`
    sha256: `+good+`
  - name: wrong-pin
    binary: `+bin+`
    args: [x]
    sha256: `+bad+`
`)
	pinned, wrong := rule(t, p, "pinned"), rule(t, p, "wrong-pin")
	if pinned.Absent != nil || pinned.Resolved != bin || pinned.SHA256 != good {
		t.Errorf("pinned = %+v", *pinned)
	}
	if d := decide(p, bin); d.Result != policy.Allow || d.Rule != pinned {
		t.Errorf("DecideExec(pinned) = %v (%s)", d.Result, d.Reason)
	}
	if err := pinned.CheckBinary(); err != nil {
		t.Errorf("CheckBinary(pinned) = %v", err)
	}

	// A wrong pin is not a load error: the rule is absent, and says why.
	if !errors.Is(wrong.Absent, policy.ErrDigest) || wrong.Resolved != "" {
		t.Fatalf("wrong-pin: Absent = %v, Resolved %q; want ErrDigest", wrong.Absent, wrong.Resolved)
	}
	for _, s := range []string{good, bad, bin} {
		if !strings.Contains(wrong.Absent.Error(), s) {
			t.Errorf("wrong-pin: Absent = %v, does not name %s", wrong.Absent, s)
		}
	}
	d := decide(p, bin, "x")
	if d.Result != policy.Deny || d.Rule != nil {
		t.Errorf("DecideExec(wrong pin) = %v (%s)", d.Result, d.Reason)
	}
	if strings.Contains(d.Reason, `"wrong-pin"`) {
		t.Errorf("reason %q considers the absent rule", d.Reason)
	}
	if err := wrong.CheckBinary(); !errors.Is(err, policy.ErrDigest) {
		t.Errorf("CheckBinary(wrong pin) = %v", err)
	}
}

func TestCheckBinaryReplaced(t *testing.T) {
	policy.JudgeAsUID(t, policy.NobodysUID) // the copy is the test's own, not root's
	for _, how := range []string{"overwrite", "rename"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "true")
			copyFile(t, "/bin/true", bin)
			p := onePolicy(t, `
  - name: pinned
    binary: `+bin+`
    sha256: `+digestOf(t, bin)+`
  - name: unpinned
    binary: `+bin+`
    args: [x]
`)
			pinned, unpinned := rule(t, p, "pinned"), rule(t, p, "unpinned")
			for range 3 {
				if err := pinned.CheckBinary(); err != nil {
					t.Fatalf("CheckBinary() = %v", err)
				}
			}
			switch how {
			case "overwrite":
				copyFile(t, "/bin/echo", bin)
			case "rename":
				tmp := filepath.Join(dir, "new")
				copyFile(t, "/bin/echo", tmp)
				if err := os.Rename(tmp, bin); err != nil {
					t.Fatal(err)
				}
			}
			err := pinned.CheckBinary()
			if !errors.Is(err, policy.ErrDigest) || !strings.Contains(err.Error(), bin) {
				t.Errorf("CheckBinary() after replacing = %v, want ErrDigest", err)
			}
			// Still refused on the next check: a failure is not cached as
			// success.
			if err := pinned.CheckBinary(); !errors.Is(err, policy.ErrDigest) {
				t.Errorf("CheckBinary() again = %v, want ErrDigest", err)
			}
			// An unpinned rule checks only where the path leads.
			if err := unpinned.CheckBinary(); err != nil {
				t.Errorf("CheckBinary(unpinned) = %v", err)
			}
			// The original content checks out again.
			copyFile(t, "/bin/true", bin)
			if err := pinned.CheckBinary(); err != nil {
				t.Errorf("CheckBinary() after restoring = %v", err)
			}
		})
	}
}

// TestGHExample runs the shipped example's rules, with gh replaced by a
// stand-in so that they resolve on any host.
func TestGHExample(t *testing.T) {
	src, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gh := filepath.Join(t.TempDir(), "gh")
	copyFile(t, "/bin/echo", gh)
	git := filepath.Join(t.TempDir(), "git")
	copyFile(t, "/bin/echo", git)
	text := strings.ReplaceAll(strings.ReplaceAll(string(src), "/usr/bin/gh", gh), "/usr/bin/git", git)
	p := parse(t, "policy.yaml", text)
	checkRules(t, p)
	agent := policy.Subject{Principal: "tag:agent"}
	ci := policy.Subject{Principal: "tag:ci-nightly"}
	owner := policy.Subject{Principal: "alice@example.com"}
	for _, tc := range []struct {
		s      policy.Subject
		argv   []string
		env    []string
		rule   string // the deciding rule ("" none)
		result policy.Result
		reason string
		would  []string
	}{
		{agent, []string{gh, "issue", "create", "--repo", "alice/x", "--title", "T", "-b", "B", "-l", "bug"}, []string{"GH_PROMPT_DISABLED", "NO_COLOR"},
			"gh-issue-create", policy.Allow, `allowed by rule "gh-issue-create"`, nil},
		{ci, []string{gh, "issue", "create", "-R", "alice/x", "--label=docs"}, nil, "gh-issue-create", policy.Allow, "", nil},
		{agent, []string{gh, "issue", "create", "-R", "bob/x"}, nil, "", policy.Deny, `flag -R value "bob/x" does not match "alice/*"`, nil},
		{agent, []string{gh, "issue", "create", "--repo", "alice/x"}, []string{"GH_TOKEN"}, "", policy.Deny,
			`rule "gh-issue-create": environment variable GH_TOKEN is not allowed`, nil},
		{agent, []string{gh, "issue", "view", "7", "--comments", "-R", "alice/x"}, nil, "gh-issue-view", policy.Allow, "", nil},
		{agent, []string{gh, "auth", "token"}, nil, "gh-auth-token", policy.Deny, `coily never hands out the GitHub token (rule "gh-auth-token")`, nil},
		{owner, []string{gh, "auth", "token", "--hostname", "github.com"}, nil, "gh-auth-token", policy.Deny, "coily never hands out the GitHub token", nil},
		{owner, []string{gh, "auth", "status", "-t"}, nil, "gh-auth-show-token", policy.Deny, "coily never hands out the GitHub token", nil},
		{owner, []string{gh, "auth", "status", "--show-token"}, nil, "gh-auth-show-token", policy.Deny, "", nil},
		{owner, []string{gh, "auth", "status"}, nil, "", policy.Deny, "no rule allows it", nil},
		{agent, []string{gh, "api", "repos/alice/x"}, nil, "", policy.Deny, "no rule allows it", []string{"gh-api"}},
		{stranger, []string{gh, "issue", "view", "1"}, nil, "", policy.Deny, "mallory@example.com may not use it", nil},
		{agent, []string{"/usr/local/bin/aws", "s3", "ls"}, nil, "", policy.Deny, "", nil},
		// The tools' own indirections (tools.go): no rule can be walked around.
		{agent, []string{gh, "auth", "git-credential", "get"}, nil, "", policy.Deny, "hands out the token", nil},
		{owner, []string{gh, "auth", "--hostname=github.com", "token"}, nil, "gh-auth-token", policy.Deny, "coily never hands out", nil},
		{agent, []string{gh, "extension", "exec", "evil"}, nil, "", policy.Deny, "extensions run code", nil},
		{agent, []string{git, "push", "origin", "+main"}, nil, "git-push-force", policy.Allow, "", nil},
		{agent, []string{git, "push", "origin", "+main:main", "-u"}, nil, "", policy.Deny, `rule "git-push": flag --force is not allowed`, nil},
		{agent, []string{git, "push", "origin", ":main"}, nil, "", policy.Deny, "--delete", nil},
		{agent, []string{git, "push", "--mirror", "origin"}, nil, "", policy.Deny, "--mirror", nil},
		{agent, []string{git, "push", "--prune", "origin", "main"}, nil, "", policy.Deny, "--prune", nil},
		{agent, []string{git, "-c", "core.sshCommand=evil", "push", "origin", "main"}, nil, "", policy.Deny, "git option -c is refused", nil},
		{agent, []string{git, "-C", "/tmp/evil", "push"}, nil, "", policy.Deny, "git option -C is refused", nil},
		{agent, []string{git, "push", "ext::sh -c evil", "main"}, nil, "", policy.Deny, "remote helpers", nil},
		{agent, []string{git, "push", "/tmp/evil.git", "main"}, nil, "", policy.Deny, "local repository", nil},
		{agent, []string{git, "push", "--receive-pack=/tmp/evil", "origin", "main"}, nil, "", policy.Deny, "--receive-pack", nil},
		{agent, []string{git, "psuh", "origin", "main"}, nil, "", policy.Deny, "not a git command", nil},
	} {
		d := p.DecideExec(tc.s, policy.Request{Argv: tc.argv, Env: tc.env})
		name := strings.Join(tc.argv[1:], " ")
		if d.Result != tc.result || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: %s: %v (%s), want %v (%s)", tc.s.Principal, name, d.Result, d.Reason, tc.result, tc.reason)
		}
		if got := ruleName(d.Rule); got != tc.rule {
			t.Errorf("%s: %s: rule %q, want %q", tc.s.Principal, name, got, tc.rule)
		}
		if strings.Join(d.WouldDeny, ",") != strings.Join(tc.would, ",") {
			t.Errorf("%s: %s: WouldDeny %q, want %q", tc.s.Principal, name, d.WouldDeny, tc.would)
		}
	}

	// Settings of the example's rules.
	if c := p.Concurrency(); c != 2 {
		t.Errorf("Concurrency() = %d", c)
	}
	if dir, ok := p.Workspace("coily"); !ok || dir != "/srv/work/coily" {
		t.Errorf("Workspace(coily) = %q, %v", dir, ok)
	}
	if r := rule(t, p, "gh-issue-create"); r.Rate == nil || *r.Rate != (policy.RateLimit{PerMinute: 10, Burst: 10}) {
		t.Errorf("gh-issue-create rate = %v", r.Rate)
	}
	if r := rule(t, p, "gh-issue-view"); r.Rate == nil || *r.Rate != (policy.RateLimit{PerMinute: 60, Burst: 60}) {
		t.Errorf("gh-issue-view rate = %v, want burst defaulting to per_minute", r.Rate)
	}
	if r := rule(t, p, "gh-api"); !r.Report || r.Effect != policy.Deny {
		t.Errorf("gh-api = %+v", *r)
	}
	if r := rule(t, p, "git-push-force"); !r.Confirm || r.ConfirmTimeout.String() != "10m0s" || r.Workspace != "coily" || r.Concurrency != 1 {
		t.Errorf("git-push-force = %+v", *r)
	}
	if r := rule(t, p, "aws-iam-delete"); !r.Confirm || r.ConfirmTimeout != policy.DefaultConfirmTimeout {
		t.Errorf("aws-iam-delete = %+v", *r)
	}

	// git (a stand-in named git).
	for _, tc := range []struct {
		argv []string
		rule string
	}{
		{[]string{git, "push", "origin", "main", "-u"}, "git-push"},
		{[]string{git, "push", "--force", "origin", "main"}, "git-push-force"},
		{[]string{git, "push", "-f"}, "git-push-force"},
		{[]string{git, "push", "--force-with-lease=main", "origin"}, "git-push-force"},
		{[]string{git, "push", "-uf"}, ""},
		{[]string{git, "push", "--mirror"}, ""},
		{[]string{git, "-C", "/", "push"}, ""},
	} {
		d := p.DecideExec(agent, policy.Request{Argv: tc.argv})
		if got := ruleName(d.Rule); got != tc.rule || (tc.rule != "") != (d.Result == policy.Allow) {
			t.Errorf("%q: %v by %q (%s), want rule %q", tc.argv, d.Result, got, d.Reason, tc.rule)
		}
	}
}

func ruleName(r *policy.Rule) string {
	if r == nil {
		return ""
	}
	return r.Name
}

func TestDefaults(t *testing.T) {
	p := load(t, "minimal.yaml")
	if c := p.Concurrency(); c != 1 {
		t.Errorf("Concurrency() = %d, want 1", c)
	}
	p = onePolicy(t, `
  - name: t
    binary: /bin/true
    rate: {per_minute: 7}
    confirm: true
  - name: d
    effect: deny
    binary: /bin/true
`)
	r := rule(t, p, "t")
	if *r.Rate != (policy.RateLimit{PerMinute: 7, Burst: 7}) || r.ConfirmTimeout != policy.DefaultConfirmTimeout ||
		r.Workspace != policy.WorkspaceTemp || r.Concurrency != 0 || r.Effect != policy.Allow {
		t.Errorf("rule t = %+v", *r)
	}
	if r := rule(t, p, "d"); r.Effect != policy.Deny || r.Reason != "" || r.Report {
		t.Errorf("rule d = %+v", *r)
	}
	// A deny rule without a reason still gives one; deny rules run nothing
	// and so name no sandbox.
	if d := decide(p, "/bin/true"); d.Result != policy.Deny || d.Reason != `denied by rule d (rule "d")` {
		t.Errorf("DecideExec = %v (%s)", d.Result, d.Reason)
	}
	if sb := p.Sandboxes(); len(sb) != 1 || sb[0] != platformSandbox() {
		t.Errorf("Sandboxes() = %q", sb)
	}
}

// A pinned binary is hashed from the file opened for the run, and one its
// group or others may write is refused: it could change in place after
// the check.
func TestOpenBinaryPinned(t *testing.T) {
	policy.JudgeAsUID(t, policy.NobodysUID) // the copy is the test's own, not root's
	dir := t.TempDir()
	bin := filepath.Join(dir, "true")
	copyFile(t, "/bin/true", bin)
	p := onePolicy(t, `
  - name: pinned
    binary: `+bin+`
    sha256: `+digestOf(t, bin)+`
`)
	r := rule(t, p, "pinned")
	f, err := r.OpenBinary()
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	want, _ := os.Stat(bin)
	if !os.SameFile(fi, want) {
		t.Fatal("OpenBinary returned another file")
	}
	f.Close()
	if err := os.Chmod(bin, 0o775); err != nil {
		t.Fatal(err)
	}
	if _, err := r.OpenBinary(); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Fatalf("group-writable pinned binary: %v", err)
	}
}

// A pinned binary the server's user owns is refused, read-only or not (its
// owner may make it writable and rewrite it between the check and the
// run); a root-owned, read-only one is run. A root server trusts root's
// files.
func TestOpenBinaryPinnedOwnedByServer(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "true")
	copyFile(t, "/bin/true", bin)
	p := onePolicy(t, `
  - name: pinned
    binary: `+bin+`
    sha256: `+digestOf(t, bin)+`
`)
	r := rule(t, p, "pinned")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	owner := int(fi.Sys().(*syscall.Stat_t).Uid)
	if owner != 0 {
		// The server's own user, as the test runs: the real euid.
		wantOwnedRefused(t, r, bin, owner)
	}
	policy.JudgeAsUID(t, 4242)
	if err := os.Chown(bin, 4242, -1); err != nil {
		t.Skipf("a file owned by another user needs root: %v", err)
	}
	wantOwnedRefused(t, r, bin, 4242)
	if err := os.Chmod(bin, 0o555); err != nil {
		t.Fatal(err)
	}
	wantOwnedRefused(t, r, bin, 4242)
	// Root-owned and read-only: run, for a server of any user.
	if err := os.Chown(bin, 0, -1); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []int{4242, 0} {
		policy.JudgeAsUID(t, uid)
		f, err := r.OpenBinary()
		if err != nil {
			t.Fatalf("root-owned, read-only pinned binary, server uid %d: %v", uid, err)
		}
		f.Close()
	}
}

func wantOwnedRefused(t *testing.T, r *policy.Rule, bin string, uid int) {
	t.Helper()
	f, err := r.OpenBinary()
	if err == nil {
		f.Close()
		t.Fatalf("a pinned binary owned by the server's user (uid %d) was opened for a run", uid)
	}
	if want := "pinned binary " + bin + " is writable by the server's user"; !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "make it root-owned") {
		t.Fatalf("refusal %q does not say %q and the fix", err, want)
	}
}

// A FIFO put in place of a rule's binary (in a workspace, by a command)
// is refused at once, never waited on for a writer.
func TestOpenBinaryFIFO(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	copyFile(t, "/bin/true", bin)
	p := onePolicy(t, `
  - name: tool
    binary: `+bin+`
`)
	r := rule(t, p, "tool")
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(bin, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := r.OpenBinary()
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("OpenBinary() on a FIFO = %v, want not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OpenBinary() blocked on a FIFO")
	}
}
