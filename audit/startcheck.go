package audit

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/mod/sumdb/tlog"
)

// CheckCheckpoint checks that the log in dir still holds what the
// checkpoint c (opened: its signature checked) commits to: at least c.N
// records, the tree of whose first c.N lines has c's root. The server
// calls it at start, against the checkpoint its state file kept, before
// it admits anything. A log that does not is a *CheckpointError (a cut
// tail, deleted newest files, swapped files, an edited record); one that
// cannot be read is another error.
//
// The leaves are hashed from the lines themselves, never read from the
// hash file, which whoever edited a line could edit too; lines are not
// parsed (Verify checks them one by one and the chain). When the log's
// oldest files were moved out of its directory (docs/operations.md,
// "Retention"), the tree's right edge before its oldest file is read
// from the hash file and the lines from there on are hashed onto it: a
// changed line still gives another root (what was archived is not
// checked; ErrMissingFiles without the hash file). It reads every line
// once: O(bytes of the log).
func CheckCheckpoint(dir string, c Checkpoint) error {
	if c.N == 0 {
		return nil
	}
	files, err := logFiles(dir)
	if err != nil {
		return err
	}
	fr, err := frontierBefore(dir, files)
	if err != nil {
		return err
	}
	var root tlog.Hash
	done := errors.New("done")
	for _, lf := range files {
		err = eachLine(filepath.Join(dir, lf.name), func(_ int, b []byte) error {
			if _, err := fr.add(b); err != nil {
				return err
			}
			if fr.n < c.N {
				return nil
			}
			if root, err = fr.root(); err != nil {
				return err
			}
			return done
		})
		if err != nil {
			break
		}
	}
	switch {
	case err == done && root == c.Hash:
		return nil
	case err == done:
		return &CheckpointError{Checkpoint: c, Lines: c.N, Found: root}
	case err != nil:
		return err
	}
	return &CheckpointError{Checkpoint: c, Lines: fr.n}
}

// frontierBefore is the tree's right edge before the oldest of files:
// empty when it begins at record 1, else read from the hash file.
func frontierBefore(dir string, files []logFile) (*frontier, error) {
	for _, lf := range files {
		first, ok, err := firstRecord(filepath.Join(dir, lf.name))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		m := int64(first.Seq) - 1
		if m <= 0 {
			return &frontier{}, nil
		}
		r, closer, err := TreeReader(dir)
		if err != nil {
			return nil, fmt.Errorf("%w: the oldest file begins at record %d: %w", ErrMissingFiles, m+1, err)
		}
		defer closer.Close()
		fr, err := loadFrontier(m, r)
		if err != nil {
			return nil, fmt.Errorf("%w: the oldest file begins at record %d: %w", ErrMissingFiles, m+1, err)
		}
		return fr, nil
	}
	return &frontier{}, nil
}
