package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"coily.dev/coily/atomicfile"
)

// DefaultMaxFileSize is the size at which a log file is closed and the
// next one begun (the chain continues across files).
const DefaultMaxFileSize = 64 << 20

// Log appends records to the audit directory. It is safe for concurrent use.
type Log struct {
	dir        string
	host       string
	now        func() time.Time
	maxSize    int64
	checkpoint func() map[string]string
	anchor     func(Head) // SetAnchor

	mu     sync.Mutex
	f      *os.File // newest file, nil until the first file exists
	file   logFile  // its name, month and part
	size   int64    // bytes of whole lines in f (a failed write is cut back to it)
	seq    uint64   // Seq of the last line on disk
	head   string   // hex SHA-256 of the last line on disk
	broken error    // the last write/sync failure, until a retry succeeds
	// durable is the last line known to be synced (Head).
	durable Head
	// pending is set when lines were written to f but not yet fsynced.
	pending bool
	// rotated is set when an append closed a file, until append tells
	// the anchor.
	rotated bool
	closed  bool
	tree    *tree // the Merkle tree's hash file (tree.go)
	// notify is told each record made durable (SetNotify).
	notify func(Record)
}

// Open opens the audit log in cfg.Dir, creating the directory (0700) if
// needed. It recovers Seq and the chain head from the last line of the
// newest non-empty file; if that line is torn or does not verify on its
// own, Open returns an error wrapping ErrCorrupt (a *BrokenError; Torn
// says whether Repair can mend it). It syncs the file holding that line
// (an earlier run may have died before it did), so Head is durable from
// the start. Open does not verify the whole chain: use Verify for that.
func Open(cfg Config) (*Log, error) {
	if cfg.Dir == "" {
		return nil, errors.New("audit: open: no directory configured")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	maxSize := cfg.MaxFileSize
	if maxSize <= 0 {
		maxSize = DefaultMaxFileSize
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: open: %w", err)
	}
	files, err := logFiles(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("audit: open: %w", err)
	}
	l := &Log{dir: cfg.Dir, host: cfg.Host, now: now, head: zeroHash, maxSize: maxSize, checkpoint: cfg.Checkpoint}
	var lastLine []byte
	for i := len(files) - 1; i >= 0; i-- {
		path := filepath.Join(cfg.Dir, files[i].name)
		rec, h, line, err := lastRecordLine(path)
		if err != nil {
			return nil, fmt.Errorf("audit: open: %w", err)
		}
		if line != nil {
			lastLine = line
			if err := syncFile(path); err != nil {
				return nil, fmt.Errorf("audit: open: %w", err)
			}
			l.seq, l.head = rec.Seq, h
			if l.host == "" {
				l.host = rec.Host // a repair or a rebuild writes as the host the log is
			}
			break
		}
	}
	l.durable = Head{Seq: l.seq, Hash: l.head}
	if !cfg.noTree {
		if l.tree, err = openTree(cfg.Dir, int64(l.seq), lastLine); err != nil {
			return nil, fmt.Errorf("audit: open: %w", err)
		}
	}
	if len(files) > 0 {
		newest := files[len(files)-1]
		f, err := openAppend(filepath.Join(cfg.Dir, newest.name))
		if err != nil {
			_ = l.tree.close()
			return nil, fmt.Errorf("audit: open: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			_ = l.tree.close()
			return nil, fmt.Errorf("audit: open: %w", err)
		}
		l.f, l.file, l.size = f, newest, fi.Size()
	}
	return l, nil
}

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// Host is the host the log's records name ("" for one host, and for no
// log at all: a nil *Log).
func (l *Log) Host() string {
	if l == nil {
		return ""
	}
	return l.host
}

// SetCheckpoint sets (or replaces) Config.Checkpoint: the server, made
// after the log, reports its state for the checkpoints.
func (l *Log) SetCheckpoint(f func() map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkpoint = f
}

// Records reports how many records the log holds (the last Seq).
func (l *Log) Records() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// lastRecord parses the last line of the file at path. ok is false if the
// file is empty.
func lastRecord(path string) (rec Record, lineHash string, ok bool, err error) {
	rec, lineHash, line, err := lastRecordLine(path)
	return rec, lineHash, line != nil, err
}

// lastRecordLine is lastRecord with the line's bytes (without '\n'), nil
// when the file is empty.
func lastRecordLine(path string) (rec Record, lineHash string, line []byte, err error) {
	var last []byte
	n := 0
	err = eachLine(path, func(line int, b []byte) error {
		last, n = append(last[:0], b...), line
		return nil
	})
	if err != nil || n == 0 {
		return Record{}, "", nil, err
	}
	rec, lineHash, err = parseLine(last)
	if err != nil {
		return Record{}, "", nil, &BrokenError{File: path, Line: n, Why: err.Error()}
	}
	return rec, lineHash, last, nil
}

// syncFile fsyncs the file at path.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
}

// Append writes r as the next line and fsyncs the file before returning,
// so the record (and every line written before it) is durable. It fills
// ID, Seq, Time, Prev and Hash and returns the completed record. r.Event
// must be set. Fields over the size caps are cut (capRecord).
//
// A failure before anything is written (cancelled ctx, encoding, creating a
// new file) leaves the Log as it was. A failed write or sync (a full disk)
// returns an error wrapping ErrBroken: what was written of the line is cut
// off again, and the next Append retries, so the log recovers by itself
// once the disk has room. No record is ever chained to a line that is not
// whole on disk.
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
	out, err := l.appendLocked(ctx, r, durable)
	rotated, anchor, head, notify := l.rotated, l.anchor, l.durable, l.notify
	l.rotated = false
	l.mu.Unlock()
	if rotated && anchor != nil {
		anchor(head)
	}
	if err == nil && durable && notify != nil {
		notify(out)
	}
	return out, err
}

