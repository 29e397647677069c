package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// ErrProtectedLink reports a symbolic link at a protected name: coily never
// follows it (it could bind what it points at), so the command is refused
// until the owner removes it or names it in the rule's writable list.
var ErrProtectedLink = errors.New("protected name is a symbolic link")

// scanner walks a writable root by descriptor, one directory at a time
// (each opened from the root with openat2, never following a link), so
// that neither depth nor width exhausts descriptors. It never blocks on
// what a command made: directories are opened O_DIRECTORY (a FIFO fails
// at once), files read only once opened O_NONBLOCK and found regular.
type scanner struct {
	root     *os.File
	rootPath string // the root's host path: absolute paths in git config are resolved against it
	writable []string
	open     bool // open each protected entry (O_PATH) for binding
	post     bool // after the command: record links and linked files, fix what hides, never give up
	entries  int
	out      []protected
	have     map[string]bool // the paths in out
	// extra are paths (relative) the protected git configuration names
	// (core.hooksPath, include.path) inside the root: protected too.
	extra []string
	// known are the git directories (device, inode) the scan before the
	// command found (post): only their configuration is read.
	known map[[2]uint64]bool
	// unmoved are the entries an earlier check could not move aside
	// (before): refused wherever they are found.
	unmoved map[[2]uint64]unmoved
	// fixed lists entries whose permissions were restored (post).
	fixed []string
	// aside lists directories (post) the next scan before a command could
	// not cover: deeper than ScanMaxDepth, or made by the command past
	// the entries bound. They are moved to the quarantine directory.
	aside []string
	errs  error // post: what could not be scanned

	deadline   time.Time // the scan's time budget
	maxEntries int       // before: refuse past it; after: move new directories aside past it
	since      time.Time // post: when the command may have started changing things
	groupWrite bool      // post: group write is the server's umask's to give
}

// newScanner is a scanner of root within budget.
func newScanner(root *os.File, rootPath string, writable []string, budget ScanBudget) *scanner {
	budget = budget.WithDefaults()
	return &scanner{root: root, rootPath: rootPath, writable: writable, have: map[string]bool{},
		deadline: time.Now().Add(budget.Time), maxEntries: budget.Entries}
}

