package gitproxy

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// serveFetch serves info/refs?service=git-upload-pack (after refreshing
// the cache from upstream) and git-upload-pack (from the cache, as it
// is, unless it was evicted since): git upload-pack on the cache, with
// Git-Protocol passed through. Each POST is audited with the bytes it
// answered.
func (p *Proxy) serveFetch(w http.ResponseWriter, r *http.Request, rq *request) {
	dir := p.cacheDir(rq.remote, rq.target.Repo)
	cache, release := p.caches.acquire(dir, rq.remote.Name)
	defer release()
	if rq.target.Refs || !exists(filepath.Join(dir, "HEAD")) {
		up, err := p.upstream(rq.ctx, rq, false)
		if err == nil {
			err = p.refresh(rq.ctx, up, cache)
			up.close()
		}
		if err != nil {
			p.record(rq, "git.fetch", err, nil, nil)
			writeRefusal(w, err)
			return
		}
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
