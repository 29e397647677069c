package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/mod/sumdb/tlog"
)

// TreeReport is what VerifyCheckpoint found.
type TreeReport struct {
	Report
	Tree Tree // the tree of every line of the log, recomputed from the lines
	// Consistent is set when the hash file's tree at the log's size
	// has Tree's root and proves (tlog.CheckTree) that it extends the
	// checkpoint's: what a witness holding only the checkpoint is
	// shown.
	Consistent bool
}

// CheckpointError reports a log that does not hold what a checkpoint
// commits to. It wraps ErrCorrupt.
type CheckpointError struct {
	Checkpoint Checkpoint
	Lines      int64     // the log's records, all of which verified as a chain
	Found      tlog.Hash // the root of its first Checkpoint.N records, when it has them
}

func (e *CheckpointError) Error() string {
	n := e.Checkpoint.N
	if e.Lines < n {
		return fmt.Sprintf("audit: the log holds %d records but the checkpoint (signed by %s) commits to %d: "+
			"records %d to %d were removed from its end (a cut tail, or deleted newest files)",
			e.Lines, e.Checkpoint.Origin, n, e.Lines+1, n)
	}
	return fmt.Sprintf("audit: the log's first %d records hash to %s but the checkpoint (signed by %s) commits to %s: "+
		"records at or before %d were changed, and their chain rewritten to match", n, e.Found, e.Checkpoint.Origin, e.Checkpoint.Hash, n)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CheckpointError) Unwrap() error { return ErrCorrupt }

// ErrTreeFile reports a hash file out of step with the lines: derived
// data, rebuilt by the next Open, but never expected in a log that only
// Append wrote.
var ErrTreeFile = errors.New("audit: the tree's hash file does not match the log's lines")

// VerifyCheckpoint checks the log in dir against a checkpoint (opened,
// so its signature is checked already): that the tree of the log's first
// c.N records, computed from the lines themselves (never from the hash
// file, which whoever rewrote the lines could rewrite too), has c's root,
// and that every record after them verifies as Verify checks it (each
// line on its own, and the chain). Those first c.N lines are then the
// very bytes the server signed for: they are hashed, not parsed again
// (parsing is most of Verify's cost). When they do not have c's root,
// the whole log is verified as Verify does, to name the first broken
// line; a log whose chain holds but that is shorter than c.N, or whose
// first c.N records hash otherwise, is a *CheckpointError naming which.
// It then checks the hash file: that its tree at the log's size has the
// recomputed root, and a consistency proof from c to it (ErrTreeFile when
// not; a log without one is not checked for it). Memory O(log N).
func VerifyCheckpoint(dir string, c Checkpoint) (TreeReport, error) {
	// The hash file is compared at the size it holds whole when it was
	// looked at: a running server writes the hashes of a pending line
	// (a command's decision) with the next durable one.
	// A log copied off the host without its hash file (to verify it
	// where root does not control the binary) is checked from its lines
	// alone: Consistent stays false.
	fileN, err := treeFileRecords(dir)
	noFile := errors.Is(err, fs.ErrNotExist)
	if err != nil && !noFile {
		return TreeReport{}, fmt.Errorf("%w: %w", ErrTreeFile, err)
	}
	fr, atN, haveN := &frontier{}, tlog.Hash{}, false
	atFile, _ := fr.root() // of no records, until the walk reaches fileN
	each := func(stopAtMismatch bool) func([]byte) error {
		return func(line []byte) error {
			if _, err := fr.add(line); err != nil {
				return err
			}
			if fr.n == fileN {
				if atFile, err = fr.root(); err != nil {
					return err
				}
			}
			if fr.n != c.N {
				return nil
			}
			h, err := fr.root()
			atN, haveN = h, err == nil
			if err == nil && h != c.Hash && stopAtMismatch {
				return errNotSigned
			}
			return err
		}
	}
	if c.N == 0 {
		atN, _ = fr.root()
		haveN = true
	}
	rep, err := verify(dir, each(true), c.N)
	if errors.Is(err, errNotSigned) || (err == nil && !haveN) {
		// Not what was signed: verify it all, to name a broken line.
		fr, haveN = &frontier{}, c.N == 0
		if rep, err = verify(dir, each(false), 0); err == nil {
			err = &CheckpointError{Checkpoint: c, Lines: fr.n, Found: atN}
		}
	}
	out := TreeReport{Report: rep}
	if err != nil {
		return out, err
	}
	if out.Tree.Hash, err = fr.root(); err != nil {
		return out, err
	}
	out.Tree.N = fr.n
	if noFile {
		return out, nil
	}
	file := Tree{N: fileN, Hash: atFile}
	if fileN >= fr.n {
		file = out.Tree // hashes of lines a crash lost: Open cuts them
	}
	if err := checkTreeFile(dir, c.Tree, file); err != nil {
		return out, err
	}
	out.Consistent = true
	return out, nil
}

// errNotSigned ends the first pass of VerifyCheckpoint at a root that is
// not the checkpoint's.
var errNotSigned = errors.New("audit: not the signed tree")

// treeFileRecords is how many records' hashes the hash file in dir holds
// whole.
func treeFileRecords(dir string) (int64, error) {
	fi, err := os.Stat(filepath.Join(dir, TreeFile))
	if err != nil {
		return 0, err
	}
	return recordsIn(fi.Size() / tlog.HashSize), nil
}

// checkTreeFile checks that the hash file's tree at now.N has now's root
// and that a consistency proof from it shows it extends old.
func checkTreeFile(dir string, old, now Tree) error {
	r, closer, err := TreeReader(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTreeFile, err)
	}
	defer closer.Close()
	h, err := tlog.TreeHash(now.N, r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTreeFile, err)
	}
	if h != now.Hash {
		return fmt.Errorf("%w: its root at %d is %s, the lines' %s", ErrTreeFile, now.N, h, now.Hash)
	}
	if old.N > now.N {
		return fmt.Errorf("%w: it holds %d records' hashes, fewer than the checkpoint's %d", ErrTreeFile, now.N, old.N)
	}
	if old.N == 0 || old.N == now.N {
		return nil
	}
	p, err := tlog.ProveTree(now.N, old.N, r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTreeFile, err)
	}
	if err := tlog.CheckTree(p, now.N, now.Hash, old.N, old.Hash); err != nil {
		return fmt.Errorf("%w: consistency from %d to %d: %w", ErrTreeFile, old.N, now.N, err)
	}
	return nil
}