// scanRoot finds every protected entry of the writable root (see
// protect.go): git control entries anywhere, the names protected at any
// depth, those protected at the top of the root and of every work tree
// in it, and, in git directories the rule may write, their code entries
// (submodules' and worktrees' included). It never follows a symbolic
// link. With open, each entry is returned opened (O_PATH), the caller
// closing them. rootPath is the root's host path.
func scanRoot(root *os.File, rootPath string, writable []string, open bool, budget ScanBudget) ([]protected, error) {
	s := newScanner(root, rootPath, writable, budget)
	s.open = open
	err := s.loadUnmoved()
	if err == nil {
		err = s.run()
	}
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

type queued struct {
	rel   string
	depth int
	deps  bool    // inside a dependency tree (node_modules): names there are not read by the host
	git   gitWalk // in a git directory the rule may write, or on the way to one
}

func (s *scanner) run() error {
	if err := s.reachRoot(); err != nil {
		s.errs = errors.Join(s.errs, err)
	}
	queue := []queued{{}}
	seen := map[[2]uint64]bool{}
	for len(queue) > 0 {
		if err := s.inBudget(); err != nil {
			if s.post {
				s.errs = errors.Join(s.errs, err)
				return nil
			}
			return err
		}
		q := queue[0]
		queue = queue[1:]
		if s.post && q.rel != "" && s.entries > s.maxEntries && s.madeByCommand(q.rel) {
			s.aside = append(s.aside, q.rel) // made past the bound: moved aside unread
			continue
		}
		dir, err := s.openDir(q.rel)
		if err != nil {
			if s.post {
				s.errs = errors.Join(s.errs, err)
				continue
			}
			return err
		}
		subdirs, err := s.visit(dir, q, seen)
		dir.Close()
		if err != nil {
			if s.post && errors.Is(err, errTooMany) && q.rel != "" && s.madeByCommand(q.rel) {
				s.aside = append(s.aside, q.rel)
				continue
			}
			if s.post {
				s.errs = errors.Join(s.errs, err)
				continue
			}
			return err
		}
		queue = append(queue, subdirs...)
	}
	return s.protectNamed()
}

// postEntries is how many entries the scan after a command covers, in
// multiples of the bound before: past it, the workspace is left refused.
const postEntries = 4

// inBudget reports a scan past its time or entries budget.
func (s *scanner) inBudget() error {
	if time.Now().After(s.deadline) {
		return fmt.Errorf("%w: the scan took longer than its budget", ErrScanBudget)
	}
	if s.post && s.entries > postEntries*s.maxEntries {
		return fmt.Errorf("%w: more than %d entries after the command", ErrScanBudget, postEntries*s.maxEntries)
	}
	return nil
}

// ErrScanBudget reports a scan that ran out of its time or entries.
var ErrScanBudget = errors.New("workspace scan out of budget")

// openDir opens a directory of the walk. One the command made unreadable
// (its user is the server's) is made readable again after the command:
// hiding a directory must not hide what is in it. Before the command, an
// unreadable directory refuses the command.
func (s *scanner) openDir(rel string) (*os.File, error) {
	dir, err := openDeep(s.root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err == nil || !errors.Is(err, unix.EACCES) {
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", displayRel(rel), err)
		}
		return dir, nil
	}
	if !s.post || rel == "" {
		return nil, fmt.Errorf("scan %s: %w (coily cannot protect what it cannot read)", displayRel(rel), err)
	}
	parent, perr := openDeep(s.root, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	if perr != nil {
		return nil, fmt.Errorf("scan %s: %w", rel, err)
	}
	defer parent.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(parent.Fd()), path.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("scan %s: %w", rel, err)
	}
	if err := unix.Fchmodat(int(parent.Fd()), path.Base(rel), st.Mode&0o7777|0o700, 0); err != nil {
		return nil, fmt.Errorf("scan %s: unreadable, and its mode cannot be restored: %w", rel, err)
	}
	s.fixed = append(s.fixed, rel)
	return openDeep(s.root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
}

// reachRoot gives the root back its owner's access after the command, if
// the command took it away (see reach): all of it, as the rules using
// the workspace write there (chmod 555 . would refuse the next command).
func (s *scanner) reachRoot() error {
	st, err := statFD(s.root)
	if err != nil || !s.post {
		return nil
	}
	want := s.wantMode(st) | 0o700
	if want == st.Mode&0o7777 {
		return nil
	}
	if err := unix.Fchmod(int(s.root.Fd()), want); err != nil {
		return fmt.Errorf("scan the workspace: its mode cannot be restored: %w", err)
	}
	s.fixed = append(s.fixed, ".")
	return nil
}

// reach gives a directory (name in dir, rel in the root, of the given
// mode) that the command made unreadable or unsearchable its owner's
// access back, after the command, before anything in it is looked at:
// hiding a directory (chmod 100 .git, 444 .config) must not hide what is
// in it. Recorded in fixed. Before the command it does nothing (what
// cannot then be read refuses the command).
func (s *scanner) reach(dir *os.File, name, rel string, mode uint32) error {
	if !s.post || mode&0o500 == 0o500 {
		return nil
	}
	if err := unix.Fchmodat(int(dir.Fd()), name, mode&0o7777|0o700, 0); err != nil {
		return fmt.Errorf("scan %s: unreadable, and its mode cannot be restored: %w", rel, err)
	}
	s.fixed = append(s.fixed, rel)
	return nil
}

// openSub opens the directory name in dir (rel in the root) for the
// scan, never following a link, after reach. Gone, or not a directory:
// nil and no error.
func (s *scanner) openSub(dir *os.File, name, rel string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, nil
	}
	if err := s.reach(dir, name, rel, st.Mode); err != nil {
		return nil, err
	}
	sub, err := openAt(dir, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w (coily cannot protect what it cannot read)", rel, err)
	}
	return sub, nil
}

// fail handles what the scan could not look at: before the command it
// refuses the command; after it, it is recorded (the server then locks
// out) and the scan goes on with everything else.
func (s *scanner) fail(err error) error {
	if err == nil || !s.post {
		return err
	}
	s.errs = errors.Join(s.errs, err)
	return nil
}

// visit classifies one directory's entries and returns the subdirectories
// to walk.
func (s *scanner) visit(dir *os.File, q queued, seen map[[2]uint64]bool) ([]queued, error) {
	st, err := statFD(dir)
	if err != nil {
		return nil, err
	}
	if key := [2]uint64{st.Dev, st.Ino}; seen[key] {
		return nil, nil // a bind-mount loop
	} else {
		seen[key] = true
	}
	entries, err := readDir(dir, s.left())
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", displayRel(q.rel), err)
	}
	if s.entries += len(entries); s.entries > s.maxEntries && !s.post {
		return nil, fmt.Errorf("workspace has more than %d entries: too large to protect", s.maxEntries)
	}
	// The top of a git directory the rule may write counts as a work
	// tree's: a work tree dressed as a bare repository is one.
	workTree := q.rel == "" || q.git == inGitDir || slices.ContainsFunc(entries, func(e dirent) bool { return e.name == GitName })
	// Files can have been widened only by being made or moved here (the
	// seccomp filter refuses chmod's widening): looked at where the
	// directory changed while the command ran.
	changed := s.post && s.changedSince(st)
	var subdirs []queued
	for _, e := range entries {
		child := path.Join(q.rel, e.name)
		if q.rel == "" && e.name == QuarantineDir {
			continue // the server's own, hidden from every command
		}
		if s.post && (e.typ == unix.DT_DIR || changed) {
			s.normalise(dir, e, child)
		}
		next, err := s.entry(dir, e, child, q, workTree)
		if err != nil {
			return nil, err
		}
		if next != nil {
			subdirs = append(subdirs, *next)
		}
	}
	return subdirs, nil
}

