package gitproxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"coily.dev/coily/access"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// anyRemote is a second remote, serving every other repository of the
// stand-in's owner/.
const anyRemote = `    - name: any
      url: https://localhost:{port}/owner/*
      roles: [agent]
      credential: file:token
      ca_file: {ca}
      allow_cidrs: [127.0.0.0/8]
`

func newEnv2(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	return newEnv(t, anyRemote, opts...)
}

// cacheOf is the cache directory of repo under the env's policy.
func (e *env) cacheOf(repo string) string {
	e.t.Helper()
	port, _ := strconv.Atoi(e.up.Port)
	rem := e.proxy.cfg.Gate.(*fakeGate).pol.GitRemote("localhost", port, repo)
	if rem == nil {
		e.t.Fatalf("no remote serves %s", repo)
	}
	return e.proxy.cacheDir(rem, repo)
}

// addRepo makes another bare repository upstream, seeded.
func (e *env) addRepo(repo string) {
	e.t.Helper()
	if out, err := exec.Command("git", "init", "--quiet", "--bare", "--initial-branch=main", e.up.Dir(repo)).CombinedOutput(); err != nil {
		e.t.Fatalf("git init: %v\n%s", err, out)
	}
	e.seed(repo)
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// Past the total budget, the least recently used cache is removed whole
// once no request uses it; the newest is kept; a clone and a fetch that
// follow are still correct, and what a restarted proxy finds on disk is
// counted.
func TestCacheEvictedPastTotalBudget(t *testing.T) {
	e := newEnv2(t, func(c *Config) { c.CacheBytes = 1 })
	e.seed("owner/app")
	e.seed("owner/other")
	app, other := e.cacheOf("owner/app"), e.cacheOf("owner/other")
	work := filepath.Join(t.TempDir(), "app")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	if !isDir(app) {
		t.Fatal("no cache after a clone")
	}
	e.git("", "clone", "--quiet", e.url("owner/other"), filepath.Join(t.TempDir(), "other"))
	if isDir(app) || !isDir(other) {
		t.Fatalf("after the second clone: app's cache kept %v, other's %v; want app's evicted", isDir(app), isDir(other))
	}
	// A fetch after the eviction sees upstream's new commit.
	up := filepath.Join(t.TempDir(), "up")
	e.git("", "clone", "--quiet", e.up.Dir("owner/app"), up)
	c := e.commit(up, "new", "new upstream")
	e.git(up, "push", "--quiet", "origin", "main")
	e.git(work, "fetch", "--quiet", "origin")
	if got := strings.TrimSpace(e.git(work, "rev-parse", "origin/main")); got != c {
		t.Fatalf("fetch after eviction: origin/main at %s, want %s", got, c)
	}
	if isDir(other) || !isDir(app) {
		t.Fatal("the fetch did not evict other's cache")
	}
	// A proxy started over the same directory counts what it finds.
	p2, err := New(e.proxy.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ent := p2.caches.m[app]; ent == nil || ent.remote != "app" || ent.size == 0 {
		t.Fatalf("restarted proxy's view of app's cache: %+v", ent)
	}
}

// Past a remote's budget, only that remote's caches are evicted.
func TestCacheEvictedPastRemoteBudget(t *testing.T) {
	e := newEnv2(t, func(c *Config) { c.RemoteCacheBytes = 1 })
	e.seed("owner/app")
	e.seed("owner/other")
	e.addRepo("owner/third")
	for _, r := range []string{"owner/app", "owner/other", "owner/third"} {
		e.git("", "clone", "--quiet", e.url(r), filepath.Join(t.TempDir(), "c"))
	}
	if !isDir(e.cacheOf("owner/app")) || isDir(e.cacheOf("owner/other")) || !isDir(e.cacheOf("owner/third")) {
		t.Fatalf("caches kept: app %v other %v third %v; want app and third", isDir(e.cacheOf("owner/app")),
			isDir(e.cacheOf("owner/other")), isDir(e.cacheOf("owner/third")))
	}
}

// A cache a request uses is not removed under it: a push that waits for
// an approval keeps its cache while other clones go past the budget, and
// completes.
func TestCacheInUseNotEvicted(t *testing.T) {
	e := newEnv2(t, func(c *Config) { c.CacheBytes = 1 })
	e.seed("owner/app")
	e.seed("owner/other")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	e.commit(work, "a", "one")
	e.git(work, "push", "--quiet", "origin", "agent/x")
	e.git(work, "commit", "--quiet", "--amend", "-m", "one, amended")
	amended := strings.TrimSpace(e.git(work, "rev-parse", "HEAD"))

	ch, cancel := e.queue.Watch()
	defer cancel()
	pushed := make(chan error, 1)
	go func() {
		out, err := e.try(work, "push", "--quiet", "--force", "origin", "agent/x")
		if err != nil {
			t.Logf("push: %s", out)
		}
		pushed <- err
	}()
	var pending *coilyv1.Approval
	for a := range ch {
		if a.GetState() == coilyv1.ApprovalState_APPROVAL_STATE_PENDING {
			pending = a
			break
		}
	}
	e.git("", "clone", "--quiet", e.url("owner/other"), filepath.Join(t.TempDir(), "other"))
	if !isDir(e.cacheOf("owner/app")) {
		t.Fatal("the cache of a push in flight was evicted")
	}
	if _, err := e.queue.Decide(pending.GetId(), "tag:owner", coilyv1.Verdict_VERDICT_APPROVE, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-pushed; err != nil {
		t.Fatalf("push: %v", err)
	}
	if got := e.up.Ref(t, "owner/app", "refs/heads/agent/x"); got != amended {
		t.Fatalf("upstream at %s, want %s", got, amended)
	}
	if isDir(e.cacheOf("owner/other")) {
		t.Fatal("other's cache, the least recently used, was kept past the budget")
	}
}

// The cache holds only what upstream published: the objects of a push
// the policy refuses, or upstream refuses, are nowhere in it, and no
// principal can fetch them by their id through the proxy.
func TestCacheHoldsOnlyPublished(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	secret := e.commit(work, "secret", "a secret the policy refuses")
	blob := strings.TrimSpace(e.git(work, "rev-parse", "HEAD:secret"))
	if out, err := e.try(work, "push", "origin", "HEAD:refs/heads/main"); err == nil || !strings.Contains(out, "policy-deny") {
		t.Fatalf("push to main: err=%v\n%s", err, out)
	}
	// Upstream refuses the next one (its pre-receive hook), after the
	// policy allowed it.
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	refused := e.commit(work, "refused", "upstream refuses this")
	hook := filepath.Join(e.up.Dir("owner/app"), "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho no >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := e.try(work, "push", "origin", "agent/x"); err == nil || !strings.Contains(out, "upstream refused") {
		t.Fatalf("push upstream refuses: err=%v\n%s", err, out)
	}
	cache := e.cacheOf("owner/app")
	for _, oid := range []string{secret, blob, refused} {
		if exec.Command("git", "--git-dir", cache, "cat-file", "-e", oid).Run() == nil {
			t.Errorf("object %s of a refused push is in the cache", oid)
		}
	}
	if des, _ := os.ReadDir(filepath.Join(e.proxy.cfg.Dir, "push")); len(des) != 0 {
		t.Errorf("push directories left: %v", des)
	}
	// Another principal, in a clone of its own, asks for them by id.
	e.proxy.cfg.Gate.(*fakeGate).as(access.Caller{Principal: "local:bob", Transport: "test", CapRoles: []string{"agent"}})
	fresh := filepath.Join(t.TempDir(), "fresh")
	e.git("", "clone", "--quiet", e.url("owner/app"), fresh)
	for _, proto := range []string{"2", "0"} {
		for _, oid := range []string{secret, refused} {
			out, err := e.try(fresh, "-c", "protocol.version="+proto, "fetch", "origin", oid)
			if err == nil || exec.Command("git", "-C", fresh, "cat-file", "-e", oid).Run() == nil {
				t.Errorf("v%s fetch of %s by id succeeded:\n%s", proto, oid, out)
			}
		}
	}
}

// A push just after a fetch talks to upstream once (its one POST, no
// refresh, no advertisement), and the cache learns the pushed commit from the push, so the
// next refresh has nothing to download.
func TestPushAfterFetchNoRefresh(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "checkout", "--quiet", "-b", "agent/x")
	c := e.commit(work, "a", "one")
	before := len(e.up.Requests())
	e.git(work, "push", "--quiet", "origin", "agent/x")
	reqs := e.up.Requests()[before:]
	if len(reqs) != 1 || !strings.HasPrefix(reqs[0], "POST /owner/app/git-receive-pack") {
		t.Fatalf("upstream saw %q, want the push's one POST", reqs)
	}
	if out, err := exec.Command("git", "--git-dir", e.cacheOf("owner/app"), "rev-parse", "refs/heads/agent/x").Output(); err != nil || strings.TrimSpace(string(out)) != c {
		t.Fatalf("cache's agent/x: %s %v, want %s", out, err, c)
	}
	before = len(e.up.Requests())
	e.git(work, "fetch", "--quiet", "origin")
	if reqs := e.up.Requests()[before:]; len(reqs) != 1 || !strings.HasPrefix(reqs[0], "POST /owner/app/git-upload-pack") {
		t.Fatalf("the refresh after the push: %q, want its ls-refs only (no git fetch)", reqs)
	}
}

// Repositories upstream does not serve leave no cache behind, on disk or
// in the proxy's accounting, however many a caller names.
func TestCacheNotKeptForMissingRepository(t *testing.T) {
	e := newEnv2(t)
	for i := range 3 {
		out, err := e.try("", "ls-remote", e.url("owner/missing"+strconv.Itoa(i)))
		if err == nil {
			t.Fatalf("ls-remote of a missing repository:\n%s", out)
		}
	}
	des, err := os.ReadDir(filepath.Join(e.proxy.cfg.Dir, "cache"))
	if err != nil || len(des) != 0 {
		t.Fatalf("cache directory holds %v (%v)", des, err)
	}
	e.proxy.caches.mu.Lock()
	defer e.proxy.caches.mu.Unlock()
	if len(e.proxy.caches.m) != 0 {
		t.Fatalf("%d caches counted", len(e.proxy.caches.m))
	}
}

// The cache learns of a push only the objects its refs reach: an object
// the agent sent beside them, which upstream never received, stays out.
func TestCacheLearnsOnlyReached(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	main := strings.TrimSpace(e.git(work, "rev-parse", "HEAD"))
	c := e.commit(work, "a", "one")
	extra := strings.TrimSpace(string(e.gitIn(work, "reached by no ref\n", "hash-object", "-w", "--stdin")))
	objects := string(e.gitIn(work, "", "rev-list", "--objects", c, "--not", main)) + extra + "\n"
	pack := e.gitIn(work, objects, "pack-objects", "--stdout")
	out := e.pushRaw(t, "owner/app", c, "refs/heads/agent/extra", pack)
	if !strings.Contains(out, "ok refs/heads/agent/extra") || e.up.Ref(t, "owner/app", "refs/heads/agent/extra") != c {
		t.Fatalf("push refused: %q", out)
	}
	cache := e.cacheOf("owner/app")
	if out, err := exec.Command("git", "--git-dir", cache, "rev-parse", "refs/heads/agent/extra").Output(); err != nil || strings.TrimSpace(string(out)) != c {
		t.Fatalf("cache's agent/extra: %s %v, want %s", out, err, c)
	}
	if err := exec.Command("git", "--git-dir", cache, "fsck", "--connectivity-only", "--no-dangling").Run(); err != nil {
		t.Fatalf("cache after learning the push: %v", err)
	}
	if exec.Command("git", "--git-dir", cache, "cat-file", "-e", extra).Run() == nil {
		t.Fatalf("object %s, which no pushed ref reaches, is in the cache", extra)
	}
}

// headResolves reads HEAD and the refs from the cache's files: only a
// branch the cache has, loose or packed, resolves.
func TestHeadResolves(t *testing.T) {
	for _, c := range []struct {
		name, head, loose, packed string
		dir, link                 bool
		want                      bool
	}{
		{name: "loose", head: "ref: refs/heads/main\n", loose: "refs/heads/main", want: true},
		{name: "packed", head: "ref: refs/heads/main\n", packed: "# pack-refs with: peeled\n" + oidA + " refs/heads/main\n", want: true},
		{name: "absent", head: "ref: refs/heads/main\n"},
		{name: "another packed", head: "ref: refs/heads/main\n", packed: oidA + " refs/heads/main2\n" + oidA + " refs/heads/xmain\n"},
		{name: "packed without newline", head: "ref: refs/heads/main\n", packed: oidA + " refs/heads/main"},
		{name: "a directory", head: "ref: refs/heads/main\n", loose: "refs/heads/main", dir: true},
		{name: "a symlink", head: "ref: refs/heads/main\n", loose: "refs/heads/main", link: true},
		{name: "detached", head: oidA + "\n"},
		{name: "a tag", head: "ref: refs/tags/v1\n", loose: "refs/tags/v1"},
		{name: "dot dot", head: "ref: refs/heads/../../config\n"},
		{name: "two lines", head: "ref: refs/heads/main\nref: refs/heads/x\n", loose: "refs/heads/main"},
		{name: "no HEAD"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.head != "" {
				os.WriteFile(filepath.Join(dir, "HEAD"), []byte(c.head), 0o600)
			}
			os.WriteFile(filepath.Join(dir, "config"), []byte("[core]\n"), 0o600)
			if c.loose != "" {
				p := filepath.Join(dir, c.loose)
				os.MkdirAll(filepath.Dir(p), 0o700)
				switch {
				case c.dir:
					os.Mkdir(p, 0o700)
				case c.link:
					os.Symlink(filepath.Join(dir, "config"), p)
				default:
					os.WriteFile(p, []byte(oidA+"\n"), 0o600)
				}
			}
			if c.packed != "" {
				os.WriteFile(filepath.Join(dir, "packed-refs"), []byte(c.packed), 0o600)
			}
			if got := headResolves(dir); got != c.want {
				t.Fatalf("headResolves = %v, want %v", got, c.want)
			}
		})
	}
}

func FuzzHeadResolves(f *testing.F) {
	f.Add("ref: refs/heads/main\n", oidA+" refs/heads/main\n")
	f.Add("ref: refs/heads/../../config\n", "")
	f.Add(oidA+"\n", oidA+" refs/heads/main")
	f.Fuzz(func(t *testing.T, head, packed string) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "HEAD"), []byte(head), 0o600)
		os.WriteFile(filepath.Join(dir, "packed-refs"), []byte(packed), 0o600)
		if headResolves(dir) {
			ref := strings.TrimSuffix(strings.TrimPrefix(head, "ref: "), "\n")
			if !validRef(ref) || !strings.HasPrefix(ref, "refs/heads/") || !strings.Contains(packed, " "+ref+"\n") {
				t.Fatalf("HEAD %q resolves against packed-refs %q", head, packed)
			}
		}
	})
}
