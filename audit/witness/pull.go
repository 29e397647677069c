package witness

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	refusals "coily.dev/coily/refusal"
)

// AnswerPull is the server's answer to AuditCheckpoint: the latest checkpoint
// of the log in logDir as an add-checkpoint request (AddBody), with the
// log's origin. When the request pins another origin (each server of a
// fleet keeps its own log) it answers only the origin: not this log.
func AnswerPull(logDir string, req *coilyv1.AuditCheckpointRequest) (*coilyv1.AuditCheckpointResponse, error) {
	if req.GetOld() < 0 {
		return nil, refusals.New(refusals.BadRequest, "old size %d is negative", req.GetOld())
	}
	signed, err := readCheckpoint(logDir)
	if err != nil {
		return nil, err
	}
	c, err := audit.ParseCheckpoint(noteTextOf(signed))
	if err != nil {
		return nil, fmt.Errorf("witness: %s: %w", audit.CheckpointFile, err)
	}
	out := &coilyv1.AuditCheckpointResponse{LogOrigin: c.Origin}
	if o := req.GetOrigin(); o != "" && o != c.Origin {
		return out, nil
	}
	if out.AddCheckpoint, err = addBody(signed, req.GetOld(), logProver(logDir)); err != nil {
		return nil, err
	}
	return out, nil
}

// AddBody is the add-checkpoint request (AddRequest.Format) of the log in
// logDir's latest signed checkpoint (audit.CheckpointFile) for a witness
// that holds old records: with the consistency proof from old to the
// checkpoint's size, from the log's hash file. When old is larger than
// the checkpoint's size there is no proof to make: the body says old, and
// the witness refuses the smaller tree.
func AddBody(logDir string, old int64) ([]byte, error) {
	if old < 0 {
		return nil, refusals.New(refusals.BadRequest, "old size %d is negative", old)
	}
	signed, err := readCheckpoint(logDir)
	if err != nil {
		return nil, err
	}
	return addBody(signed, old, logProver(logDir))
}

// readCheckpoint reads the log in logDir's latest signed checkpoint.
func readCheckpoint(logDir string) ([]byte, error) {
	f, err := os.Open(filepath.Join(logDir, audit.CheckpointFile))
	if err != nil {
		return nil, refusals.Wrap(refusals.Internal, err, "no signed checkpoint of the audit log to answer")
	}
	defer f.Close()
	signed, err := io.ReadAll(io.LimitReader(f, audit.MaxCheckpoint+1))
	if err != nil {
		return nil, fmt.Errorf("witness: %s: %w", audit.CheckpointFile, err)
	}
	return signed, nil
}

// logProver proves consistency from the log in logDir's hash file.
func logProver(logDir string) Prover {
	return func(n, old int64) (tlog.TreeProof, error) {
		r, closer, err := audit.TreeReader(logDir)
		if err != nil {
			return nil, err
		}
		defer closer.Close()
		return tlog.ProveTree(n, old, r)
	}
}

// addBody is the add-checkpoint request of the signed checkpoint for a
// witness holding old records, with prove's proof when old is between 0
// and the checkpoint's size.
func addBody(signed []byte, old int64, prove Prover) ([]byte, error) {
	c, err := audit.ParseCheckpoint(noteTextOf(signed))
	if err != nil {
		return nil, fmt.Errorf("witness: %s: %w", audit.CheckpointFile, err)
	}
	req := AddRequest{Old: old, Checkpoint: signed}
	if old > 0 && old < c.N {
		if req.Proof, err = prove(c.N, old); err != nil {
			return nil, fmt.Errorf("witness: proving %d to %d: %w", old, c.N, err)
		}
	}
	return req.Format(), nil
}
