package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/audit"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/cli"
	"coily.dev/coily/regularfile"
)

// auditKeyCmd is `coily audit key`.
func auditKeyCmd(a *cli.App) *cobra.Command {
	return command(a, spec{use: "key", short: "print the public key the audit log's checkpoints are signed with, to pin it",
		flags: func(fs *pflag.FlagSet) runFunc {
			return func(_ context.Context, e *env) int { return auditKey(e) }
		}})
}

// auditProveCmd is `coily audit prove`.
func auditProveCmd(a *cli.App) *cobra.Command {
	return command(a, spec{use: "prove [--checkpoint FILE] ID | prove --check FILE [--id ID] [--key KEY]",
		short: "print an audit record's inclusion proof in a signed checkpoint, or check one", args: cobra.MaximumNArgs(1),
		flags: func(fs *pflag.FlagSet) runFunc {
			cp := fs.String("checkpoint", "", "the signed checkpoint to prove against (default: the latest, <state-dir>/audit/checkpoint)")
			check := fs.String("check", "", "check the proof in this file instead, against the pinned key, and print the record")
			id := fs.String("id", "", "with --check: the audit id the proof must be of (a valid proof of another record fails)")
			k := registerPinnedKey(fs)
			return func(_ context.Context, e *env) int {
				if *check != "" {
					if len(e.args) > 0 {
						return usage(e, "audit prove --check FILE takes no ID: pass --id ID")
					}
					return auditProveCheck(e, *check, *id, k)
				}
				if *id != "" {
					return usage(e, "audit prove: --id goes with --check")
				}
				if len(e.args) != 1 {
					return usage(e, "audit prove needs an audit id (A and 12 digits)")
				}
				return auditProve(e, e.args[0], *cp)
			}
		}})
}

// pinnedKey name the verifier key a checkpoint must be signed with, and
// (audit verify) the witness key it must be cosigned with.
type pinnedKey struct {
	key, keyFile, witnessKey *string
	maxAge                   *time.Duration // audit verify --max-age: of the witness's cosignature
}

func registerPinnedKey(fs *pflag.FlagSet) pinnedKey {
	return pinnedKey{
		key:     fs.String("key", "", "the checkpoint key you pinned (what `coily audit key` printed): checkpoints signed by any other key are refused"),
		keyFile: fs.String("key-file", "", "a file holding the pinned key (default, without --key: <state-dir>/audit/checkpoint.vkey, which whoever can write the host can replace: pin it)"),
	}
}

// verifier returns the pinned key, and whether it came from the host's
// own file (an unpinned check, said so).
func (k pinnedKey) verifier(e *env) (vkey string, fromHost bool, err error) {
	switch {
	case *k.key != "" && *k.keyFile != "":
		return "", false, errors.New("--key and --key-file: give one")
	case *k.key != "":
		return strings.TrimSpace(*k.key), false, nil
	}
	path, fromHost := *k.keyFile, *k.keyFile == ""
	if fromHost {
		path = filepath.Join(auditDir(e), audit.VerifierFile)
	}
	b, err := regularfile.Read(path, 4<<10)
	if err != nil {
		return "", false, fmt.Errorf("checkpoint key: %w", err)
	}
	return strings.TrimSpace(string(b)), fromHost, nil
}

// auditKey prints the verifier key the server wrote beside the log.
func auditKey(e *env) int {
	b, err := regularfile.Read(filepath.Join(auditDir(e), audit.VerifierFile), 4<<10)
	if err != nil {
		printLine(e.stderr, "coily audit key: %v (the server makes its key when it first starts)", err)
		return 1
	}
	printLine(e.stdout, "%s", strings.TrimSpace(string(b)))
	return 0
}

// auditProve prints the inclusion proof of the record id in the signed
// checkpoint at cpPath (the latest, by default).
func auditProve(e *env, id, cpPath string) int {
	seq, err := audit.ParseID(id)
	if err != nil {
		return usage(e, "audit prove: %v", err)
	}
	if cpPath == "" {
		cpPath = filepath.Join(auditDir(e), audit.CheckpointFile)
	}
	signed, err := regularfile.Read(cpPath, audit.MaxCheckpoint)
	if err != nil {
		printLine(e.stderr, "coily audit prove: checkpoint: %v", err)
		return 1
	}
	p, err := audit.Prove(auditDir(e), seq, signed)
	if err != nil {
		printLine(e.stderr, "coily audit prove: %v", err)
		return 1
	}
	_, _ = e.stdout.Write(p.Format())
	return 0
}

