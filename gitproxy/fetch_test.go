package gitproxy

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A protocol v2 fetch's advertisement does not wait for the cache's
// refresh, but its ls-refs does: the fetch sees what upstream held when
// it began, and a refresh that fails refuses it (audited, and told to
// the agent), as when the advertisement waited; the failure does not
// outlast the next refresh.
func TestFetchV2RefreshBehind(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "work")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	e.git(work, "config", "protocol.version", "2")
	other := filepath.Join(t.TempDir(), "other")
	e.git("", "clone", "--quiet", e.up.Dir("owner/app"), other)
	for i, name := range []string{"a", "b"} {
		c := e.commit(other, name, "upstream moves "+name)
		e.git(other, "push", "--quiet", e.up.Dir("owner/app"), "HEAD:main")
		e.git(work, "fetch", "--quiet", "origin")
		if got := strings.TrimSpace(e.git(work, "rev-parse", "origin/main")); got != c {
			t.Fatalf("fetch %d: origin/main at %s, want upstream's %s", i, got, c)
		}
	}

	repo := e.up.Dir("owner/app")
	if err := os.Rename(repo, repo+".away"); err != nil {
		t.Fatal(err)
	}
	refused := len(e.rec.events("git.fetch"))
	// The refusal reaches the agent as git's error packet (git shows
	// nothing of an HTTP error's body on a POST).
	if out, err := e.try(work, "fetch", "--quiet", "origin"); err == nil || !strings.Contains(out, "remote error: internal: fetching from upstream") {
		t.Fatalf("fetch with upstream gone: err=%v\n%s", err, out)
	}
	f := e.rec.events("git.fetch")
	if len(f) != refused+1 || f[len(f)-1].Decision != "refuse" {
		t.Fatalf("fetch records after the failed refresh: %+v", f[refused:])
	}

	if err := os.Rename(repo+".away", repo); err != nil {
		t.Fatal(err)
	}
	c := e.commit(other, "c", "upstream moves c")
	e.git(other, "push", "--quiet", repo, "HEAD:main")
	e.git(work, "fetch", "--quiet", "origin")
	if got := strings.TrimSpace(e.git(work, "rev-parse", "origin/main")); got != c {
		t.Fatalf("fetch after upstream came back: origin/main at %s, want %s", got, c)
	}
}

// Advertisements a caller never follows leave at most one refresh behind
// them: each waits for the one before it, so refreshes do not pile up
// faster than upstream answers them.
func TestFetchV2RefreshesBehindBounded(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	e.git("", "clone", "--quiet", "--bare", e.url("owner/app"), filepath.Join(t.TempDir(), "c"))
	before := len(e.up.Requests())
	const n = 12
	for range n {
		req, err := http.NewRequest("GET", e.url("owner/app")+"/info/refs?service=git-upload-pack", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Git-Protocol", "version=2")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(resp); resp.StatusCode != 200 || !strings.Contains(body, "ls-refs") {
			t.Fatalf("advertisement: %d %q", resp.StatusCode, body)
		}
	}
	// Each refresh asks upstream at least once (its ls-refs); all but
	// the last had ended when the last advertisement was served.
	if got := len(e.up.Requests()) - before; got < n-1 {
		t.Fatalf("upstream saw %d requests when the advertisements were served, want at least %d", got, n-1)
	}
}
