package stateguard

import (
	"errors"
	"fmt"
	"strings"

	"coily.dev/coily/audit"
	"coily.dev/coily/store"
)

// CheckKeptCheckpoint checks the log in dir against the latest checkpoint
// local kept (audit.CheckCheckpoint), opened with the host's own verifier
// key: a log shorter than it, or whose tree at its size has another root,
// lost or changed records (a non-nil Lost). None kept (a first start, a
// state file from before checkpoints) is no alarm; one kept that cannot
// be read or opened with the key is an error (fail closed: the server
// does not start).
func CheckKeptCheckpoint(local store.Local, dir string) (*Lost, error) {
	kept, err := local.AuditCheckpoint()
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("server: the audit checkpoint %s keeps: %w", local.Path(), err)
	}
	signer, err := local.AuditSigner()
	if err != nil {
		return nil, fmt.Errorf("server: %s keeps an audit checkpoint but no key to open it: %w", local.Path(), err)
	}
	at := kept.At.UTC().Format("2006-01-02T15:04:05Z")
	c, err := audit.OpenCheckpoint(kept.Signed, signer.Verifier)
	if err != nil {
		return nil, fmt.Errorf("server: the audit checkpoint %s keeps (signed %s): %w", local.Path(), at, err)
	}
	err = audit.CheckCheckpoint(dir, c)
	var cerr *audit.CheckpointError
	if !errors.As(err, &cerr) {
		if err != nil {
			return nil, fmt.Errorf("server: check the audit log against the checkpoint %s keeps: %w", local.Path(), err)
		}
		return nil, nil
	}
	found := fmt.Sprintf("%d", cerr.Lines)
	if cerr.Lines >= c.N {
		found = fmt.Sprintf("%d %s", c.N, cerr.Found)
	}
	return &Lost{
		Why: fmt.Sprintf("the audit log does not hold the checkpoint %s kept (signed %s): %s", local.Path(), at,
			strings.TrimPrefix(cerr.Error(), "audit: ")),
		Details: map[string]string{
			"check":               "checkpoint",
			"checkpoint_recorded": fmt.Sprintf("%d %s", c.N, c.Hash),
			"checkpoint_found":    found,
		},
	}, nil
}

// checkCheckpoint locks out when the log does not hold the checkpoint
// the state file kept (CheckKeptCheckpoint).
func (r *restoring) checkCheckpoint(dir string) (lost bool, err error) {
	l, err := CheckKeptCheckpoint(r.s.cfg.Local, dir)
	if l == nil || err != nil {
		return false, err
	}
	r.LostRecords(l.Why, l.Details)
	return true, nil
}

// TrustedTree is the tree of the checkpoint local kept when the log in
// dir holds it, else nil: what the notary may trust the hash file up to
// (notary.Config.Trusted). A log that lost or changed records under it
// has hashes of lines no longer there; they are all derived again.
func TrustedTree(local store.Local, dir string) *audit.Tree {
	if lost, err := CheckKeptCheckpoint(local, dir); lost != nil || err != nil {
		return nil
	}
	kept, err := local.AuditCheckpoint()
	if err != nil {
		return nil
	}
	signer, err := local.AuditSigner()
	if err != nil {
		return nil
	}
	c, err := audit.OpenCheckpoint(kept.Signed, signer.Verifier)
	if err != nil {
		return nil
	}
	return &c.Tree
}
