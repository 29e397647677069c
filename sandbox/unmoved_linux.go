package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// A protected entry the check after a command could not move aside (a
// plant on a file system of its own inside the workspace, say, or past
// the moves' deadline) leaves the workspace refused; its owner looks, and
// repairs. The repair's scan (CheckWorkspace) would take what is there
// for the owner's, so such entries are recorded, by identity, in the
// quarantine directory (UnmovedFile): every scan before a command, the
// repair's included, refuses while one is still where it was, or at any
// protected name it walks, until the owner has removed it. A scan before
// a command that passes drops the record.

// UnmovedFile is the record, in a workspace's QuarantineDir, of the
// protected entries a check after a command could not move aside.
const UnmovedFile = "unmoved.json"

// maxUnmovedBytes bounds the record read (past it, the scan refuses).
const maxUnmovedBytes = 64 << 20

// unmoved is one protected entry not moved aside: where it was, after
// which request, and its identity.
type unmoved struct {
	Path    string `json:"path"`
	Request string `json:"request"`
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
}

// recordUnmoved adds what the mover could not move to the record.
func (m *mover) recordUnmoved() error {
	if len(m.unmoved) == 0 {
		return nil
	}
	if m.r.quarantine == nil {
		return fmt.Errorf("no quarantine directory to record what was not moved aside")
	}
	all, err := readUnmoved(m.r.quarantine)
	if err != nil {
		return err
	}
	data, err := json.Marshal(append(all, m.unmoved...))
	if err != nil {
		return err
	}
	q := int(m.r.quarantine.Fd())
	tmp := m.id + ".unmoved"
	_ = unix.Unlinkat(q, tmp, 0)
	if err := createFile(m.r.quarantine, tmp, append(data, '\n')); err != nil {
		return fmt.Errorf("record what was not moved aside: %w", err)
	}
	if err := unix.Renameat(q, tmp, q, UnmovedFile); err != nil {
		return fmt.Errorf("record what was not moved aside: %w", err)
	}
	return nil
}

// readUnmoved reads the record in the quarantine directory q (none: nil).
func readUnmoved(q *os.File) ([]unmoved, error) {
	f, err := openRegular(q, UnmovedFile)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", QuarantineDir, UnmovedFile, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxUnmovedBytes+1))
	if err == nil && len(data) > maxUnmovedBytes {
		err = fmt.Errorf("larger than %d bytes", maxUnmovedBytes)
	}
	var out []unmoved
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", QuarantineDir, UnmovedFile, err)
	}
	return out, nil
}

// dropUnmoved removes the record once a scan before a command passed.
func dropUnmoved(q *os.File) {
	if q != nil {
		_ = unix.Unlinkat(int(q.Fd()), UnmovedFile, 0)
	}
}

// loadUnmoved reads the root's record for the scan before a command and
// refuses an entry still where it was; the others the scan refuses at
// any protected name it finds them (add).
func (s *scanner) loadUnmoved() error {
	q, err := openAt(s.root, QuarantineDir, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", QuarantineDir, err)
	}
	list, err := readUnmoved(q)
	q.Close()
	if err != nil {
		return err
	}
	s.unmoved = map[[2]uint64]unmoved{}
	for _, u := range list {
		s.entries++
		if err := s.inBudget(); err != nil {
			return err
		}
		s.unmoved[[2]uint64{u.Dev, u.Ino}] = u
		if s.unmovedAt(u) {
			return u.refusal(u.Path)
		}
	}
	return nil
}

// unmovedAt reports whether u is still where it was.
func (s *scanner) unmovedAt(u unmoved) bool {
	if path.IsAbs(u.Path) || path.Clean(u.Path) != u.Path || u.Path == "." {
		return false
	}
	parent, err := openDeep(s.root, path.Dir(u.Path), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer parent.Close()
	var st unix.Stat_t
	return unix.Fstatat(int(parent.Fd()), path.Base(u.Path), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Dev == u.Dev && st.Ino == u.Ino
}

// refusal says why the scan refuses u, found at rel.
func (u unmoved) refusal(rel string) error {
	return fmt.Errorf("%s was made by request %s, and the check after it could not move it aside (from %s): coily never takes it for the owner's; look at it and remove it", rel, u.Request, u.Path)
}
