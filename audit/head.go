package audit

import (
	"fmt"
	"path/filepath"
)

// Head is a position of the chain: the Seq of a record and the hex SHA-256
// of its whole line (what the next line's Prev holds; Report.Last for the
// last line). The log alone cannot tell that lines were cut off its end:
// a Head kept elsewhere can (CheckHead).
type Head struct {
	Seq  uint64
	Hash string
}

// Head returns the chain's durable head: the last line known to be on
// disk (fsynced), never a line AppendPending wrote and nothing has synced
// yet. A head recorded elsewhere must never be ahead of what survives a
// power cut.
func (l *Log) Head() Head {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}

// SetAnchor sets the function told the durable head when it is worth
// recording elsewhere without a caller asking: after a file was closed at
// rotation, and at Close. It is called without the log's lock held, after
// the append or the Close that made the head durable. The server records
// the head in its state file (store.DB.SetAuditHead).
func (l *Log) SetAnchor(f func(Head)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.anchor = f
}

// HeadError reports a log that does not reach, or does not hold, a head
// recorded earlier: records were cut off its end, or it was rewritten from
// there on. It wraps ErrCorrupt.
type HeadError struct {
	Recorded Head // the head recorded elsewhere
	Last     Head // the log's last record (Seq 0 when the log is empty)
	// Found is the hash of the line at Recorded.Seq, when the log has one.
	Found string
}

func (e *HeadError) Error() string {
	if e.Last.Seq < e.Recorded.Seq {
		return fmt.Sprintf("audit: the log ends at record %d but its head was recorded at record %d (hash %s): "+
			"records were removed from its end", e.Last.Seq, e.Recorded.Seq, e.Recorded.Hash)
	}
	if e.Found == "" {
		return fmt.Sprintf("audit: the log has no record %d, where its head was recorded (hash %s): records were removed",
			e.Recorded.Seq, e.Recorded.Hash)
	}
	return fmt.Sprintf("audit: record %d hashes %s but the head recorded there hashes %s: the log was rewritten from there on",
		e.Recorded.Seq, e.Found, e.Recorded.Hash)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *HeadError) Unwrap() error { return ErrCorrupt }

// CheckHead checks that the log in dir still holds h: its record h.Seq
// exists and its line hashes to h.Hash. A zero h (nothing recorded) always
// holds. A log that does not is a *HeadError; one that cannot be read is
// an error too. It reads the first line of each file and the lines of the
// one file holding h.Seq, parsing only that line.
func CheckHead(dir string, h Head) error {
	if h.Seq == 0 {
		return nil
	}
	last, err := lastHead(dir)
	if err != nil {
		return err
	}
	herr := &HeadError{Recorded: h, Last: last}
	if last.Seq < h.Seq {
		return herr
	}
	found, err := lineHashAt(dir, h.Seq)
	if err != nil {
		return err
	}
	if found != h.Hash {
		herr.Found = found
		return herr
	}
	return nil
}

// lastHead is the head of the newest non-empty file's last line.
func lastHead(dir string) (Head, error) {
	files, err := logFiles(dir)
	if err != nil {
		return Head{}, err
	}
	for i := len(files) - 1; i >= 0; i-- {
		rec, h, ok, err := lastRecord(filepath.Join(dir, files[i].name))
		if err != nil {
			return Head{}, err
		}
		if ok {
			return Head{Seq: rec.Seq, Hash: h}, nil
		}
	}
	return Head{}, nil
}

// lineHashAt returns the hash of the line of record seq ("" when no file
// holds it).
func lineHashAt(dir string, seq uint64) (string, error) {
	found := ""
	err := lineOf(dir, seq, func(b []byte) { found = hashHex(b) })
	return found, err
}

// lineOf calls fn with the line of record seq, checked on its own, if a
// file holds it. Lines are numbered by seq within a file, from its first
// record's; the line found must say it is seq.
func lineOf(dir string, seq uint64, fn func(line []byte)) error {
	files, err := logFiles(dir)
	if err != nil {
		return err
	}
	for i := len(files) - 1; i >= 0; i-- {
		path := filepath.Join(dir, files[i].name)
		first, ok, err := firstRecord(path)
		if err != nil {
			return err
		}
		if !ok || first.Seq > seq {
			continue
		}
		want := seq - first.Seq + 1 // its line number in this file
		return eachLine(path, func(n int, b []byte) error {
			if uint64(n) < want {
				return nil
			}
			rec, _, err := parseLine(b)
			if err != nil {
				return &BrokenError{File: path, Line: n, Why: err.Error()}
			}
			if rec.Seq != seq {
				return &BrokenError{File: path, Line: n, Why: fmt.Sprintf("sequence broken: seq %d where %d belongs", rec.Seq, seq)}
			}
			fn(b)
			return errStop
		})
	}
	return nil
}
