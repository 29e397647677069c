package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/mod/sumdb/tlog"
)

// # The Merkle tree
//
// Every line of the log is also a leaf of an RFC 6962 Merkle tree (the
// hashing of Go's checksum database and Certificate Transparency,
// golang.org/x/mod/sumdb/tlog): record Seq is leaf Seq-1, its leaf hash
// tlog.RecordHash of the line's bytes without its '\n', across files and
// rotations. The tree of the first N records has a root hash that a signed
// checkpoint commits to (checkpoint.go); one record has an inclusion proof
// and two sizes a consistency proof, each of O(log N) hashes.
//
// The hashes are kept in TreeFile beside the log files: 32 bytes each, in
// tlog.StoredHashIndex order (the leaf of record n, then the interior
// hashes it completes), so that a proof or a root reads O(log N) of them.
// They are derived data: the lines are the truth. Append writes them right
// after the line, in the same call (AppendPending's wait in memory for the
// next Append: one write for both), but never fsyncs them per record: a
// second fsync per record would double the cost of the request
// path, and nothing is lost without it, because Open cuts the file back to
// the hashes of the lines that are on disk and recomputes whatever is
// missing or does not match the last line from the lines themselves. So a
// hash for a line that did not survive a crash is dropped, and a torn hash
// tail is mended like a torn line. The file is fsynced when a log file is
// closed at rotation, at Close, after Open rebuilt it and before every
// signature (TreeHead). Interior hashes Open does not check: before it
// signs, the notary calls SettleTree, which trusts the file only up to the
// last checkpoint signed and derives the rest from the lines, so no
// checkpoint commits to a root the lines do not give. A checker never
// trusts it: VerifyCheckpoint recomputes the tree from the lines.

// TreeFile is the name of the tree's hash file in the log's directory.
const TreeFile = "tree.hashes"

// frontier is the right edge of a tree of n leaves: h[l] is the hash of
// node (l, n>>l - 1), the last complete subtree at level l. It is all
// tlog.StoredHashes needs to add a leaf, and all tlog.TreeHash needs for
// the root, so hashes can be computed while streaming the lines.
type frontier struct {
	n int64
	h []tlog.Hash
}

// ReadHashes serves the frontier's nodes (tlog.HashReader).
func (fr *frontier) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, idx := range indexes {
		level, k := tlog.SplitStoredHashIndex(idx)
		if level >= len(fr.h) || k != fr.n>>level-1 {
			return nil, fmt.Errorf("audit: tree: hash %d (level %d, node %d) is not on the edge of a tree of %d", idx, level, k, fr.n)
		}
		out[i] = fr.h[level]
	}
	return out, nil
}

// add adds the leaf of line and returns the hashes to store for it.
func (fr *frontier) add(line []byte) ([]tlog.Hash, error) {
	hs, err := tlog.StoredHashes(fr.n, line, fr)
	if err != nil {
		return nil, err
	}
	for level, h := range hs {
		if level == len(fr.h) {
			fr.h = append(fr.h, h)
		}
		fr.h[level] = h
	}
	fr.n++
	return hs, nil
}

// root is the tree's root hash.
func (fr *frontier) root() (tlog.Hash, error) { return tlog.TreeHash(fr.n, fr) }

// recordsIn is how many records' hashes count stored hashes hold whole.
func recordsIn(count int64) int64 {
	return int64(sort.Search(int(count)+1, func(k int) bool { return tlog.StoredHashCount(int64(k)) > count })) - 1
}

// loadFrontier reads the frontier of a tree of n leaves from r.
func loadFrontier(n int64, r tlog.HashReader) (*frontier, error) {
	fr := &frontier{n: n}
	var idx []int64
	for l := 0; n>>l > 0; l++ {
		idx = append(idx, tlog.StoredHashIndex(l, n>>l-1))
	}
	hs, err := r.ReadHashes(idx)
	if err != nil {
		return nil, err
	}
	fr.h = hs
	return fr, nil
}

