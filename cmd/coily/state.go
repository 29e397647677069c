package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/audit"
	"coily.dev/coily/cli"
	"coily.dev/coily/store"
)

// stateCmd is `coily state`: the subcommands work on the state file
// directly, with the server stopped (bbolt locks the file while it runs).
func stateCmd(a *cli.App) *cobra.Command {
	return group("state", "the state file, with the server stopped: check, rebuild, migrate to etcd",
		`Check the state file (coily.db: lockout and pause, the audit log's recorded head, nonces, rate buckets,
request records, keys) against the audit log, or rebuild it from what can be rebuilt and start locked out
(docs/operations.md).`,
		command(a, spec{use: "check", short: "check the state file against the audit log: its stops, the log's recorded head",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(_ context.Context, e *env) int { return stateCheck(e, e.global.StateDir) }
			}}),
		command(a, spec{use: "migrate", short: "copy the state that decides what runs from a state file into etcd, to serve with --state etcd://",
			long: `Copy what a state file holds of the state that decides what runs (lockout, pauses, rate buckets, signing keys,
relay records and unexpired nonces, dynamic-secret leases) into an etcd trust point that holds nothing yet, in
transactions, the stops first. Stop the server first: the file is read only, and refused while a server holds it.
The audit head and request records stay in the file. docs/scale.md says how to move a host to etcd.`,
			example: `  coily state migrate --to etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/team \
    --etcd-ca /etc/coily/etcd-ca.pem --etcd-cert /etc/coily/etcd-host1.pem --etcd-key /etc/coily/etcd-host1-key.pem \
    --state-seal-key /etc/coily/state-seal.key --dry-run`,
			flags: func(fs *pflag.FlagSet) runFunc {
				f := registerMigrateFlags(fs)
				return func(ctx context.Context, e *env) int { return stateMigrate(ctx, e, f) }
			}}),
		command(a, spec{use: "rebuild", short: "set a damaged state file aside and start a new one, locked out",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(_ context.Context, e *env) int { return stateRebuild(e, e.global.StateDir) }
			}}),
	)
}

// stateCheck opens the state file (bbolt's consistency check included),
// reads the stop controls, and compares them with the audit log's; it
// checks that the log still holds the head the state file recorded. It
// exits 0 when the file is sound and agrees with the log.
func stateCheck(e *env, dir string) int {
	path := filepath.Join(dir, "coily.db")
	auditDir := filepath.Join(dir, "audit")
	ok := true
	say := func(good bool, format string, args ...any) {
		mark := "ok   "
		if !good {
			mark, ok = "FAIL ", false
		}
		printLine(e.stdout, mark+format, args...)
	}
	logged, lerr := audit.LastStops(auditDir)
	if errors.Is(lerr, os.ErrNotExist) {
		logged, lerr = audit.Stops{}, nil // no log yet
	}
	say(lerr == nil, "audit log: last lockout state %s", describeLogged(logged.Lockout, lerr))
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		say(false, "%s is missing: the server will start locked out if the audit log has records", path)
		return exitFor(ok)
	}
	db, err := store.Open(path)
	if err != nil {
		if errors.Is(err, store.ErrDamaged) {
			say(false, "%v", err)
		} else {
			say(false, "%s: %v (is the server running? stop it first)", path, err)
		}
		return exitFor(ok)
	}
	defer db.Close()
	say(!db.Created(), "%s opens and passes bbolt's check%s", path, map[bool]string{true: " (but it was empty)", false: ""}[db.Created()])
	st, err := db.Stops()
	if err != nil {
		say(false, "stop state: %v", err)
		return exitFor(ok)
	}
	say(true, "lockout %s, pause %s, %d principal(s) paused themselves", onOff(st.Lockout.Active), onOff(st.Pause.Active), countActive(st.SelfPauses))
	for _, d := range stopDisagreements(st, logged) {
		say(false, "%s: the server restores it at start", d)
	}
	checkHead(db, auditDir, say)
	return exitFor(ok)
}

// stopDisagreements lists the stops the audit log has active and the state
// file has not.
func stopDisagreements(st store.Stops, logged audit.Stops) []string {
	var out []string
	if l := logged.Lockout; l.Active && !st.Lockout.Active {
		out = append(out, fmt.Sprintf("the audit log's last word is a lockout (%s) the state file does not have", l.ID))
	}
	if p := logged.Pause; p.Active && !st.Pause.Active {
		out = append(out, fmt.Sprintf("the audit log's last word is a pause (%s) the state file does not have", p.ID))
	}
	for _, who := range slices.Sorted(maps.Keys(logged.SelfPauses)) {
		if !st.SelfPauses[who].Active {
			out = append(out, fmt.Sprintf("the audit log has %s paused itself (%s), the state file not", cli.ShellWord(who), logged.SelfPauses[who].ID))
		}
	}
	return out
}

