package sandbox

import (
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// gitWalk says how the scan walks a directory: like any other, or as (or
// on the way to) a git directory the rule may write.
type gitWalk int

const (
	inTree      gitWalk = iota // a directory like any other
	inGitDir                   // a git directory the rule may write (Writable ".git")
	inModules                  // its modules/, or below: submodules' git directories, at any depth
	inWorktrees                // its worktrees/: each directory a worktree's admin directory
)

// gitData are the entries of a git directory that hold git's data alone
// (its object store, references and reflogs, git-lfs's and git-annex's
// object stores): the scan does not walk them. Everything else in a git
// directory the rule may write is walked like the rest of the workspace.
var gitData = map[string]bool{"objects": true, "refs": true, "logs": true, "lfs": true, "annex": true}

// gitDir adds a git directory (a .git, or a directory git would take for
// one: a bare repository): read-only as a whole, or, when the rule may
// write git data, read-write and walked (inGitDir), so that nothing
// planted in it hides there. The paths its configuration names inside
// the workspace (core.hooksPath, include.path) are protected too.
func (s *scanner) gitDir(parent *os.File, e dirent, rel string, q queued) (*queued, error) {
	rw := slices.Contains(s.writable, GitName)
	if err := s.add(parent, e, rel, kindGitDir, rw); err != nil {
		return nil, err
	}
	dir, err := s.openSub(parent, e.name, rel)
	if err != nil || dir == nil {
		return nil, s.fail(err)
	}
	err = s.configPaths(dir, rel)
	dir.Close()
	if err := s.fail(err); err != nil || !rw {
		return nil, err
	}
	return s.next(rel, q, inGitDir, false)
}

// gitEntry classifies an entry of a directory walked inside a git
// directory the rule may write: its code and state entries (protected
// unless named), its data (not walked), its modules/ and worktrees/
// (walked for the git directories in them). Not done: the entry is one
// like any other, classified as such.
func (s *scanner) gitEntry(dir *os.File, e dirent, child string, q queued) (next *queued, done bool, err error) {
	if q.git == inGitDir {
		switch n := gitCodeName(e.name); {
		case n != "":
			return nil, true, s.add(dir, e, child, kindGitCode, slices.Contains(s.writable, n))
		case gitData[e.name]:
			return nil, true, nil
		case e.typ != unix.DT_DIR || e.name != "modules" && e.name != "worktrees":
			return nil, false, nil
		}
	} else if e.typ != unix.DT_DIR {
		return nil, true, nil // modules/ and worktrees/ hold git directories, nothing else
	}
	isGit, ok, err := s.probe(dir, e, child)
	if err != nil || !ok {
		return nil, true, err
	}
	how := inModules
	switch {
	case q.git == inGitDir && e.name == "worktrees":
		how = inWorktrees
	case isGit || q.git == inWorktrees:
		how = inGitDir
	}
	next, err = s.next(child, q, how, false)
	return next, true, err
}

// isGitDir reports whether dir may be taken by git for a git directory
// (a bare repository, a submodule's): git's own test (a HEAD, objects/ and
// refs/, through links and commondir) widened, so nothing git accepts is
// missed: a HEAD of any kind beside objects, refs or commondir of any kind.
func isGitDir(dir *os.File) bool {
	var st unix.Stat_t
	has := func(name string) bool {
		return unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return has("HEAD") && (has("objects") || has("refs") || has("commondir"))
}
