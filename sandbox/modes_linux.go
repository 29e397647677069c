package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The modes a command leaves are the owner's to give (docs/sandbox.md,
// "Modes"): the seccomp filter refuses chmod's widening, and after the
// command every directory of a writable root, and every other entry of a
// directory, that changed while it ran (change time not before the scan
// before it) loses write access for others, the sticky, setuid and setgid
// bits, and write access for the group unless the server's umask gives
// it. So no other local user can plant files there, or change them,
// between two commands, for the next scan to take for the owner's.

// normalise restores the mode of the entry name of dir (rel in the root)
// after the command, recording it in fixed.
func (s *scanner) normalise(dir *os.File, e dirent, rel string) {
	if e.typ == unix.DT_LNK {
		return
	}
	var st unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return // gone
	}
	s.fixMode(dir, e.name, rel, st)
}

// fixMode sets the mode of name in dir to what the rule above allows, if
// it differs, recording rel.
func (s *scanner) fixMode(dir *os.File, name, rel string, st unix.Stat_t) {
	want := s.wantMode(st)
	if want == st.Mode&0o7777 {
		return
	}
	if err := chmodNoFollow(dir, name, want, st); err != nil {
		s.errs = errorsJoin(s.errs, rel, err)
		return
	}
	s.fixed = append(s.fixed, rel)
}

// wantMode is the mode an entry keeps after the command.
func (s *scanner) wantMode(st unix.Stat_t) uint32 {
	mode := st.Mode & 0o7777
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFLNK || !s.changedSince(st) {
		return mode // a link has no mode of its own; unchanged entries are the owner's
	}
	mode &^= 0o002 | unix.S_ISVTX | unix.S_ISUID | unix.S_ISGID
	if !s.groupWrite {
		mode &^= 0o020
	}
	return mode
}

// changedSince reports whether an entry changed since the scan before
// the command (always, when that is unknown).
func (s *scanner) changedSince(st unix.Stat_t) bool {
	return s.since.IsZero() || !time.Unix(st.Ctim.Unix()).Before(s.since)
}

// chmodNoFollow changes the mode of name in dir, never through a link:
// the entry is opened O_PATH without following, checked to be the one
// scanned, and changed through its descriptor.
func chmodNoFollow(dir *os.File, name string, mode uint32, was unix.Stat_t) error {
	f, err := openAt(dir, name, unix.O_PATH)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := statFD(f)
	if err != nil {
		return err
	}
	if st.Dev != was.Dev || st.Ino != was.Ino || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return errChanged
	}
	return chmodFD(f, mode)
}

// chmodFD changes the mode of f's file, f opened O_PATH or not: chmod
// through /proc/self/fd follows the descriptor's own link to the very
// inode opened (fchmod refuses an O_PATH descriptor).
func chmodFD(f *os.File, mode uint32) error {
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), mode)
}

// madeByCommand reports whether the directory rel was made while the
// command ran (its birth time, or where the file system keeps none, its
// change time, not before since).
func (s *scanner) madeByCommand(rel string) bool {
	parent := s.root
	if p := path.Dir(rel); p != "." {
		f, err := openDeep(s.root, p, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return false
		}
		defer f.Close()
		parent = f
	}
	var stx unix.Statx_t
	if unix.Statx(int(parent.Fd()), path.Base(rel), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME|unix.STATX_CTIME, &stx) != nil {
		return false
	}
	t := stx.Ctime
	if stx.Mask&unix.STATX_BTIME != 0 {
		t = stx.Btime
	}
	return !time.Unix(t.Sec, int64(t.Nsec)).Before(s.since)
}

// groupWritable reports whether the server's umask lets files be group
// writable (read once from /proc/self/status; umask(2) cannot be read
// without being set).
var groupWritable = sync.OnceValue(func() bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return err == nil && mask&0o020 == 0
		}
	}
	return false
})

// errChanged reports an entry replaced between its scan and a change.
var errChanged = errors.New("changed while being checked")

// errorsJoin adds "rel: err" to errs.
func errorsJoin(errs error, rel string, err error) error {
	return errors.Join(errs, fmt.Errorf("%s: %w", rel, err))
}