// auditProveCheck checks a proof file against the pinned key, and that
// it is of record id when id is given.
func auditProveCheck(e *env, path, id string, k pinnedKey) int {
	if id != "" {
		if _, err := audit.ParseID(id); err != nil {
			return usage(e, "audit prove --check: --id: %v", err)
		}
	}
	vkey, fromHost, err := k.verifier(e)
	if err != nil {
		return usage(e, "audit prove --check: %v", err)
	}
	text, err := regularfile.Read(path, audit.MaxProof)
	if err != nil {
		printLine(e.stderr, "coily audit prove --check: %v", err)
		return 1
	}
	rec, c, err := audit.CheckProof(text, vkey)
	if err != nil {
		printLine(e.stderr, "coily audit prove --check: FAILED: %v", err)
		return 1
	}
	if id != "" && rec.ID != id {
		printLine(e.stderr, "coily audit prove --check: FAILED: the proof is of record %s, not %s", rec.ID, id)
		return 1
	}
	printLine(e.stdout, "proof OK: record %s is in the log %s signed at %d records (root %s)", rec.ID, c.Origin, c.N, c.Hash)
	printLine(e.stdout, "%s", summary(rec))
	if fromHost {
		printLine(e.stdout, "checked with the key file on this host, not a pinned key: pass --key")
	}
	return 0
}

// treeCheck is what `audit verify --checkpoint` checked.
type treeCheck struct {
	url      bool      // the checkpoint came from a witness's URL
	witness  string    // the witness whose cosignature was checked ("" when none)
	cosigned time.Time // when it cosigned
	cp       audit.Checkpoint
	now      audit.Tree
	fromHost bool // the key came from the host's own file
	hashFile bool // the hash file was checked too (a copy may have none)
}

// openWitnessed reads the checkpoint at path (a file, or a witness's URL:
// its latest for the log the pinned key names) and opens it with the
// pinned key, and checks the witness's cosignature when a witness key is
// given; on failure it says why and returns nil and the exit code.
func openWitnessed(e *env, path string, k pinnedKey) (*treeCheck, int) {
	vkey, fromHost, err := k.verifier(e)
	if err != nil {
		return nil, usage(e, "audit verify: %v", err)
	}
	wkey := ""
	if k.witnessKey != nil {
		wkey = strings.TrimSpace(*k.witnessKey)
	}
	msg, err := readWitnessed(path, vkey)
	if err != nil {
		printLine(e.stderr, "coily audit verify: checkpoint: %v", err)
		return nil, 1
	}
	if len(msg) > 0 && msg[len(msg)-1] != '\n' {
		// A copy saved from a phone's notification may have lost the
		// final newline, which no signature covers.
		msg = append(msg, '\n')
	}
	c, err := audit.OpenCheckpoint(msg, vkey)
	if err != nil {
		printLine(e.stderr, "coily audit verify: FAILED: %s: %v", path, err)
		return nil, 1
	}
	t := &treeCheck{cp: c, fromHost: fromHost, url: isURL(path)}
	if wkey != "" {
		if t.cosigned, err = witness.Cosigned(msg, wkey); err != nil {
			printLine(e.stderr, "coily audit verify: FAILED: %s: %v", path, err)
			return nil, 1
		}
		t.witness = wkey[:strings.IndexByte(wkey+"+", '+')]
	}
	if k.maxAge != nil && *k.maxAge > 0 {
		if wkey == "" {
			return nil, usage(e, "audit verify: --max-age needs --witness-key")
		}
		if age := time.Since(t.cosigned); age > *k.maxAge {
			printLine(e.stderr, "coily audit verify: FAILED: %s: the witness cosigned this checkpoint of %d records at %s, %s ago, more than --max-age %s: an older checkpoint replayed hides the records after it",
				path, c.N, t.cosigned.UTC().Format(time.RFC3339), age.Round(time.Second), *k.maxAge)
			return nil, 1
		}
	}
	return t, 0
}

func isURL(path string) bool {
	return strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://")
}

// readWitnessed reads a checkpoint from a file, or from a witness's URL
// (GET <url>/checkpoint/<origin>, the origin the pinned key names).
func readWitnessed(path, vkey string) ([]byte, error) {
	if !isURL(path) {
		return regularfile.Read(path, audit.MaxCheckpoint+witness.MaxCosignature)
	}
	origin, _, _ := strings.Cut(vkey, "+")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return witness.Fetch(ctx, nil, path, origin)
}

func (t *treeCheck) json() map[string]any {
	return map[string]any{"origin": t.cp.Origin, "size": t.cp.N, "root": t.cp.Hash.String(),
		"log_size": t.now.N, "log_root": t.now.Hash.String(), "pinned_key": !t.fromHost, "witness": t.witness}
}

func (t *treeCheck) print(e *env) {
	printLine(e.stdout, "it holds exactly the %d records the checkpoint signed by %s commits to (root %s), and extends them to %d (root %s)",
		t.cp.N, t.cp.Origin, t.cp.Hash, t.now.N, t.now.Hash)
	printLine(e.stdout, "the checkpoint's size %d, the log's %d: %d records since it", t.cp.N, t.now.N, t.now.N-t.cp.N)
	if !t.hashFile {
		printLine(e.stdout, "no %s beside the log: its lines alone were checked", audit.TreeFile)
	}
	if t.fromHost {
		printLine(e.stdout, "checked with the key file on this host, not a pinned key: pass --key")
	}
	switch {
	case t.witness != "":
		printLine(e.stdout, "cosigned by the witness %s at %s", t.witness, t.cosigned.UTC().Format(time.RFC3339))
	case t.url:
		printLine(e.stdout, "the witness's cosignature was not checked: pass --witness-key")
	}
}
