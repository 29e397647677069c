package audit

import (
	"errors"
	"fmt"
	"os"
)

// probeSize is what Check writes: about one record's line.
const probeSize = 4 << 10

// probePattern names Check's probe files; the log ignores them (they are
// not log file names), and Check removes each at once.
const probePattern = ".ready-probe-*"

// Check reports whether the log can take a record now: it is open, a
// failed write of an earlier Append has been cut off again (Check retries
// that, as the next Append would), and the directory accepts a new file
// and a synced write of about one record (a full disk or a directory the
// server may no longer write fails here, before a request does). It
// writes and removes a small probe file in the directory. Errors wrap
// ErrClosed or ErrBroken.
func (l *Log) Check() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	err := l.recover()
	if err == nil && l.tree != nil {
		l.tree.flush() // hashes a full disk held back
		err = l.tree.err
	}
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBroken, err)
	}
	if err := probe(l.dir); err != nil {
		return fmt.Errorf("%w: %w", ErrBroken, err)
	}
	return nil
}

// probe creates, writes, syncs and removes a file in dir.
func probe(dir string) error {
	f, err := os.CreateTemp(dir, probePattern)
	if err != nil {
		return err
	}
	_, werr := f.Write(make([]byte, probeSize))
	if werr == nil {
		werr = f.Sync()
	}
	return errors.Join(werr, f.Close(), os.Remove(f.Name()))
}
