package bridge

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// fileID identifies a file: which one a name led to.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)} }

// retryEINTR runs a system call again when a signal interrupted it.
func retryEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

var (
	// errGone: the file is no longer there (its writer took it back).
	errGone = errors.New("file is gone")
	// errChanged: the name led to another file between two looks at it.
	errChanged = errors.New("file was replaced while it was being read")
)

// badFile is a file the bridge refuses to read; the reason is safe to tell
// the sandbox and to log.
type badFile struct{ reason string }

func (b *badFile) Error() string { return b.reason }

// readFile reads the file name in the directory dirFd, at most max bytes,
// without following a symbolic link, blocking on a FIFO or reading anything
// that is not a regular file with a single link. It returns what the name
// led to (to delete that and nothing else later). Errors: errGone; a
// *badFile (id is then what the name led to); anything else is transient.
func readFile(dirFd int, name string, max int) (data []byte, id fileID, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, id, errGone
		}
		return nil, id, fmt.Errorf("stat: %w", err)
	}
	id = idOf(&st)
	// Look before opening, so that nothing but a regular file is opened.
	if err := checkFile(&st, max); err != nil {
		return nil, id, err
	}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, id, errGone
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK):
		return nil, id, errChanged // a symbolic link now: it was a file a moment ago
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return nil, id, &badFile{"is not readable"}
	case err != nil:
		return nil, id, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	// Look again at what was opened: that is what counts.
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, id, fmt.Errorf("stat: %w", err)
	}
	if idOf(&st) != id {
		return nil, id, errChanged
	}
	if err := checkFile(&st, max); err != nil {
		return nil, id, err
	}
	data = make([]byte, 0, min(st.Size, int64(max))+1)
	buf := make([]byte, 64<<10)
	for len(data) <= max {
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf[:min(len(buf), max+1-len(data))]) })
		if err != nil {
			return nil, id, fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	if len(data) > max {
		return nil, id, &badFile{fmt.Sprintf("is larger than %d bytes", max)}
	}
	return data, id, nil
}

// checkFile refuses anything but a regular file with one link and at most
// max bytes.
func checkFile(st *unix.Stat_t, max int) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return &badFile{"is a symbolic link"}
	case unix.S_IFDIR:
		return &badFile{"is a directory"}
	default:
		return &badFile{"is not a regular file"}
	}
	if st.Nlink > 1 {
		return &badFile{"has more than one link (a hard link)"}
	}
	if st.Size > int64(max) {
		return &badFile{fmt.Sprintf("is larger than %d bytes", max)}
	}
	return nil
}

// errTargetDir: a directory stands where an answer goes.
var errTargetDir = errors.New("a directory stands in the answer's place")

// writeFile writes data to name in the directory dirFd atomically: to a
// fresh temporary file (mode 0600) that is synced and renamed over name,
// replacing whatever name was (a symbolic link included) without writing
// through it, then syncs the directory. A directory named name is left
// alone (errTargetDir).
func writeFile(dirFd int, name string, data []byte) (err error) {
	var tmp string
	var fd int
	for range 3 {
		tmp = tempPrefix + rand.Text()
		fd, err = retryEINTR(func() (int, error) {
			return unix.Openat(dirFd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		})
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = unix.Unlinkat(dirFd, tmp, 0)
		}
	}()
	for rest := data; len(rest) > 0; {
		n, werr := retryEINTR(func() (int, error) { return unix.Write(fd, rest) })
		if werr != nil {
			unix.Close(fd)
			return fmt.Errorf("write: %w", werr)
		}
		rest = rest[n:]
	}
	if _, err := retryEINTR(func() (int, error) { return 0, unix.Fsync(fd) }); err != nil {
		unix.Close(fd)
		return fmt.Errorf("sync: %w", err)
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := unix.Renameat(dirFd, tmp, dirFd, name); err != nil {
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return errTargetDir
		}
		return fmt.Errorf("rename: %w", err)
	}
	if _, err := retryEINTR(func() (int, error) { return 0, unix.Fsync(dirFd) }); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// unlinkSame deletes name from the directory dirFd if it still leads to
// the file id (a file put there since is left for the next scan). A
// directory is removed only when empty.
func unlinkSame(dirFd int, name string, id fileID) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if idOf(&st) != id {
		return nil
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dirFd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// isDirAt reports whether name in dirFd is a directory (not following a
// symbolic link).
func isDirAt(dirFd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// removeStaleTemps removes the bridge's own temporary files older than
// staleTemp from the directory dirFd (names only are read).
func removeStaleTemps(dirFd int, now time.Time) (removed int, err error) {
	err = listDir(dirFd, "responses", func(name string) {
		if !strings.HasPrefix(name, tempPrefix) {
			return
		}
		var st unix.Stat_t
		if unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return
		}
		if time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)).After(now.Add(-staleTemp)) {
			return
		}
		if unix.Unlinkat(dirFd, name, 0) == nil {
			removed++
		}
	})
	return removed, err
}

// shownName is a name from the folder made fit for a log line: at most 80
// bytes, non-printable characters replaced.
func shownName(name string) string {
	const max = 80
	cut := name
	if len(cut) > max {
		cut = cut[:max]
		for len(cut) > 0 && !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
	}
	out := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, cut)
	if len(cut) < len(name) {
		out += "..."
	}
	return out
}
