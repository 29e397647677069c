package audit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Filter selects records by exact principal, rule and refusal code; an
// empty field selects any, and the fields combine with AND.
type Filter struct {
	Principal, Rule, Code string
}

// Match reports whether r passes every field f sets.
func (f Filter) Match(r Record) bool {
	return (f.Principal == "" || r.Principal == f.Principal) &&
		(f.Rule == "" || r.Rule == f.Rule) &&
		(f.Code == "" || r.Code == f.Code)
}

// Follow calls fn for every record the log in dir holds after the one
// with Seq after, oldest first, as they are written: it reads on into
// the next file when one begins (rotation, a new month) and looks for
// more every interval. It returns nil when ctx ends, or the first error
// of fn or of a read (a damaged line is a *BrokenError). A line not yet
// whole (a write in progress) is read once its newline is there.
func Follow(ctx context.Context, dir string, after uint64, every time.Duration, fn func(Record) error) error {
	f := NewFollower(dir, after)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := f.ReadNew(func(r Record, _ []byte) error { return fn(r) }); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Follower reads a log's records as they are written, each once, oldest
// first, across files (what Follow loops on). It is not safe for
// concurrent use.
type Follower struct {
	dir   string
	file  string // the file read from
	off   int64  // the bytes of it read (whole lines only)
	after uint64 // the last Seq passed on
}

// NewFollower reads the log in dir from the record after the one with Seq
// after.
func NewFollower(dir string, after uint64) *Follower {
	return &Follower{dir: dir, after: after}
}

// ReadNew calls fn with every whole record written since the last call
// (the first: since the record after), in this file and those begun
// after it, with its line as written (without its '\n'; valid during the
// call only). A record fn returns an error for counts as read: the next
// call goes on after it. A damaged line is a *BrokenError.
func (f *Follower) ReadNew(fn func(rec Record, line []byte) error) error {
	files, err := logFiles(f.dir)
	if err != nil {
		return err
	}
	if f.file == "" {
		start, err := f.startFile(files)
		if err != nil || start < 0 {
			return err
		}
		f.file = files[start].name
	}
	i := slices.IndexFunc(files, func(lf logFile) bool { return lf.name == f.file })
	if i < 0 {
		return fmt.Errorf("audit: follow: %s is gone", f.file)
	}
	for _, lf := range files[i:] {
		if lf.name != f.file { // the next file began: the one before is whole
			f.file, f.off = lf.name, 0
		}
		if err := f.readFile(fn); err != nil {
			return err
		}
	}
	return nil
}

// startFile is the index of the file holding the record after f.after:
// the newest whose first record is not past it (-1 without files).
func (f *Follower) startFile(files []logFile) (int, error) {
	for i := len(files) - 1; i > 0; i-- {
		seq, ok, err := firstSeq(filepath.Join(f.dir, files[i].name))
		if err != nil {
			return 0, err
		}
		if ok && seq <= f.after+1 {
			return i, nil
		}
	}
	if len(files) == 0 {
		return -1, nil
	}
	return 0, nil // the record after f.after is in the oldest, or gone
}

// firstSeq is the Seq of the first record of the file at path; ok is
// false for an empty file.
func firstSeq(path string) (seq uint64, ok bool, err error) {
	err = eachRecord(path, func(r Record) error {
		seq, ok = r.Seq, true
		return errStop
	})
	var broken *BrokenError
	if errors.As(err, &broken) && broken.Torn && broken.Line == 1 {
		return 0, false, nil // its first line is being written
	}
	return seq, ok, err
}

// readFile reads f.file from f.off up to its last whole line.
func (f *Follower) readFile(fn func(Record, []byte) error) error {
	path := filepath.Join(f.dir, f.file)
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer file.Close()
	if _, err := file.Seek(f.off, io.SeekStart); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	r := bufio.NewReaderSize(file, 64<<10)
	var buf []byte
	for {
		var complete bool
		buf, complete, err = readLine(r, buf[:0])
		switch {
		case err == io.EOF || (err == nil && !complete):
			return nil
		case errors.Is(err, errLineTooLong):
			return &BrokenError{File: path, Why: "line longer than 16 MiB"}
		case err != nil:
			return fmt.Errorf("audit: %s: %w", path, err)
		}
		rec, _, err := parseLine(buf)
		if err != nil {
			return &BrokenError{File: path, Why: fmt.Sprintf("at byte %d: %v", f.off, err)}
		}
		f.off += int64(len(buf)) + 1
		if rec.Seq <= f.after {
			continue
		}
		f.after = rec.Seq
		if err := fn(rec, buf); err != nil {
			return err
		}
	}
}