// hashFile reads stored hashes from a file (tlog.HashReader), and from
// tail, the hashes computed but not yet written after its first count.
type hashFile struct {
	f     io.ReaderAt
	count int64 // hashes in f
	tail  []tlog.Hash
}

func (hf hashFile) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, idx := range indexes {
		switch {
		case idx < 0 || idx >= hf.count+int64(len(hf.tail)):
			return nil, fmt.Errorf("audit: tree: hash %d is not stored (%d are)", idx, hf.count+int64(len(hf.tail)))
		case idx >= hf.count:
			out[i] = hf.tail[idx-hf.count]
		default:
			if _, err := hf.f.ReadAt(out[i][:], idx*tlog.HashSize); err != nil {
				return nil, fmt.Errorf("audit: tree: reading hash %d: %w", idx, err)
			}
		}
	}
	return out, nil
}

// tree is the Log's side of the hash file.
type tree struct {
	f       *os.File
	written int64 // hashes in f
	// pending are hashes computed for lines on disk that a failed write
	// has not put in f yet; the next flush retries them.
	pending []tlog.Hash
	err     error // the last failed write, until a flush succeeds
	fr      *frontier
	// unsettled is SettleTree's failure, until it succeeds: the
	// frontier may not be the lines' then.
	unsettled error
}

// reader reads the tree's hashes, written or pending.
func (t *tree) reader() hashFile { return hashFile{f: t.f, count: t.written, tail: t.pending} }

// add computes the hashes of line (the next leaf), and writes them with
// those still pending when flush is set (a durable append: a pending one's
// wait for it, one write for both). A nil tree (a benchmark's log without
// one) does nothing.
func (t *tree) add(line []byte, flush bool) {
	if t == nil {
		return
	}
	hs, err := t.fr.add(line)
	if err != nil { // cannot happen: the frontier serves every hash it is asked
		t.err = err
		return
	}
	t.pending = append(t.pending, hs...)
	if flush || len(t.pending) >= maxPending {
		t.flush()
	}
}

// maxPending bounds the hashes add keeps before writing them, however
// long a run of pending appends.
const maxPending = 256

// flush writes the pending hashes at the end of the file.
func (t *tree) flush() {
	if t == nil || len(t.pending) == 0 {
		return
	}
	buf := make([]byte, 0, len(t.pending)*tlog.HashSize)
	for _, h := range t.pending {
		buf = append(buf, h[:]...)
	}
	if _, err := t.f.WriteAt(buf, t.written*tlog.HashSize); err != nil {
		t.err = err
		_ = t.f.Truncate(t.written * tlog.HashSize)
		return
	}
	t.written += int64(len(t.pending))
	t.pending, t.err = t.pending[:0], nil
}

// sync flushes and fsyncs the file.
func (t *tree) sync() error {
	if t == nil {
		return nil
	}
	t.flush()
	if t.err != nil {
		return t.err
	}
	return t.f.Sync()
}