// entry classifies the entry e of dir (child in the root), found by a
// walk as q says, and returns the directory to walk next, if any.
func (s *scanner) entry(dir *os.File, e dirent, child string, q queued, workTree bool) (*queued, error) {
	if q.git != inTree {
		if next, done, err := s.gitEntry(dir, e, child, q); done {
			return next, err
		}
	}
	switch {
	case e.name == GitName:
		if e.typ != unix.DT_DIR {
			return nil, s.add(dir, e, child, kindGitFile, false)
		}
		return s.gitDir(dir, e, child, q)
	case workTree && isProtectedName(e.name):
		return nil, s.add(dir, e, child, kindName, slices.Contains(s.writable, e.name))
	case !q.deps && anyDepthName(e.name) != "":
		return nil, s.add(dir, e, child, kindName, slices.Contains(s.writable, anyDepthName(e.name)))
	case workTree && slices.Contains(protectedParents(), e.name):
		if e.typ == unix.DT_LNK {
			// .config, .cargo, .bundle as a link: the names below it
			// would be reached through the link.
			return nil, s.add(dir, e, child, kindName, false)
		}
		if err := s.nestedNames(dir, e.name, child); err != nil {
			return nil, err
		}
	}
	if e.typ != unix.DT_DIR {
		return nil, nil
	}
	isGit, ok, err := s.probe(dir, e, child)
	switch {
	case err != nil || !ok:
		return nil, err
	case isGit:
		return s.gitDir(dir, e, child, q)
	}
	return s.next(child, q, inTree, e.name == "node_modules")
}

// probe readies the directory e of dir (child in the root) for the walk
// (reach) and reports whether git would take it for a git directory. Not
// ok: gone, or unreachable after the command (recorded).
func (s *scanner) probe(dir *os.File, e dirent, child string) (isGit, ok bool, err error) {
	var st unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, false, nil // gone
	}
	if err := s.reach(dir, e.name, child, st.Mode); err != nil {
		return false, false, s.fail(err)
	}
	sub, err := openAt(dir, e.name, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false, false, nil // gone
	}
	defer sub.Close()
	return isGitDir(sub), true, nil
}

// next queues the directory child for a walk as how says, one level below
// q; deps marks a dependency tree. Past ScanMaxDepth it is moved aside
// unread after the command (the next scan would refuse it) and refuses
// the command before it.
func (s *scanner) next(child string, q queued, how gitWalk, deps bool) (*queued, error) {
	if q.depth+1 >= ScanMaxDepth {
		if s.post {
			s.aside = append(s.aside, child)
			return nil, nil
		}
		return nil, fmt.Errorf("workspace is deeper than %d directories at %s: too deep to protect (remove or flatten it)", ScanMaxDepth, child)
	}
	return &queued{rel: child, depth: q.depth + 1, deps: q.deps || deps, git: how}, nil
}

