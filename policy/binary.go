package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// CheckBinary re-checks, just before a run, that the rule's binary still
// resolves to the file the policy loaded and, when the rule pins a digest,
// that its content still has it (see OpenBinary).
func (r *Rule) CheckBinary() error {
	f, err := r.OpenBinary()
	if err == nil {
		f.Close()
	}
	return err
}

// OpenBinary opens the rule's binary for a run: it must still resolve to
// the file the policy loaded, be a regular file, and, when the rule pins a
// digest, have that digest — computed from this open file, which is then
// what runs (a sandbox binds and executes it), so a file swapped in at the
// path after the check is never the one executed. A pinned binary that
// the server's user, its group or others may write is refused: it could
// change in place between the check and the run. Digests are cached by file identity
// (device, inode, size, change time), so an unchanged binary is hashed
// once.
func (r *Rule) OpenBinary() (*os.File, error) {
	if r.Absent != nil {
		return nil, r.Absent
	}
	resolved, err := filepath.EvalSymlinks(r.Binary)
	if err != nil || resolved != r.Resolved {
		return nil, fmt.Errorf("binary %s no longer resolves to %s", r.Binary, r.Resolved)
	}
	f, err := openNoFollow(resolved)
	if err != nil {
		return nil, fmt.Errorf("binary %s: %w", resolved, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("binary %s is not a regular file", resolved)
	}
	if r.SHA256 == "" {
		return f, nil
	}
	if err := pinnedWritable(resolved, fi, serverUID()); err != nil {
		f.Close()
		return nil, err
	}
	id := identityOf(fi)
	if sum, ok := digests.get(resolved, id); ok && sum == r.SHA256 {
		return f, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("binary %s: %w", resolved, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != r.SHA256 {
		f.Close()
		return nil, fmt.Errorf("%w: %s has sha256 %s, the rule pins %s", ErrDigest, resolved, sum, r.SHA256)
	}
	digests.put(resolved, id, r.SHA256)
	return f, nil
}

// serverUID is the user whose write access makes a pinned binary unsafe:
// the server's effective uid (tests judge as another user).
var serverUID = os.Geteuid

// pinnedWritable refuses a pinned binary that may change in place after
// its check: one its group or others may write, or one the server's user
// owns — read-only or not, as its owner may make it writable again. Root
// is the exception: a root server trusts root-owned files, as it must.
func pinnedWritable(path string, fi os.FileInfo, uid int) error {
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("binary %s is pinned but writable by its group or others (mode %v): its content could change after the check", path, fi.Mode().Perm())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && uid != 0 && int(st.Uid) == uid {
		return fmt.Errorf("pinned binary %s is writable by the server's user (uid %d owns it, and may make it writable even when it is read-only): make it root-owned", path, uid)
	}
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

// openNoFollow opens a file for reading, refusing a symbolic link as its
// last component.
func openNoFollow(path string) (*os.File, error) {
	// O_NONBLOCK: a FIFO put in the binary's place (in a workspace, by a
	// command) opens at once and is refused as no regular file.
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
}
