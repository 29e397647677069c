package gitproxy

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// remoteFile, in a cache's directory, names the remote whose cache it
// is, so that a restarted proxy counts it against that remote's budget.
const remoteFile = "coily-remote"

// cacheEntry is one cache as the proxy tracks it: who uses it now, how
// large it is, when it was last used and refreshed.
type cacheEntry struct {
	dir    string
	remote string
	// refreshing serializes the cache's refreshes.
	refreshing sync.Mutex

	// guarded by caches.mu
	users     int
	size      int64
	used      time.Time
	refreshed time.Time
	// behind is the last refresh a fetch's advertisement left running
	// (fetch.go), which the fetches' POSTs wait for; nil when none ran
	// since the last refresh that was not one of them.
	behind *behindRefresh
}

// caches are the proxy's caches under root, bounded in bytes in total
// and per remote: when a request is done with a cache and the caches are
// over a budget, the least recently used are removed whole. A cache a
// request uses is never removed, nor the most recently used one (of all,
// for the total; of its remote, for the remote's), which may alone be
// larger than a budget.
type caches struct {
	root             string
	total, perRemote int64
	log              *slog.Logger

	mu sync.Mutex
	m  map[string]*cacheEntry
}

// load finds the caches a previous run left under root, and removes
// what an interrupted creation or removal left.
func (c *caches) load() error {
	c.m = map[string]*cacheEntry{}
	des, err := os.ReadDir(c.root)
	if err != nil {
		return err
	}
	for _, de := range des {
		dir := filepath.Join(c.root, de.Name())
		if !de.IsDir() || !strings.HasSuffix(de.Name(), ".git") || strings.HasPrefix(de.Name(), ".") {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			continue
		}
		e := &cacheEntry{dir: dir, size: dirSize(dir)}
		if b, err := os.ReadFile(filepath.Join(dir, remoteFile)); err == nil {
			e.remote = strings.TrimSpace(string(b))
		}
		if fi, err := de.Info(); err == nil {
			e.used = fi.ModTime()
		}
		c.m[dir] = e
	}
	return nil
}

// acquire returns the cache at dir, held until release is called.
func (c *caches) acquire(dir, remote string) (e *cacheEntry, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[dir]
	if !ok {
		e = &cacheEntry{dir: dir, remote: remote}
		c.m[dir] = e
	}
	e.users++
	e.used = time.Now()
	var once sync.Once
	return e, func() { once.Do(func() { c.release(e) }) }
}

// release ends one use of e and removes the caches over the budgets.
func (c *caches) release(e *cacheEntry) {
	c.mu.Lock()
	e.users--
	e.used = time.Now()
	if e.users == 0 && !exists(filepath.Join(e.dir, "HEAD")) {
		delete(c.m, e.dir) // never made, or its first refresh failed
	}
	gone := c.evict()
	c.mu.Unlock()
	for _, dir := range gone {
		if err := os.RemoveAll(dir); err != nil {
			c.log.Warn("git proxy: removing an evicted cache failed", "dir", dir, "err", err)
		}
	}
}

// refreshed records a refresh of e that left it size bytes large; it
// clears a refresh behind an advertisement that has ended (its failure
// no longer stands: the cache is as upstream is).
func (c *caches) refreshed(e *cacheEntry, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.size, e.refreshed = size, time.Now()
	if e.behind != nil && e.behind.ended() {
		e.behind = nil
	}
}

// sized records e's size after a change other than a refresh.
func (c *caches) sized(e *cacheEntry, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.size = size
}

// freshSince reports whether e was refreshed at or after t.
func (c *caches) freshSince(e *cacheEntry, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !e.refreshed.IsZero() && !e.refreshed.Before(t)
}

// evict takes the caches to remove out of the set, least recently used
// first, until the total and each remote are within their budgets, and
// renames each out of the way (so that a request that comes next makes
// a new one); it returns the renamed directories. c.mu is held.
func (c *caches) evict() []string {
	all := make([]*cacheEntry, 0, len(c.m))
	var total int64
	byRemote := map[string]int64{}
	for _, e := range c.m {
		all = append(all, e)
		total += e.size
		byRemote[e.remote] += e.size
	}
	slices.SortFunc(all, func(a, b *cacheEntry) int { return a.used.Compare(b.used) })
	newest := map[string]*cacheEntry{}
	for _, e := range all {
		newest[e.remote] = e
	}
	var gone []string
	for _, e := range all {
		overTotal := total > c.total && e != all[len(all)-1]
		overRemote := byRemote[e.remote] > c.perRemote && e != newest[e.remote]
		if e.users > 0 || !overTotal && !overRemote {
			continue
		}
		to, err := os.MkdirTemp(c.root, ".evict-")
		if err == nil {
			if err = os.Rename(e.dir, filepath.Join(to, "cache.git")); errors.Is(err, fs.ErrNotExist) {
				err = nil // never made: its first refresh failed
			}
		}
		if err != nil {
			c.log.Warn("git proxy: evicting a cache failed", "dir", e.dir, "err", err)
			continue
		}
		c.log.Info("git proxy: cache evicted", "remote", e.remote, "bytes", e.size)
		delete(c.m, e.dir)
		total -= e.size
		byRemote[e.remote] -= e.size
		gone = append(gone, to)
	}
	return gone
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
