package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"

	"golang.org/x/sys/unix"
)

// Bounds of a workspace scan. A workspace beyond them cannot be protected,
// so a command in it is refused (the class is "anywhere in the workspace").
const (
	scanMaxEntries = 500_000
	scanMaxDepth   = 64
)

// ErrProtectedLink reports a symbolic link at a protected name: coily never
// follows it (it could bind what it points at), so the command is refused
// until the owner removes it or names it in the rule's writable list.
var ErrProtectedLink = errors.New("protected name is a symbolic link")

// scanner walks a writable root by descriptor.
type scanner struct {
	writable []string
	open     bool // open each protected entry (O_PATH) for binding
	post     bool // after the command: record links and linked files, refuse nothing
	entries  int
	seen     map[[2]uint64]bool // directories visited (bind-mount loops)
	out      []protected
}

// scanRoot finds every protected entry of the writable root: git control
// entries anywhere (.git directories and files, bare repositories, and in
// git directories the rule may write, their code entries, submodules'
// and worktrees' included) and ProtectedNames at the top of the root and
// of every work tree in it. It never follows a symbolic link. With open,
// each entry is returned opened (O_PATH), the caller closing them.
func scanRoot(root *os.File, writable []string, open bool) ([]protected, error) {
	s := &scanner{writable: writable, open: open, seen: map[[2]uint64]bool{}}
	err := s.walk(root, "", 0)
	if err != nil {
		s.close()
		return nil, err
	}
	return s.out, nil
}

func (s *scanner) close() {
	for _, e := range s.out {
		if e.file != nil {
			e.file.Close()
		}
	}
}

