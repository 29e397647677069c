package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// errStop ends an eachLine walk early without error.
var errStop = errors.New("stop")

// eachLine calls fn for every line of the file at path (1-based line
// number, bytes without '\n'; b is only valid during the call). A final
// line without '\n' or a line longer than maxLine is reported as a
// *BrokenError. fn returning errStop ends the walk with a nil error.
func eachLine(path string, fn func(line int, b []byte) error) error {
	return eachLineUpTo(path, -1, fn)
}

// eachLineUpTo is eachLine over the file's first limit bytes (all of it
// when limit < 0).
func eachLineUpTo(path string, limit int64, fn func(line int, b []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	var in io.Reader = f
	if limit >= 0 {
		in = io.LimitReader(f, limit)
	}
	r := bufio.NewReaderSize(in, 64<<10)
	var buf []byte
	for n := 1; ; n++ {
		var complete bool
		buf, complete, err = readLine(r, buf[:0])
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, errLineTooLong):
			return &BrokenError{File: path, Line: n, Why: "line longer than 16 MiB"}
		case err != nil:
			return fmt.Errorf("audit: %s: %w", path, err)
		case !complete:
			return &BrokenError{File: path, Line: n, Why: "torn write: last line has no trailing newline", Torn: true}
		}
		if err := fn(n, buf); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine appends the next line (without '\n') to buf. complete is false
// for a final line that has no '\n'. It returns io.EOF when no bytes remain.
func readLine(r *bufio.Reader, buf []byte) (line []byte, complete bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxLine+1 || (err != nil && len(buf) > maxLine) {
			return nil, false, errLineTooLong
		}
		switch {
		case err == nil:
			return buf[:len(buf)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(buf) > 0:
			return buf, false, nil
		default:
			return nil, false, err
		}
	}
}

// eachRecord calls fn for every record of the file at path, checking each
// line on its own (not the chain).
func eachRecord(path string, fn func(Record) error) error {
	return eachRecordUpTo(path, -1, fn)
}

func eachRecordUpTo(path string, limit int64, fn func(Record) error) error {
	return eachLineUpTo(path, limit, func(n int, b []byte) error {
		rec, _, err := parseLine(b)
		if err != nil {
			return &BrokenError{File: path, Line: n, Why: err.Error()}
		}
		return fn(rec)
	})
}

// Tail returns the last n records across all month files, oldest first.
// Each returned line is checked on its own; a damaged line is an error.
func Tail(dir string, n int) ([]Record, error) {
	return tail(dir, n, "", -1, nil)
}

// TailMatching is Tail of the records match accepts (all when match is
// nil).
func TailMatching(dir string, n int, match func(Record) bool) ([]Record, error) {
	return tail(dir, n, "", -1, match)
}

// Tail returns the last n records the log had written when it was called,
// oldest first, while appends go on: the newest file is read only up to
// its last whole line at that moment (a concurrent write is never read
// half done), and files begun since are not read.
func (l *Log) Tail(n int) ([]Record, error) {
	l.mu.Lock()
	newest, size := l.file.fileName(), l.size
	if l.f == nil {
		newest = ""
	}
	l.mu.Unlock()
	if newest == "" {
		return nil, nil
	}
	return tail(l.dir, n, newest, size, nil)
}

// tail returns the last n records of the files up to newest (all, when
// newest is ""), reading newest only up to size bytes (all when size < 0),
// that match accepts (all when match is nil).
func tail(dir string, n int, newest string, size int64, match func(Record) bool) ([]Record, error) {
	if n <= 0 {
		return nil, nil
	}
	files, err := logFiles(dir)
	if err != nil {
		return nil, err
	}
	if newest != "" {
		i := slices.IndexFunc(files, func(f logFile) bool { return f.fileName() == newest })
		if i < 0 {
			return nil, fmt.Errorf("audit: tail: %s is missing", newest)
		}
		files = files[:i+1]
	}
	var out []Record
	for i := len(files) - 1; i >= 0 && len(out) < n; i-- {
		limit := int64(-1)
		if files[i].fileName() == newest {
			limit = size
		}
		last, err := lastRecords(filepath.Join(dir, files[i].name), n-len(out), limit, match)
		if err != nil {
			return nil, err
		}
		out = append(last, out...)
	}
	return out, nil
}

// lastRecords returns the last n (> 0) records of the file at path that
// match accepts (all when nil), oldest first.
func lastRecords(path string, n int, limit int64, match func(Record) bool) ([]Record, error) {
	ring := make([]Record, 0, min(n, 1024))
	next := 0 // index of the oldest record once the ring is full
	err := eachRecordUpTo(path, limit, func(r Record) error {
		switch {
		case match != nil && !match(r):
			return nil
		case len(ring) < n:
			ring = append(ring, r)
			return nil
		}
		ring[next] = r
		next = (next + 1) % n
		return nil
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(ring[next:], ring[:next]), nil
}

// Find returns the record with the given ID, or an error wrapping
// ErrNotFound.
func Find(dir, id string) (Record, error) {
	var found Record
	err := scan(dir, func(r Record) error {
		if r.ID != id {
			return nil
		}
		found = r
		return errStop
	})
	if err != nil {
		return Record{}, err
	}
	if found.ID == "" {
		return Record{}, fmt.Errorf("audit: id %q: %w", id, ErrNotFound)
	}
	return found, nil
}

// FindRequest returns every record with the given request ID, oldest
// first; when there is none, those of a relayed request whose descriptor
// had that id (RelayID: a sandbox chooses it, so it never adds records to
// an execution's own); else an error wrapping ErrNotFound.
func FindRequest(dir, requestID string) ([]Record, error) {
	var out, relayed []Record
	err := scan(dir, func(r Record) error {
		switch {
		case r.RequestID == requestID:
			out = append(out, r)
		case r.RelayID == requestID:
			relayed = append(relayed, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		out = relayed
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("audit: request %q: %w", requestID, ErrNotFound)
	}
	return out, nil
}

// scan calls fn for every record in dir, oldest first, until fn returns
// errStop.
func scan(dir string, fn func(Record) error) error {
	files, err := logFiles(dir)
	if err != nil {
		return err
	}
	stopped := false
	for _, lf := range files {
		err := eachRecord(filepath.Join(dir, lf.name), func(r Record) error {
			err := fn(r)
			stopped = err == errStop
			return err
		})
		if err != nil || stopped {
			return err
		}
	}
	return nil
}

// Verify checks the whole log in dir: every line on its own (strict JSON,
// hash last, self-hash, ID) and the chain (Prev and Seq) across all month
// files in order. The first bad line is reported as a *BrokenError; the
// Report then counts the lines verified before it. An empty directory
// verifies with 0 lines; a missing one is an error.
func Verify(dir string) (Report, error) { return verify(dir, nil, 0) }

// verify is Verify, also calling each (when set) with every line that
// verified, in order. Lines are parsed on every core (parsing is most of
// the cost) and checked against the chain in order (verifyPipeline). The
// first trusted lines are neither parsed nor checked against the chain,
// only hashed and counted: the caller vouches for them otherwise (each
// checks them against a signed root: VerifyCheckpoint).
func verify(dir string, each func(line []byte) error, trusted int64) (Report, error) {
	files, err := logFiles(dir)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Files: len(files), Last: zeroHash}
	var seq uint64
	err = verifyPipeline(dir, files, trusted, func(path string, n int, b []byte, parsed bool, rec Record, h string, perr error) error {
		switch {
		case !parsed:
			rec.Seq, h = seq+1, hashHex(b)
		case perr != nil:
			return &BrokenError{File: path, Line: n, Why: perr.Error()}
		case rec.Prev != rep.Last:
			return &BrokenError{File: path, Line: n, Why: "chain broken: prev does not match the line before (a line was removed, inserted or reordered)"}
		case rec.Seq != seq+1:
			return &BrokenError{File: path, Line: n, Why: fmt.Sprintf("sequence broken: seq %d follows %d", rec.Seq, seq)}
		}
		seq, rep.Last = rec.Seq, h
		rep.Lines++
		if each != nil {
			return each(b)
		}
		return nil
	})
	return rep, err
}
