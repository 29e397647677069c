package gitproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"coily.dev/coily/refusal"
)

// serveFetch serves info/refs?service=git-upload-pack (after refreshing
// the cache from upstream; for protocol v2, beside the refresh, which
// the POSTs then wait for) and git-upload-pack (from the cache, as it
// is, unless it was evicted since): git upload-pack on the cache, with
// Git-Protocol passed through. Each POST is audited with the bytes it
// answered.
func (p *Proxy) serveFetch(w http.ResponseWriter, r *http.Request, rq *request) {
	dir := p.cacheDir(rq.remote, rq.target.Repo)
	cache, release := p.caches.acquire(dir, rq.remote.Name)
	defer release()
	var err error
	switch made := exists(filepath.Join(dir, "HEAD")); {
	case rq.target.Refs && made && v2(r):
		err = p.refreshBehind(rq, cache)
	case rq.target.Refs || !made:
		var up *upstream
		if up, err = p.upstream(rq.ctx, rq, false); err == nil {
			err = p.refresh(rq.ctx, up, cache)
			up.close()
		}
	default:
		if err = p.caches.waitBehind(rq.ctx, cache); err != nil {
			p.record(rq, "git.fetch", err, nil, nil)
			writeGitError(w, err)
			return
		}
	}
	if err != nil {
		p.record(rq, "git.fetch", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	req, err := backendRequest(r, UploadPack, maxFetchBody)
	if err != nil {
		p.record(rq, "git.fetch", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	n := p.serveGit(w, req, dir, UploadPack, rq.target.Refs, configEnv(cacheConfig))
	if !rq.target.Refs {
		p.record(rq, "git.fetch", nil, map[string]string{"bytes": strconv.FormatInt(n, 10)}, nil)
	}
}

// v2 reports whether r asks for git's protocol version 2, whose
// advertisement holds no refs (they come in the ls-refs POST).
func v2(r *http.Request) bool {
	return strings.Contains(":"+r.Header.Get("Git-Protocol")+":", ":version=2:")
}

// behindRefresh is a refresh of a cache that a protocol v2 fetch's
// advertisement started and did not wait for: the advertisement holds no
// refs, so the fetch's ls-refs POST, which comes next, waits for it
// instead (waitBehind), and answers from the cache as upstream was when
// the fetch began, as when the advertisement waited. The agent's turn
// between the two runs beside the refresh.
type behindRefresh struct {
	done chan struct{}
	err  error // set before done is closed
}

func (b *behindRefresh) ended() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// refreshBehind starts a refresh of e that the request does not wait for,
// holding e until it ends. It first waits for the one behind e before
// it, if any: one runs at a time, and the refreshes a caller can leave
// running are bounded by the requests it holds open, not by how many it
// made.
func (p *Proxy) refreshBehind(rq *request, e *cacheEntry) error {
	p.caches.mu.Lock()
	prev := e.behind
	p.caches.mu.Unlock()
	if prev != nil {
		select {
		case <-prev.done:
		case <-rq.ctx.Done():
			return refusal.Wrap(refusal.Internal, rq.ctx.Err(), "the fetch ended while the proxy refreshed its cache")
		}
	}
	b := &behindRefresh{done: make(chan struct{})}
	_, release := p.caches.acquire(e.dir, e.remote)
	p.caches.mu.Lock()
	e.behind = b
	p.caches.mu.Unlock()
	// The refresh has a request of its own: a GitHub App's token minted
	// for it is noted there, not in the advertisement's, which is done.
	bg := &request{ctx: rq.ctx, caller: rq.caller, method: rq.method, target: rq.target, remote: rq.remote, start: rq.start}
	go func() {
		defer release()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(bg.ctx), p.cfg.UpstreamTimeout)
		defer cancel()
		up, err := p.upstream(ctx, bg, false)
		if err == nil {
			err = p.refresh(ctx, up, e)
			up.close()
		}
		if err != nil {
			p.log.Warn("git proxy: refreshing a cache failed", "remote", bg.remote.Name, "err", err)
		}
		b.err = err
		close(b.done)
	}()
	return nil
}

// waitBehind waits for the refresh behind e's advertisements, if one
// ran, and returns its failure: the fetch does not go on from a cache
// that failed to refresh, as when its advertisement waited.
func (c *caches) waitBehind(ctx context.Context, e *cacheEntry) error {
	c.mu.Lock()
	b := e.behind
	c.mu.Unlock()
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return refusal.Wrap(refusal.Internal, ctx.Err(), "the fetch ended while the proxy refreshed its cache")
	}
}

// writeGitError answers a fetch's POST refused after its advertisement
// was served: as git's own error packet ("ERR " and the refusal's line),
// which git shows the agent ("remote error: …"), where it shows nothing
// of an HTTP error's body on a POST.
func writeGitError(w http.ResponseWriter, err error) {
	re := refusal.As(err)
	line := fmt.Sprintf("ERR %s: %s\n", re.Code, oneLine(re.Msg))
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, "%04x%s", len(line)+4, line)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// logWriter writes git's standard error to the log.
type logWriter struct{ log *slog.Logger }

func (l logWriter) Write(b []byte) (int, error) {
	l.log.LogAttrs(context.Background(), slog.LevelWarn, "git", slog.String("stderr", oneLine(strings.TrimSpace(string(b)))))
	return len(b), nil
}