// appendLocked is append with l.mu held.
func (l *Log) appendLocked(ctx context.Context, r Record, durable bool) (Record, error) {
	if l.closed {
		return Record{}, fmt.Errorf("audit: append: %w", ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("audit: append: %w", err)
	}
	if err := l.recover(); err != nil {
		return Record{}, fmt.Errorf("audit: append: %w: %w", ErrBroken, err)
	}
	capRecord(&r)
	t := l.now().UTC()
	f, err := l.fileFor(t, durable)
	if err != nil {
		return Record{}, fmt.Errorf("audit: append: %w", err)
	}
	return l.writeRecord(f, r, t, durable)
}

// writeRecord chains, encodes and writes r. Must be called with l.mu held.
func (l *Log) writeRecord(f *os.File, r Record, t time.Time, durable bool) (Record, error) {
	r.Seq = l.seq + 1
	r.ID = formatID(r.Seq)
	r.Time = t
	r.Prev = l.head
	r.Host = l.host
	r.Hash = ""
	line, selfHash, err := encodeLine(r)
	if err != nil {
		return Record{}, fmt.Errorf("audit: append: %w", err)
	}
	if err := l.write(f, line, durable); err != nil {
		return Record{}, fmt.Errorf("audit: append: %w: %w", ErrBroken, err)
	}
	l.seq, l.head = r.Seq, hashHex(line[:len(line)-1])
	l.tree.add(line[:len(line)-1], durable) // after the line: never a hash for a line not written
	if durable {
		l.durable = Head{Seq: l.seq, Hash: l.head}
	}
	r.Hash = selfHash
	return r, nil
}

// write appends line to f, fsyncing it (and any pending lines) when durable.
// On failure, what was written of the line is cut off again (best effort;
// the next Append retries it). Must be called with l.mu held.
func (l *Log) write(f *os.File, line []byte, durable bool) error {
	_, err := f.Write(line)
	if err == nil && durable {
		err = f.Sync()
	}
	if err != nil {
		l.broken = err
		_ = f.Truncate(l.size)
		return err
	}
	l.size += int64(len(line))
	l.pending = !durable
	return nil
}

// recover clears a failure of an earlier write: the file is cut back to its
// last whole line and synced. Must be called with l.mu held.
func (l *Log) recover() error {
	if l.broken == nil || l.f == nil {
		l.broken = nil
		return nil
	}
	if err := l.f.Truncate(l.size); err != nil {
		return fmt.Errorf("%w (retrying after: %v)", err, l.broken)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("%w (retrying after: %v)", err, l.broken)
	}
	l.broken = nil
	l.pending = false
	l.durable = Head{Seq: l.seq, Hash: l.head}
	return nil
}

// fileFor returns the file a record made at t goes to: the current file,
// or a new one when t's month is later than the current file's (the
// clock never makes the log reopen an older month) or the current file is
// full. A new file begins with a checkpoint record when the Config asks
// for one. Must be called with l.mu held.
func (l *Log) fileFor(t time.Time, durable bool) (*os.File, error) {
	month := t.Format(monthFmt)
	var next logFile
	switch {
	case l.f != nil && month <= l.file.month && l.size < l.maxSize:
		return l.f, nil
	case l.f != nil && month <= l.file.month:
		next = logFile{month: l.file.month, part: l.file.part + 1}
	default:
		next = logFile{month: month}
	}
	next.name = next.fileName()
	f, err := openAppend(filepath.Join(l.dir, next.name))
	if err != nil {
		return nil, err
	}
	if err := atomicfile.SyncDir(l.dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
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
		_ = l.tree.sync() // derived data: Open rebuilds what a failure here loses
		// Every line of the file closed is on disk: an anchor to tell.
		l.durable, l.rotated = Head{Seq: l.seq, Hash: l.head}, true
	}
	previous := l.file.name
	l.f, l.file, l.size = f, next, fi.Size()
	if l.checkpoint != nil && l.size == 0 {
		cp := Record{Event: EventCheckpoint, Details: l.checkpoint()}
		if previous != "" {
			if cp.Details == nil {
				cp.Details = map[string]string{}
			}
			cp.Details["previous_file"] = previous
		}
		capRecord(&cp)
		if _, err := l.writeRecord(f, cp, t, durable); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// EventCheckpoint begins every log file when Config.Checkpoint is set: it
// carries the state the Config reports (the server's stop controls), so
// that reading the state back need not go further than the newest file.
const EventCheckpoint = "audit.checkpoint"

// Close closes the log. Later Appends fail with ErrClosed. Closing twice is
// a no-op. The anchor (SetAnchor) is told the durable head last.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	err := errors.Join(l.closeFile(), l.tree.close())
	anchor, head := l.anchor, l.durable
	l.mu.Unlock()
	if anchor != nil {
		anchor(head)
	}
	return err
}

// closeFile syncs what is pending and closes the newest file. Must be
// called with l.mu held.
func (l *Log) closeFile() error {
	if l.f == nil {
		return nil
	}
	var syncErr error
	if l.pending {
		syncErr = l.f.Sync()
	}
	if syncErr == nil {
		l.durable = Head{Seq: l.seq, Hash: l.head}
	}
	if err := errors.Join(syncErr, l.f.Close()); err != nil {
		return fmt.Errorf("audit: close: %w", err)
	}
	return nil
}
