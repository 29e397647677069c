package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Log appends records to the audit directory. It is safe for concurrent use.
type Log struct {
	dir string
	now func() time.Time

	mu      sync.Mutex
	f       *os.File // newest month file, nil until the first file exists
	month   string   // YYYY-MM of f
	seq     uint64   // Seq of the last line on disk
	head    string   // hex SHA-256 of the last line on disk
	broken  error    // first write/sync failure; set means every Append fails
	pending bool     // lines written to f but not yet fsynced
	closed  bool
}

// Open opens the audit log in cfg.Dir, creating the directory (0700) if
// needed. It recovers Seq and the chain head from the last line of the
// newest non-empty month file; if that line is torn or does not verify on
// its own, Open returns an error wrapping ErrCorrupt. Open does not verify
// the whole chain: use Verify for that.
func Open(cfg Config) (*Log, error) {
	if cfg.Dir == "" {
		return nil, errors.New("audit: open: no directory configured")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: open: %w", err)
	}
	names, err := monthFiles(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("audit: open: %w", err)
	}
	l := &Log{dir: cfg.Dir, now: now, head: zeroHash}
	for i := len(names) - 1; i >= 0; i-- {
		rec, h, ok, err := lastRecord(filepath.Join(cfg.Dir, names[i]))
		if err != nil {
			return nil, fmt.Errorf("audit: open: %w", err)
		}
		if ok {
			l.seq, l.head = rec.Seq, h
			break
		}
	}
	if len(names) > 0 {
		newest := names[len(names)-1]
		month, _ := cutMonth(newest)
		f, err := openAppend(filepath.Join(cfg.Dir, newest))
		if err != nil {
			return nil, fmt.Errorf("audit: open: %w", err)
		}
		l.f, l.month = f, month
	}
	return l, nil
}

// lastRecord parses the last line of the file at path. ok is false if the
// file is empty.
func lastRecord(path string) (rec Record, lineHash string, ok bool, err error) {
	var last []byte
	n := 0
	err = eachLine(path, func(line int, b []byte) error {
		last, n = append(last[:0], b...), line
		return nil
	})
	if err != nil || n == 0 {
		return Record{}, "", false, err
	}
	rec, lineHash, err = parseLine(last)
	if err != nil {
		return Record{}, "", false, &BrokenError{File: path, Line: n, Why: err.Error()}
	}
	return rec, lineHash, true, nil
}

func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
}

// Append writes r as the next line and fsyncs the file before returning,
// so the record (and every line written before it) is durable. It fills
// ID, Seq, Time, Prev and Hash and returns the completed record. r.Event
// must be set.
//
// A failure before anything is written (cancelled ctx, encoding, creating a
// new month file) leaves the Log usable. A failed write or sync marks the
// Log broken: this and every later Append return an error wrapping
// ErrBroken and the original error, until the log is reopened.
func (l *Log) Append(ctx context.Context, r Record) (Record, error) {
	return l.append(ctx, r, true)
}

// AppendPending writes r like Append but does not fsync: the line is in the
// file (it survives a crash of this process) and becomes durable with the
// next Append, or when the log is closed. The server uses it for the
// decision that precedes a command, whose result line follows with an
// fsync before the caller gets its answer.
func (l *Log) AppendPending(ctx context.Context, r Record) (Record, error) {
	return l.append(ctx, r, false)
}

func (l *Log) append(ctx context.Context, r Record, durable bool) (Record, error) {
	if r.Event == "" {
		return Record{}, errors.New("audit: append: record has no event")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return Record{}, fmt.Errorf("audit: append: %w", ErrClosed)
	case l.broken != nil:
		return Record{}, fmt.Errorf("audit: append: %w: %w", ErrBroken, l.broken)
	}
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("audit: append: %w", err)
	}
	r.Seq = l.seq + 1
	r.ID = formatID(r.Seq)
	r.Time = l.now().UTC()
	r.Prev = l.head
	r.Hash = ""
	line, selfHash, err := encodeLine(r)
	if err != nil {
		return Record{}, fmt.Errorf("audit: append: %w", err)
	}
	f, err := l.fileFor(r.Time)
	if err != nil {
		return Record{}, fmt.Errorf("audit: append: %w", err)
	}
	if err := l.write(f, line, durable); err != nil {
		l.broken = err
		return Record{}, fmt.Errorf("audit: append: %w: %w", ErrBroken, err)
	}
	l.seq, l.head = r.Seq, hashHex(line[:len(line)-1])
	r.Hash = selfHash
	return r, nil
}

// write appends line to f, fsyncing it (and any pending lines) when durable.
// Must be called with l.mu held.
func (l *Log) write(f *os.File, line []byte, durable bool) error {
	if _, err := f.Write(line); err != nil {
		return err
	}
	if !durable {
		l.pending = true
		return nil
	}
	if err := f.Sync(); err != nil {
		return err
	}
	l.pending = false
	return nil
}

// fileFor returns the file a record made at t goes to: the file for t's
// month, or the current file if t's month is not later (the clock never
// makes the log reopen an older month). Must be called with l.mu held.
func (l *Log) fileFor(t time.Time) (*os.File, error) {
	month := t.Format(monthFmt)
	if l.f != nil && month <= l.month {
		return l.f, nil
	}
	f, err := openAppend(filepath.Join(l.dir, month+fileExt))
	if err != nil {
		return nil, err
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	if l.f != nil {
		if l.pending {
			if err := l.f.Sync(); err != nil {
				_ = f.Close()
				l.broken = err
				return nil, fmt.Errorf("%w: %w", ErrBroken, err)
			}
			l.pending = false
		}
		_ = l.f.Close()
	}
	l.f, l.month = f, month
	return f, nil
}

// syncDir makes a newly created file's directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// Close closes the log. Later Appends fail with ErrClosed. Closing twice is
// a no-op.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	var syncErr error
	if l.pending {
		syncErr = l.f.Sync()
	}
	if err := errors.Join(syncErr, l.f.Close()); err != nil {
		return fmt.Errorf("audit: close: %w", err)
	}
	return nil
}