// nestedNames adds the ProtectedNames below parent (".config/git", …).
func (s *scanner) nestedNames(dir *os.File, parent, rel string) error {
	sub, err := s.openSub(dir, parent, rel)
	if err != nil || sub == nil {
		return s.fail(err)
	}
	defer sub.Close()
	entries, err := readDir(sub, s.left())
	if err != nil {
		return s.fail(fmt.Errorf("scan %s: %w", rel, err))
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

// protectNamed adds what protected git configuration names inside the
// workspace: a hooks directory (core.hooksPath, as husky sets it), an
// included configuration file. Absent ones are looked for after the
// command, like the protected names.
func (s *scanner) protectNamed() error {
	seen := map[string]bool{}
	for _, rel := range s.extra {
		if s.have[rel] || seen[rel] {
			continue
		}
		seen[rel] = true
		s.entries++
		if err := s.inBudget(); err != nil {
			return s.fail(err) // after the command: recorded, and the rest left
		}
		parentRel, name := path.Dir(rel), path.Base(rel)
		parent, err := openDeep(s.root, parentRel, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			continue // absent (or behind a link: nothing the host would read there)
		}
		var st unix.Stat_t
		if unix.Fstatat(int(parent.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			err = s.add(parent, dirent{name: name, typ: dtOf(st.Mode)}, rel, kindNamed, false)
		}
		parent.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// add records a protected entry. A symbolic link at a protected name is
// refused unless the rule may write it (then it is recorded, never opened
// or bound: binding it would follow it).
func (s *scanner) add(dir *os.File, e dirent, rel string, kind entryKind, writable bool) error {
	if s.have[rel] {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil // gone
	}
	if u, ok := s.unmoved[[2]uint64{st.Dev, st.Ino}]; ok {
		return u.refusal(rel)
	}
	p := protected{rel: rel, kind: kind, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, link: st.Mode&unix.S_IFMT == unix.S_IFLNK,
		writable: writable, dev: st.Dev, ino: st.Ino}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if s.post {
			s.keep(p)
			return nil
		}
		if writable {
			s.keep(p) // left alone, unbound: a link swapped in is told apart after
			return nil
		}
		return fmt.Errorf("%w: %s (coily does not follow links at protected names: remove it, or name it in the rule's writable list)", ErrProtectedLink, rel)
	case unix.S_IFDIR:
	case unix.S_IFREG:
		if st.Nlink > 1 && !writable && !s.post {
			return fmt.Errorf("protected file %s has %d hard links: a link elsewhere in the workspace would stay writable", rel, st.Nlink)
		}
	default:
		if !s.post {
			return nil // a socket, FIFO or device: nothing a host tool loads
		}
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
	s.keep(p)
	return nil
}

// keep records p among the protected entries.
func (s *scanner) keep(p protected) {
	s.out = append(s.out, p)
	s.have[p.rel] = true
}

// errTooMany reports a directory holding more entries than a scan covers.
var errTooMany = fmt.Errorf("%w: a directory with more entries than the scan covers", ErrScanBudget)

// dirent is one directory entry.
type dirent struct {
	name string
	typ  uint8 // unix.DT_*; DT_UNKNOWN resolved with fstatat
}

// readDir lists dir's entries with their types, without following links:
// at most max of them (errTooMany past it).
func readDir(dir *os.File, max int) ([]dirent, error) {
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
		if len(out) > max {
			return out, errTooMany
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

// left is how many more entries the scan may read: past the bound, one
// more (to tell it was passed).
func (s *scanner) left() int {
	bound := s.maxEntries
	if s.post {
		bound *= postEntries
	}
	return max(1, bound+1-s.entries)
}

// CheckWorkspace runs the scan before a command on the workspace at root
// (an absolute path, no link in it) and returns how many protected
// entries it found: an error says why the next command there would be
// refused. It changes nothing.
func CheckWorkspace(root string, budget ScanBudget) (int, error) {
	dir, err := openRoot(root)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	found, err := scanRoot(dir, root, nil, false, budget)
	return len(found), err
}