func (s *scanner) walk(dir *os.File, rel string, depth int) error {
	st, err := statFD(dir)
	if err != nil {
		return err
	}
	key := [2]uint64{st.Dev, st.Ino}
	if s.seen[key] {
		return nil
	}
	s.seen[key] = true
	entries, err := readDir(dir)
	if err != nil {
		return fmt.Errorf("scan %s: %w", displayRel(rel), err)
	}
	if s.entries += len(entries); s.entries > scanMaxEntries {
		return fmt.Errorf("workspace has more than %d entries: too large to protect", scanMaxEntries)
	}
	workTree := rel == "" || slices.ContainsFunc(entries, func(e dirent) bool { return e.name == GitName })
	for _, e := range entries {
		child := path.Join(rel, e.name)
		switch {
		case e.name == GitName:
			if err := s.gitEntry(dir, e, child); err != nil {
				return err
			}
			continue
		case workTree && isProtectedName(e.name):
			if err := s.add(dir, e, child, kindName, slices.Contains(s.writable, e.name)); err != nil {
				return err
			}
			continue
		case workTree && e.typ == unix.DT_DIR && slices.Contains(protectedParents(), e.name):
			if err := s.nestedNames(dir, e.name, child); err != nil {
				return err
			}
		}
		if e.typ != unix.DT_DIR {
			continue
		}
		sub, err := openAt(dir, e.name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			continue // gone, or not readable: nothing the command can see either
		}
		if isGitDir(sub) {
			err = s.gitDir(dir, sub, e, child)
		} else if depth+1 < scanMaxDepth {
			err = s.walk(sub, child, depth+1)
		} else {
			err = fmt.Errorf("workspace is deeper than %d directories: too deep to protect", scanMaxDepth)
		}
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// nestedNames adds the ProtectedNames below parent (".config/git", …).
func (s *scanner) nestedNames(dir *os.File, parent, rel string) error {
	sub, err := openAt(dir, parent, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
	}
	defer sub.Close()
	entries, err := readDir(sub)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		name := parent + "/" + e.name
		if isProtectedName(name) {
			if err := s.add(sub, e, path.Join(rel, e.name), kindName, slices.Contains(s.writable, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// gitEntry handles a .git entry: a git directory or a gitfile.
func (s *scanner) gitEntry(dir *os.File, e dirent, rel string) error {
	if e.typ != unix.DT_DIR {
		return s.add(dir, e, rel, kindGitFile, false)
	}
	sub, err := openAt(dir, e.name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
	}
	defer sub.Close()
	return s.gitDir(dir, sub, e, rel)
}

// gitDir adds a git directory: read-only as a whole, or, when the rule may
// write git data, read-write with its code entries read-only (and those of
// its submodules and worktrees).
func (s *scanner) gitDir(parent, dir *os.File, e dirent, rel string) error {
	rw := slices.Contains(s.writable, GitName)
	if err := s.add(parent, e, rel, kindGitDir, rw); err != nil || !rw {
		return err
	}
	return s.gitCode(dir, rel, 0)
}

// gitCode adds the code entries of a writable git directory, then recurses
// into its submodules' git directories and its worktrees' admin
// directories.
func (s *scanner) gitCode(dir *os.File, rel string, depth int) error {
	entries, err := readDir(dir)
	if err != nil {
		return nil
	}
	if s.entries += len(entries); s.entries > scanMaxEntries || depth > scanMaxDepth {
		return fmt.Errorf("git directory %s is too large to protect", rel)
	}
	for _, e := range entries {
		child := path.Join(rel, e.name)
		switch {
		case slices.Contains(GitDirCodeNames, e.name):
			if err := s.add(dir, e, child, kindGitCode, slices.Contains(s.writable, GitName+"/"+e.name)); err != nil {
				return err
			}
		case (e.name == "modules" || e.name == "worktrees") && e.typ == unix.DT_DIR:
			if err := s.gitNested(dir, e.name, child, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// gitNested walks modules/ (submodule git directories, possibly at any
// depth: names may contain slashes) or worktrees/ (admin directories).
func (s *scanner) gitNested(dir *os.File, name, rel string, depth int) error {
	sub, err := openAt(dir, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
	}
	defer sub.Close()
	if isGitDir(sub) || path.Base(path.Dir(rel)) == "worktrees" {
		return s.gitCode(sub, rel, depth+1)
	}
	entries, err := readDir(sub)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if e.typ == unix.DT_DIR {
			if err := s.gitNested(sub, e.name, path.Join(rel, e.name), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// add records a protected entry. A symbolic link at a protected name is
// refused unless the rule may write it (then it is left alone: binding it
// would follow it).
func (s *scanner) add(dir *os.File, e dirent, rel string, kind entryKind, writable bool) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil // gone
	}
	p := protected{rel: rel, kind: kind, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, writable: writable, dev: st.Dev, ino: st.Ino}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if s.post {
			s.out = append(s.out, p)
			return nil
		}
		if writable {
			return nil
		}
		return fmt.Errorf("%w: %s (coily does not follow links at protected names: remove it, or name it in the rule's writable list)", ErrProtectedLink, rel)
	case unix.S_IFDIR:
	case unix.S_IFREG:
		if st.Nlink > 1 && !writable && !s.post {
			return fmt.Errorf("protected file %s has %d hard links: a link elsewhere in the workspace would stay writable", rel, st.Nlink)
		}
	default:
		return nil // a socket, FIFO or device: nothing a host tool loads
	}
	if s.open {
		f, err := openAt(dir, e.name, unix.O_PATH)
		if err != nil {
			return fmt.Errorf("open protected %s: %w", rel, err)
		}
		if fst, err := statFD(f); err != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
			f.Close()
			return fmt.Errorf("protected %s changed while being opened", rel)
		}
		p.file = f
	}
	s.out = append(s.out, p)
	return nil
}

// isGitDir reports whether dir looks like a git directory (a bare
// repository, a submodule's or a .git directory): git's own test is a HEAD
// file with objects/ and refs/ directories beside it.
func isGitDir(dir *os.File) bool {
	var st unix.Stat_t
	is := func(name string, typ uint32) bool {
		return unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == typ
	}
	return is("HEAD", unix.S_IFREG) && is("objects", unix.S_IFDIR) && is("refs", unix.S_IFDIR)
}

// dirent is one directory entry.
type dirent struct {
	name string
	typ  uint8 // unix.DT_*; DT_UNKNOWN resolved with fstatat
}

// readDir lists dir's entries with their types, without following links.
func readDir(dir *os.File) ([]dirent, error) {
	// A fresh descriptor: ReadDir keeps a cursor in the file.
	f, err := openBeneath(dir, "", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []dirent
	for {
		list, err := f.ReadDir(1024)
		for _, de := range list {
			typ := uint8(unix.DT_UNKNOWN)
			switch m := de.Type(); {
			case m.IsDir():
				typ = unix.DT_DIR
			case m.IsRegular():
				typ = unix.DT_REG
			case m&os.ModeSymlink != 0:
				typ = unix.DT_LNK
			default:
				var st unix.Stat_t
				if unix.Fstatat(int(dir.Fd()), de.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					typ = dtOf(st.Mode)
				}
			}
			out = append(out, dirent{name: de.Name(), typ: typ})
		}
		if errors.Is(err, io.EOF) || len(list) == 0 {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func dtOf(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN
}

func displayRel(rel string) string {
	if rel == "" {
		return "the workspace"
	}
	return rel
}
