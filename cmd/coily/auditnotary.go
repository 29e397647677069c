package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/audit/notary"
	"coily.dev/coily/store"
)

// checkpointFlags are coily serve's flags for the audit log's signed
// checkpoints (package audit/notary).
type checkpointFlags struct {
	every   *time.Duration
	records *int
}

func registerCheckpointFlags(fs *pflag.FlagSet) checkpointFlags {
	return checkpointFlags{
		every: durationFlag(fs, "checkpoint-every", "COILY_CHECKPOINT_EVERY", notary.DefaultEvery,
			"sign a checkpoint of the audit log at least this often while records are added (1s to 1h; also after every lockout, pause, unlock, resume and policy reload)"),
		records: intFlag(fs, "checkpoint-records", "COILY_CHECKPOINT_RECORDS", notary.DefaultRecords,
			"sign a checkpoint of the audit log after this many records (1 to 1000000)"),
	}
}

func (f checkpointFlags) check() error {
	if *f.every < time.Second || *f.every > time.Hour {
		return fmt.Errorf("--checkpoint-every %v: must be between 1s and 1h", *f.every)
	}
	if *f.records < 1 || *f.records > 1_000_000 {
		return fmt.Errorf("--checkpoint-records %d: must be between 1 and 1000000", *f.records)
	}
	return nil
}

// checkpointOrigin names the log in its checkpoints (and its key): the
// fleet's name of the host, else the machine's host name. It is fixed
// when the key is made: the key carries it.
func checkpointOrigin(fleetHost string) string {
	host := fleetHost
	if host == "" {
		host, _ = os.Hostname()
	}
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r == '+' || r == 0x7f {
			return '_'
		}
		return r
	}, cmp.Or(host, "localhost"))
	return "coily/" + host
}

// auditSigner returns the state file's checkpoint key, making it (named
// for origin) when there is none, and what records it in the log once the
// server's state guard has checked the state file against the log (a
// record before that would make a first start's empty log look like a
// lost state file's).
func auditSigner(db *store.DB, al *audit.Log, origin string) (store.AuditSigner, func(*notary.Notary) error, error) {
	made := false
	s, err := db.EnsureAuditSigner(func() (string, string, error) {
		made = true
		return audit.GenerateSigner(origin)
	}, time.Now())
	if err != nil {
		return store.AuditSigner{}, nil, err
	}
	return s, func(nt *notary.Notary) error { return recordKey(al, s.Verifier, made, nt) }, nil
}

// recordKey records a checkpoint key made, or one the log's verifier file
// does not name yet, in the log (audit.EventKey), then signs a checkpoint
// covering that record, then writes the verifier file beside the log for
// `coily audit key`: a lost state file's new key is in the log and its
// checkpoints, not only in a replaced key file, and a start that failed
// in between records it at the next.
func recordKey(al *audit.Log, vkey string, made bool, nt *notary.Notary) error {
	old := audit.ReadVerifier(al.Dir())
	if !made && old == vkey {
		return nil
	}
	details := map[string]string{"verifier": vkey, "new": strconv.FormatBool(made)}
	if old != "" && old != vkey {
		details["replaces"] = old
	}
	_, err := al.Append(context.Background(), audit.Record{Event: audit.EventKey, Principal: access.ServerCaller.Principal, Transport: access.ServerCaller.Transport,
		Decision: "allow", Reason: "a new checkpoint key: witnesses pin its verifier key (coily audit key)", Details: details})
	if err != nil {
		return fmt.Errorf("audit checkpoints: recording the new key: %w", err)
	}
	if _, err := nt.Sign(); err != nil {
		return fmt.Errorf("audit checkpoints: %w", err)
	}
	return audit.WriteVerifier(al.Dir(), vkey)
}

