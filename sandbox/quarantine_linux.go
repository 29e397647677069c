package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// openQuarantine makes the root's quarantine directory if it is absent
// and opens it: a directory of the server's user, mode 0700 (set again if
// it was widened), never a link or anything else. Made new, it holds a
// .gitignore ignoring everything, so the owner's git leaves it alone.
func openQuarantine(root *os.File) (*os.File, error) {
	made := true
	if err := unix.Mkdirat(int(root.Fd()), QuarantineDir, 0o700); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("make %s: %w", QuarantineDir, err)
		}
		made = false
	}
	q, err := openAt(root, QuarantineDir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open %s (it must be the server's directory): %w", QuarantineDir, err)
	}
	st, err := statFD(q)
	switch {
	case err != nil:
	case st.Uid != uint32(os.Geteuid()):
		err = fmt.Errorf("%s belongs to uid %d, not the server's: move it away", QuarantineDir, st.Uid)
	case st.Mode&0o7777 != 0o700:
		err = unix.Fchmod(int(q.Fd()), 0o700)
	}
	if err == nil && made {
		err = createFile(q, ".gitignore", []byte("*\n"))
	}
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("quarantine directory: %w", err)
	}
	return q, nil
}

// createFile writes a new file name in dir (never replacing anything).
func createFile(dir *os.File, name string, data []byte) error {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// moved is one entry moved to the quarantine directory.
type moved struct {
	Name string `json:"name"` // in the quarantine directory
	Path string `json:"path"` // where it was, relative to the workspace
	Why  string `json:"why"`  // "protected" or "beyond the scan"
}

// manifest is what the quarantine directory records of one command.
type manifest struct {
	Request string    `json:"request"`
	Time    time.Time `json:"time"`
	Entries []moved   `json:"entries"`
}

// mover moves entries of a root to its quarantine directory under names
// of its own (ID-N): short whatever the entry's name, so the rename
// always fits. What it cannot move (or not before its deadline) it
// records as unmoved.
type mover struct {
	r        *writableRoot
	id       string
	deadline time.Time
	done     []moved
	moved    map[string]bool // the paths in done
	restored []string        // given their owner's write access to be moved
	unmoved  []unmoved
}

// move moves e aside, by descriptor, never replacing anything. Where the
// command took write access away from it or its parent (chmod 555, which
// seccomp allows), their owner gets it back (restored), then it moves.
func (m *mover) move(e protected, why string) error {
	if m.r.quarantine == nil {
		return fmt.Errorf("no quarantine directory")
	}
	dir := m.r.dir
	if parent := path.Dir(e.rel); parent != "." {
		f, err := openDeep(m.r.dir, parent, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer f.Close()
		dir = f
	}
	err := m.rename(dir, e.rel, why)
	if errors.Is(err, unix.EACCES) {
		if werr := m.writeAccess(dir, e.rel); werr != nil {
			return errors.Join(err, werr)
		}
		err = m.rename(dir, e.rel, why)
	}
	return err
}

// rename moves rel (in dir) to the quarantine directory under a name of
// the mover's.
func (m *mover) rename(dir *os.File, rel, why string) error {
	for n := len(m.done) + 1; ; n++ {
		name := m.id + "-" + strconv.Itoa(n)
		err := unix.Renameat2(int(dir.Fd()), path.Base(rel), int(m.r.quarantine.Fd()), name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) && n < len(m.done)+1000 {
			continue // left by an earlier command of the same id prefix
		}
		if err == nil {
			m.done = append(m.done, moved{Name: name, Path: rel, Why: why})
			m.moved[rel] = true
		}
		return err
	}
}

// writeAccess gives rel's parent (dir) its owner's write and search
// access, and rel, a directory (moved to another parent, its ".." is
// changed), its owner's write access, recording each it changes.
func (m *mover) writeAccess(dir *os.File, rel string) error {
	st, err := statFD(dir)
	if err != nil {
		return err
	}
	if st.Mode&0o300 != 0o300 {
		if err := chmodFD(dir, st.Mode&0o7777|0o300); err != nil {
			return fmt.Errorf("give its parent write access: %w", err)
		}
		m.restored = append(m.restored, path.Dir(rel))
	}
	name := path.Base(rel)
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o200 != 0 {
		return nil
	}
	if err := chmodNoFollow(dir, name, st.Mode&0o7777|0o200, st); err != nil {
		return fmt.Errorf("give it write access: %w", err)
	}
	m.restored = append(m.restored, rel)
	return nil
}

// record writes the manifest of what was moved (ID.json, or ID.N.json).
func (m *mover) record() error {
	if len(m.done) == 0 {
		return nil
	}
	data, err := json.MarshalIndent(manifest{Request: m.id, Time: time.Now().UTC(), Entries: m.done}, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	name := m.id + ".json"
	for n := 2; ; n++ {
		err := createFile(m.r.quarantine, name, data)
		if !errors.Is(err, unix.EEXIST) || n > 1000 {
			return err
		}
		name = m.id + "." + strconv.Itoa(n) + ".json"
	}
}

// maxMoveErrors bounds the failed moves reported one by one.
const maxMoveErrors = 16

// errMoveTime reports an entry left past the moves' deadline.
var errMoveTime = fmt.Errorf("%w: not moved in time", ErrScanBudget)

// moveAll moves the entries (sorted, none inside one already moved)
// until the mover's deadline; those it could not move are recorded.
func (m *mover) moveAll(entries []protected, why string) (done []string, errs error) {
	slices.SortFunc(entries, func(a, b protected) int { return strings.Compare(a.rel, b.rel) })
	failed := 0
	for _, e := range entries {
		if m.inside(e.rel) {
			continue
		}
		err := errMoveTime
		if !time.Now().After(m.deadline) {
			err = m.move(e, why)
		}
		if err == nil {
			done = append(done, e.rel)
			continue
		}
		if e.ino != 0 {
			m.unmoved = append(m.unmoved, unmoved{Path: e.rel, Request: m.id, Dev: e.dev, Ino: e.ino})
		}
		if failed++; failed <= maxMoveErrors {
			errs = errors.Join(errs, fmt.Errorf("move %s aside: %w", e.rel, err))
		}
	}
	if failed > maxMoveErrors {
		errs = errors.Join(errs, fmt.Errorf("and %d more entries not moved aside", failed-maxMoveErrors))
	}
	return done, errs
}

// inside reports whether rel is, or is inside, an entry already moved.
func (m *mover) inside(rel string) bool {
	for ; rel != "." && rel != "/"; rel = path.Dir(rel) {
		if m.moved[rel] {
			return true
		}
	}
	return false
}
