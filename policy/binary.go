package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// CheckBinary re-checks, just before a run, that the rule's binary still
// resolves to the file the policy loaded and, when the rule pins a digest,
// that its content still has it. Digests are cached by file identity
// (device, inode, size, change time), so an unchanged binary is hashed once.
func (r *Rule) CheckBinary() error {
	if r.Absent != nil {
		return r.Absent
	}
	resolved, err := filepath.EvalSymlinks(r.Binary)
	if err != nil || resolved != r.Resolved {
		return fmt.Errorf("binary %s no longer resolves to %s", r.Binary, r.Resolved)
	}
	if r.SHA256 == "" {
		return nil
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return fmt.Errorf("binary %s: %w", resolved, err)
	}
	id := identityOf(fi)
	if sum, ok := digests.get(resolved, id); ok && sum == r.SHA256 {
		return nil
	}
	sum, err := fileSHA256(resolved)
	if err != nil {
		return fmt.Errorf("binary %s: %w", resolved, err)
	}
	if sum != r.SHA256 {
		return fmt.Errorf("%w: %s has sha256 %s, the rule pins %s", ErrDigest, resolved, sum, r.SHA256)
	}
	digests.put(resolved, id, sum)
	return nil
}

type fileIdentity struct {
	dev, ino uint64
	size     int64
	ctime    time.Time
}

func identityOf(fi os.FileInfo) fileIdentity {
	id := fileIdentity{size: fi.Size(), ctime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
		id.ctime = statCtime(st)
	}
	return id
}

// digestCache remembers the digest of files by identity. It is shared by
// every loaded policy: a file's content does not depend on the policy.
type digestCache struct {
	mu sync.Mutex
	m  map[string]digestEntry
}

type digestEntry struct {
	id  fileIdentity
	sum string
}

var digests = &digestCache{m: map[string]digestEntry{}}

func (c *digestCache) get(path string, id fileIdentity) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[path]
	return e.sum, ok && e.id == id
}

func (c *digestCache) put(path string, id fileIdentity, sum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[path] = digestEntry{id: id, sum: sum}
}