// checkHead says whether the audit log still holds the head the state
// file recorded.
func checkHead(db *store.DB, auditDir string, say func(bool, string, ...any)) {
	h, err := db.AuditHead()
	switch {
	case errors.Is(err, store.ErrNotFound):
		say(true, "audit head: none recorded yet (the server records it when it next starts)")
		return
	case err != nil:
		say(false, "%v", err)
		return
	}
	if err := audit.CheckHead(auditDir, audit.Head{Seq: h.Seq, Hash: h.Hash}); err != nil {
		say(false, "%v (the head %s recorded at %s): the server starts locked out; find out what removed them, then unlock",
			err, db.Path(), h.At.UTC().Format(time.RFC3339))
		return
	}
	say(true, "the audit log holds the head the state file recorded (record %d)", h.Seq)
}

func countActive(m map[string]store.Stop) int {
	n := 0
	for _, s := range m {
		if s.Active {
			n++
		}
	}
	return n
}

// stateRebuild keeps a damaged state file aside and makes a new one that
// is locked out: what cannot be rebuilt (sandbox keys, rate buckets, relay
// records) is gone, so nothing runs until a human has looked and unlocked.
func stateRebuild(e *env, dir string) int {
	// Never beside a running server: it would keep the old file open and
	// carry on as if nothing had happened.
	lock, code := takeStateDir(e, "coily state rebuild", dir)
	if lock == nil {
		return code
	}
	defer lock.Close()
	path := filepath.Join(dir, "coily.db")
	aside := ""
	if _, err := os.Stat(path); err == nil {
		aside = fmt.Sprintf("%s.damaged-%s", path, time.Now().UTC().Format("20060102T150405Z"))
		if err := os.Rename(path, aside); err != nil {
			printLine(e.stderr, "coily state rebuild: %v", err)
			return 1
		}
	}
	db, err := store.Open(path)
	if err != nil {
		printLine(e.stderr, "coily state rebuild: %v (is the server running? stop it first)", err)
		return 1
	}
	defer db.Close()
	who := localPrincipal()
	reason := "state rebuilt by `coily state rebuild`: sandbox keys, rate buckets, relay records and unrevoked leases (they end at their TTL; the audit log names them) are gone; rotate keys (coily key rotate), then unlock"
	if err := db.SetLockout(store.Stop{Active: true, By: who, Reason: reason, Since: time.Now()}); err != nil {
		printLine(e.stderr, "coily state rebuild: %v", err)
		return 1
	}
	log, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err == nil {
		_, err = log.Append(context.Background(), audit.Record{Event: audit.EventStateRebuild, Principal: who, Transport: "local",
			Decision: "allow", Reason: reason, Details: map[string]string{"kept_aside": aside, audit.CheckpointLockout: "active"}})
		if err == nil {
			// The new state file starts from the log as it is.
			h := log.Head()
			if err = db.SetAuditHead(store.AuditHead{Seq: h.Seq, Hash: h.Hash, At: time.Now()}); err != nil {
				err = fmt.Errorf("recorded, but its head could not be: %w", err)
			}
		}
		log.Close()
	}
	if err != nil {
		printLine(e.stderr, "coily state rebuild: the new state is locked out, but the audit log could not record it: %v", err)
		return 1
	}
	if aside != "" {
		printLine(e.stdout, "kept the old state file as %s", aside)
	}
	printLine(e.stdout, "new state file %s, locked out; start the server, rotate sandbox keys, then unlock", path)
	return 0
}

func describeLogged(l audit.Stop, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case !l.Known:
		return "unknown (no lockout or unlock recorded)"
	case l.Active:
		return fmt.Sprintf("locked out by %s (%s)", l.By, l.ID)
	}
	return fmt.Sprintf("unlocked by %s (%s)", l.By, l.ID)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func exitFor(ok bool) int {
	if ok {
		return 0
	}
	return 1
}

// localPrincipal names the user running the CLI as the audit log does.
func localPrincipal() string {
	if u, err := user.Current(); err == nil {
		return "local:" + u.Username
	}
	return fmt.Sprintf("local:uid=%d", os.Getuid())
}
