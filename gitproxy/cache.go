package gitproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// cacheDir is the bare cache of one remote's repository: one per remote
// and upstream URL, so that what one remote's credential fetched is never
// served under another's.
func (p *Proxy) cacheDir(rem *policy.GitRemote, repo string) string {
	sum := sha256.Sum256([]byte(rem.Name + "\n" + rem.URL(strings.TrimSuffix(repo, ".git"))))
	return filepath.Join(p.cfg.Dir, "cache", hex.EncodeToString(sum[:16])+".git")
}

// cacheConfig is the configuration of every git run in a cache: nothing
// runs behind the proxy's back (no gc, no hooks).
var cacheConfig = [][2]string{{"gc.auto", "0"}, {"core.hooksPath", "/dev/null"}, {"maintenance.auto", "false"},
	{"fetch.writeCommitGraph", "false"}, {"core.logAllRefUpdates", "false"}}

// refresh brings the cache e up to upstream: heads and tags, pruned, and
// HEAD as upstream names it. Refreshes of one cache are serialized; each
// exchange is bounded in time.
func (p *Proxy) refresh(ctx context.Context, up *upstream, e *cacheEntry) error {
	e.refreshing.Lock()
	defer e.refreshing.Unlock()
	made := !exists(filepath.Join(e.dir, "HEAD"))
	if err := p.fetchInto(ctx, up, e); err != nil {
		if made {
			// Nothing of a repository upstream does not serve is
			// kept: a caller cannot leave empty caches behind.
			os.RemoveAll(e.dir)
		}
		return err
	}
	p.caches.refreshed(e, dirSize(e.dir))
	return nil
}

// fetchInto makes the cache e when it does not exist, and fetches
// upstream's heads, tags and HEAD into it.
func (p *Proxy) fetchInto(ctx context.Context, up *upstream, e *cacheEntry) error {
	dir := e.dir
	env := append(up.env[:len(up.env):len(up.env)], "GIT_DIR="+dir)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); errors.Is(err, os.ErrNotExist) {
		if err := p.initBare(ctx, dir, e.remote); err != nil {
			return refusal.Wrap(refusal.Internal, err, "the proxy could not make its cache")
		}
	}
	if p.current(ctx, up, dir) {
		return nil // git fetch would change nothing (lsrefs.go)
	}
	args := append(configArgs(cacheConfig), "fetch", "--quiet", "--prune", "--no-tags", "--no-write-fetch-head", "--", up.url,
		"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
	if _, err := p.runUpstream(ctx, up, env, args...); err != nil {
		if r := (*refusal.Error)(nil); errors.As(err, &r) {
			return r
		}
		return refusal.Wrap(refusal.Internal, err, "fetching from upstream %s failed: %s", up.url, upstreamSays(err))
	}
	if headResolves(dir) {
		return nil
	}
	out, err := p.runUpstream(ctx, up, env, append(configArgs(cacheConfig), "ls-remote", "--symref", "--", up.url, "HEAD")...)
	if err != nil {
		return nil // no HEAD upstream (an empty repository): clones choose their own
	}
	if target, ok := strings.CutPrefix(strings.SplitN(string(out), "\n", 2)[0], "ref: "); ok {
		if ref, _, ok := strings.Cut(target, "\tHEAD"); ok && strings.HasPrefix(ref, "refs/heads/") && validRef(ref) {
			_, err := p.run(ctx, env, "symbolic-ref", "HEAD", ref)
			return err
		}
	}
	return nil
}

// headResolves reports whether the cache's HEAD names a branch it has,
// read from the files git keeps (the loose ref, or its line in
// packed-refs) rather than by a git: a refresh runs one git fewer. A
// branch it misses only asks upstream for its HEAD again.
func headResolves(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "HEAD"))
	ref, ok := strings.CutPrefix(strings.TrimSuffix(string(b), "\n"), "ref: ")
	if err != nil || !ok || !strings.HasPrefix(ref, "refs/heads/") || !validRef(ref) {
		return false
	}
	if st, err := os.Lstat(filepath.Join(dir, ref)); err == nil && st.Mode().IsRegular() {
		return true
	}
	packed, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	return err == nil && bytes.Contains(packed, []byte(" "+ref+"\n"))
}

// initBare makes an empty bare repository at dir for remote, atomically.
func (p *Proxy) initBare(ctx context.Context, dir, remote string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".init-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := p.run(ctx, p.gitEnv(), "init", "--quiet", "--bare", "--template=", tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, remoteFile), []byte(remote+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// configArgs gives git configuration as -c options: only ever the
// proxy's own constants (a credential goes through configEnv).
func configArgs(kv [][2]string) []string {
	var out []string
	for _, e := range kv {
		out = append(out, "-c", e[0]+"="+e[1])
	}
	return out
}

// upstreamSays is the last line git wrote about a failure, for the agent.
func upstreamSays(err error) string {
	var ge *gitError
	if !errors.As(err, &ge) {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(ge.stderr), "\n")
	return oneLine(lines[len(lines)-1])
}
