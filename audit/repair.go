package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// EventRepair is the record Repair appends after cutting a torn line.
const EventRepair = "audit.repair"

// RepairReport says what Repair did.
type RepairReport struct {
	File     string // the file whose end was cut
	CutBytes int64  // how many bytes were cut
	Record   Record // the chained repair record
}

// Repair mends a log whose last line is torn (a crash or a full disk in the
// middle of a write): it cuts the newest file back to its last whole line,
// then appends a chained audit.repair record saying what was cut (length
// and SHA-256 of the cut bytes), so Verify accepts the log and the cut is
// on record. A log that is not torn is left alone (an error wrapping
// ErrNotTorn); damage anywhere else is not Repair's to mend.
func Repair(cfg Config, principal string) (RepairReport, error) {
	files, err := logFiles(cfg.Dir)
	if err != nil {
		return RepairReport{}, err
	}
	var rep RepairReport
	for i := len(files) - 1; i >= 0; i-- {
		path := filepath.Join(cfg.Dir, files[i].name)
		cut, err := cutTornTail(path)
		if err != nil {
			return RepairReport{}, err
		}
		if cut.n > 0 {
			rep.File, rep.CutBytes = path, cut.n
			l, err := Open(cfg)
			if err != nil {
				return rep, fmt.Errorf("audit: repair: after cutting %d bytes of %s: %w", cut.n, path, err)
			}
			defer l.Close()
			rep.Record, err = l.Append(context.Background(), Record{Event: EventRepair, Principal: principal,
				Decision: "allow", Reason: "torn last line cut off",
				Details: map[string]string{"file": filepath.Base(path), "cut_bytes": strconv.FormatInt(cut.n, 10),
					"cut_sha256": cut.sum, "cut_at": time.Now().UTC().Format(time.RFC3339)}})
			return rep, err
		}
		if cut.whole {
			break // the newest non-empty file ends with a whole line
		}
	}
	return rep, ErrNotTorn
}

// ErrNotTorn is returned by Repair when the log's last line is whole.
var ErrNotTorn = errors.New("audit: the last line is whole: nothing to repair")

type tornCut struct {
	n     int64  // bytes cut
	sum   string // their SHA-256
	whole bool   // the file is not empty and ends with a whole line
}

// cutTornTail cuts the bytes after the last newline of the file at path,
// after checking that the line before them verifies on its own (otherwise
// the damage is not a torn write).
func cutTornTail(path string) (tornCut, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return tornCut{}, fmt.Errorf("audit: repair: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<31))
	if err != nil {
		return tornCut{}, fmt.Errorf("audit: repair: %w", err)
	}
	if len(data) == 0 {
		return tornCut{}, nil
	}
	end := bytes.LastIndexByte(data, '\n') + 1
	if end == len(data) {
		return tornCut{whole: true}, nil
	}
	if end > 0 {
		prev := data[bytes.LastIndexByte(data[:end-1], '\n')+1 : end-1]
		if _, _, err := parseLine(prev); err != nil {
			return tornCut{}, fmt.Errorf("audit: repair: %s: the last whole line does not verify either (%v): this is not a torn write; run `coily audit verify`", path, err)
		}
	}
	cut := data[end:]
	if err := f.Truncate(int64(end)); err != nil {
		return tornCut{}, fmt.Errorf("audit: repair: %w", err)
	}
	if err := f.Sync(); err != nil {
		return tornCut{}, fmt.Errorf("audit: repair: %w", err)
	}
	return tornCut{n: int64(len(cut)), sum: sha256Hex(string(cut))}, nil
}
