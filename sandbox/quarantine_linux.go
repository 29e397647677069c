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
// always fits.
type mover struct {
	r    *writableRoot
	id   string
	done []moved
}

// move moves rel aside, by descriptor, never replacing anything.
func (m *mover) move(rel, why string) error {
	if m.r.quarantine == nil {
		return fmt.Errorf("no quarantine directory")
	}
	dir := m.r.dir
	if parent := path.Dir(rel); parent != "." {
		f, err := openDeep(m.r.dir, parent, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer f.Close()
		dir = f
	}
	for n := len(m.done) + 1; ; n++ {
		name := m.id + "-" + strconv.Itoa(n)
		err := unix.Renameat2(int(dir.Fd()), path.Base(rel), int(m.r.quarantine.Fd()), name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) && n < len(m.done)+1000 {
			continue // left by an earlier command of the same id prefix
		}
		if err == nil {
			m.done = append(m.done, moved{Name: name, Path: rel, Why: why})
		}
		return err
	}
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

// moveAll moves the entries (sorted, none inside one already moved).
func (m *mover) moveAll(rels []string, why string) (done []string, errs error) {
	slices.Sort(rels)
	for _, rel := range rels {
		if slices.ContainsFunc(m.done, func(d moved) bool { return strings.HasPrefix(rel, d.Path+"/") || rel == d.Path }) {
			continue // inside an entry already moved
		}
		if err := m.move(rel, why); err != nil {
			errs = errors.Join(errs, fmt.Errorf("move %s aside: %w", rel, err))
			continue
		}
		done = append(done, rel)
	}
	return done, errs
}