// startNotary signs the audit log's checkpoints while the server runs.
// The returned function records a new key in the log (recordKey): call it
// once the server was made.
// Every checkpoint kept is offered to the witnesses (offer never blocks).
func startNotary(log *slog.Logger, db *store.DB, al *audit.Log, f checkpointFlags, fleetHost string, wit *witnesses) (*notary.Notary, func() error, error) {
	s, record, err := auditSigner(db, al, checkpointOrigin(fleetHost))
	if err != nil {
		return nil, nil, fmt.Errorf("audit checkpoints: %w", err)
	}
	wit.pin(s.Verifier)
	every, records := notary.DefaultEvery, notary.DefaultRecords // coily dev sets no flags
	if f.every != nil {
		every, records = *f.every, *f.records
	}
	n, err := notary.Start(notary.Config{Log: al, Key: s.Key, Every: every, Records: uint64(records), Logger: log,
		Trusted: lastSigned(log, db, s.Verifier),
		Keep: func(signed []byte, at time.Time) error {
			if err := db.SetAuditCheckpoint(store.AuditCheckpoint{Signed: signed, At: at}); err != nil {
				return err
			}
			wit.offer(signed)
			return nil
		}})
	if err != nil {
		return nil, nil, fmt.Errorf("audit checkpoints: %w", err)
	}
	log.Info("signing audit checkpoints", "verifier", s.Verifier, "every", every, "records", records)
	return n, func() error { return record(n) }, nil
}

// lastSigned is the tree of the state file's last checkpoint, opened with
// the log's verifier key: what the notary trusts the hash file up to. None
// (no checkpoint yet, or one that does not open) is nil: the notary then
// derives every hash from the lines.
func lastSigned(log *slog.Logger, db *store.DB, vkey string) *audit.Tree {
	c, err := db.AuditCheckpoint()
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err == nil {
		var cp audit.Checkpoint
		if cp, err = audit.OpenCheckpoint(c.Signed, vkey); err == nil {
			return &cp.Tree
		}
	}
	log.Warn("the state file's last audit checkpoint is unusable: the tree's hashes are computed again from every line", "err", err)
	return nil
}

// signRepaired signs a checkpoint of a log `coily audit repair` mended
// (the state directory locked: no server runs), so that the repair is a
// new checkpoint, visibly, before the server starts again. A state
// directory whose server never made a key has nothing to sign with.
func signRepaired(e *env, dir string) int {
	path := filepath.Join(filepath.Dir(dir), "coily.db")
	if _, err := os.Stat(path); err != nil {
		printLine(e.stdout, "no state file: no checkpoint signed")
		return 0
	}
	db, err := store.Open(path)
	if err != nil {
		printLine(e.stderr, "coily audit repair: signing a checkpoint: %v", err)
		return 1
	}
	defer db.Close()
	s, err := db.AuditSigner()
	switch {
	case errors.Is(err, store.ErrNotFound):
		printLine(e.stdout, "the server has no checkpoint key yet: no checkpoint signed")
		return 0
	case err != nil:
		printLine(e.stderr, "coily audit repair: signing a checkpoint: %v", err)
		return 1
	}
	al, err := audit.Open(audit.Config{Dir: dir})
	if err != nil {
		printLine(e.stderr, "coily audit repair: signing a checkpoint: %v", err)
		return 1
	}
	defer al.Close()
	n, err := notary.Start(notary.Config{Log: al, Key: s.Key, Every: time.Hour, Trusted: lastSigned(slog.Default(), db, s.Verifier),
		Keep: func(signed []byte, at time.Time) error {
			return db.SetAuditCheckpoint(store.AuditCheckpoint{Signed: signed, At: at})
		}})
	if err != nil {
		printLine(e.stderr, "coily audit repair: signing a checkpoint: %v", err)
		return 1
	}
	n.Stop()
	tree, err := al.TreeHead()
	if err != nil {
		printLine(e.stderr, "coily audit repair: %v", err)
		return 1
	}
	printLine(e.stdout, "signed a checkpoint of the repaired log: %d records, root %s (%s)", tree.N, tree.Hash, filepath.Join(dir, audit.CheckpointFile))
	return 0
}
