// Package regularfile opens and reads a file at a path someone else may
// have put something at: an owner's policy, its tests, a CA bundle in a
// workspace, a pinned binary. It never blocks on what the path leads to
// (a FIFO opens at once, with O_NONBLOCK, and is refused), decides what
// the path is by the descriptor it reads (a stat before the open could
// be answered by one file and the read by another), and reads at most a
// bound: a file that holds more is refused, not cut. Its errors are
// *fs.PathError, as the os package's are: the path, and a cause without
// it (ErrNotRegular, ErrTooLarge, or the system's).
package regularfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is returned for a path that leads to anything but a
// regular file: a FIFO, a socket, a device, a directory.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned for a file that holds more than the bound.
var ErrTooLarge = errors.New("file too large")

// Open opens the regular file path leads to (symbolic links followed) for
// reading, and returns it with what its descriptor says it is. The file
// is read in blocking mode as any file: O_NONBLOCK changes nothing for a
// regular file, and only a regular file is returned.
func Open(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, fi, nil
}

// Read returns the content of the regular file path leads to, refusing
// one that holds more than max bytes by the time it is read (it may grow
// after it was measured).
func Read(path string, max int64) ([]byte, error) {
	f, _, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := new(bytes.Buffer)
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (larger than %d bytes)", ErrTooLarge, max)}
	}
	return buf.Bytes(), nil
}

// kind names what a non-regular file is, for the refusal.
func kind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return "mode " + m.Type().String()
	}
}