// openTree opens (creating) the hash file in dir for a log of n records
// whose last line is last, cuts it back to the hashes of those records,
// and computes from the log's lines the hashes it lacks. A last leaf kept
// that is not its line's makes it rebuild the whole file.
func openTree(dir string, n int64, last []byte) (*tree, error) {
	f, err := os.OpenFile(filepath.Join(dir, TreeFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	t, err := loadTree(dir, f, n, last)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("audit: tree: %w", err)
	}
	return t, nil
}

func loadTree(dir string, f *os.File, n int64, last []byte) (*tree, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	count := fi.Size() / tlog.HashSize
	m := min(recordsIn(count), n) // the records whose hashes the file holds whole
	if m > 0 {
		// The last leaf kept must be its line's, or the file is not this
		// log's hashes (a log or a hash file put back from elsewhere).
		hf := hashFile{f: f, count: count}
		leaf, err := hf.ReadHashes([]int64{tlog.StoredHashIndex(0, m-1)})
		if err != nil {
			return nil, err
		}
		line := last
		if m < n {
			if line, err = lineAt(dir, uint64(m)); err != nil {
				return nil, err
			}
		}
		if leaf[0] != tlog.RecordHash(line) {
			m = 0 // rebuild them all
		}
	}
	written := tlog.StoredHashCount(m)
	if written*tlog.HashSize != fi.Size() {
		if err := f.Truncate(written * tlog.HashSize); err != nil {
			return nil, err
		}
	}
	fr, err := loadFrontier(m, hashFile{f: f, count: written})
	if err != nil {
		return nil, err
	}
	t := &tree{f: f, written: written, fr: fr}
	if m == n {
		return t, nil
	}
	if err := t.fill(dir, m, n); err != nil {
		return nil, err
	}
	if err := t.sync(); err != nil {
		return nil, err
	}
	return t, nil
}

// fill adds the leaves of the log's lines after the first m (the
// frontier's size) until the tree has the log's n records (catchUp). When
// the files named by their first records do not give n lines (files
// swapped: a later file begins with an earlier record), the whole tree is
// derived again from every line in the files' order, which is what a
// checker hashes (CheckCheckpoint, VerifyCheckpoint): a log whose files
// hold its n lines has a tree of them, however they were shuffled, and a
// checkpoint of it shows whoever holds an earlier one (the state file, a
// witness) that records were changed, where refusing to open it would
// keep the server from starting locked out, naming what disagrees.
func (t *tree) fill(dir string, m, n int64) error {
	err := t.catchUp(dir, m)
	if err == nil && t.fr.n == n {
		return nil
	}
	if rerr := t.restart(); rerr != nil {
		return rerr
	}
	if aerr := t.addLines(dir, nil, 0, 0); aerr == nil && t.fr.n == n {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: the log's files hold %d lines but its last record is %d", ErrCorrupt, t.fr.n, n)
}

// restart empties the tree (the hash file cut to nothing).
func (t *tree) restart() error {
	if err := t.f.Truncate(0); err != nil {
		return err
	}
	t.written, t.pending, t.fr, t.err = 0, t.pending[:0], &frontier{}, nil
	return nil
}

// catchUp adds the leaves of the log's lines after the first m (the
// frontier's size), reading the log's files from the one that holds
// record m+1: older files need not be there. A log whose oldest file
// begins after record m+1 (whole files moved out of the directory) is
// ErrMissingFiles.
func (t *tree) catchUp(dir string, m int64) error {
	files, err := logFiles(dir)
	if err != nil {
		return err
	}
	start, seen, found := 0, int64(0), false
	for i := len(files) - 1; i >= 0 && !found; i-- {
		first, ok, err := firstRecord(filepath.Join(dir, files[i].name))
		if err != nil {
			return err
		}
		if ok && int64(first.Seq) <= m+1 {
			start, seen, found = i, int64(first.Seq)-1, true
		}
	}
	if !found {
		if len(files) == 0 {
			return nil
		}
		return fmt.Errorf("%w: the tree needs record %d, and the oldest file in %s begins after it", ErrMissingFiles, m+1, dir)
	}
	return t.addLines(dir, files[start:], seen, m)
}

// addLines adds the leaves of the lines of files (nil: every file of the
// log) after the first m, of which seen come before them.
func (t *tree) addLines(dir string, files []logFile, seen, m int64) error {
	if files == nil {
		var err error
		if files, err = logFiles(dir); err != nil {
			return err
		}
	}
	for _, lf := range files {
		err := eachLine(filepath.Join(dir, lf.name), func(_ int, b []byte) error {
			seen++
			if seen <= m {
				return nil
			}
			hs, err := t.fr.add(b)
			if err != nil {
				return err
			}
			t.pending = append(t.pending, hs...)
			if len(t.pending) >= 4096 {
				t.flush()
				return t.err
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ErrMissingFiles reports a log directory whose oldest records' files are
// gone (archived elsewhere) when the tree's hashes had to be computed from
// them: put the files back for the start, or keep tree.hashes with them.
var ErrMissingFiles = errors.New("audit: the log's oldest files are not in its directory")

// SettleTree makes the hash file give the roots of the log's lines before
// a checkpoint is signed from it (the notary calls it at start). The file
// is never fsynced per record and anyone with the host's files can edit
// it, so it is trusted only up to trusted, the tree of the last checkpoint
// signed (nil: none), and only when its root there is trusted's: then its
// nodes a later root reads (the right edge at trusted.N, hashed into that
// root) are right, and every hash stored after them is derived from the
// lines again: O(lines since + log N). Otherwise the whole file is rebuilt
// from the lines. A rotten hash under trusted.N and off its edge is never
// read by a root, only by an inclusion proof, which then fails to check:
// delete tree.hashes and start again to rebuild it. The file is fsynced.
// When this fails, TreeHead fails until it succeeds.
func (l *Log) SettleTree(trusted *Tree) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tree == nil {
		return nil
	}
	l.tree.unsettled = l.tree.settle(l.dir, int64(l.seq), trusted)
	if l.tree.unsettled != nil {
		return fmt.Errorf("audit: tree: %w", l.tree.unsettled)
	}
	return nil
}

func (t *tree) settle(dir string, n int64, trusted *Tree) error {
	t.flush()
	if t.err != nil {
		return t.err
	}
	var m int64
	if trusted != nil && trusted.N > 0 && trusted.N <= n && trusted.N <= recordsIn(t.written) {
		if h, err := tlog.TreeHash(trusted.N, t.reader()); err == nil && h == trusted.Hash {
			m = trusted.N
		}
	}
	written := tlog.StoredHashCount(m)
	if err := t.f.Truncate(written * tlog.HashSize); err != nil {
		return err
	}
	t.written, t.pending = written, t.pending[:0]
	fr, err := loadFrontier(m, t.reader())
	if err != nil {
		return err
	}
	t.fr = fr
	if err := t.fill(dir, m, n); err != nil {
		return err
	}
	return t.sync()
}

// closeTree fsyncs and closes the hash file.
func (t *tree) close() error {
	if t == nil {
		return nil
	}
	return errors.Join(t.sync(), t.f.Close())
}

// Tree is the tree of a log's first N records: its size and root hash.
type Tree struct {
	N    int64
	Hash tlog.Hash
}

// TreeHead returns the tree of the durable records (those Head counts):
// what a checkpoint may commit to. It reads O(log N) hashes, and fsyncs
// the hash file first, so that the hashes a signed root was read from
// survive a crash.
func (l *Log) TreeHead() (Tree, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tree != nil && l.tree.unsettled != nil {
		return Tree{}, fmt.Errorf("audit: tree head: %w", l.tree.unsettled)
	}
	if err := l.tree.sync(); err != nil {
		return Tree{}, fmt.Errorf("audit: tree head: %w", err)
	}
	n := int64(l.durable.Seq)
	h, err := tlog.TreeHash(n, l.tree.reader())
	if err != nil {
		return Tree{}, fmt.Errorf("audit: tree head: %w", err)
	}
	return Tree{N: n, Hash: h}, nil
}

// SetNotify sets the function told every record Append made durable,
// called without the log's lock held after Append wrote it (the signer of
// checkpoints counts them, and signs after a stop control's records).
func (l *Log) SetNotify(f func(Record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notify = f
}

// TreeReader opens the hash file of the log in dir for reading proofs;
// the caller closes it. Hashes are read as stored: a proof made from them
// that does not check against a signed root is a hash file out of step
// with the lines (VerifyCheckpoint tells).
func TreeReader(dir string) (tlog.HashReader, io.Closer, error) {
	f, err := os.Open(filepath.Join(dir, TreeFile))
	if err != nil {
		return nil, nil, fmt.Errorf("audit: tree: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("audit: tree: %w", err)
	}
	return hashFile{f: f, count: fi.Size() / tlog.HashSize}, f, nil
}
