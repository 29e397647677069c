package main

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	berrors "go.etcd.io/bbolt/errors"

	"coily.dev/coily/cli"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// migrateLockWait bounds how long `state migrate` waits for the state
// file's lock: a server holding it holds it for as long as it runs.
const migrateLockWait = time.Second

// migrateFlags are `coily state migrate`'s.
type migrateFlags struct {
	from, to *string
	dry      *bool
	etcd     *etcdFlags
	sealKey  *string
}

func registerMigrateFlags(fs *pflag.FlagSet) *migrateFlags {
	f := &migrateFlags{
		from: stringFlag(fs, "from", "COILY_MIGRATE_FROM", "", "the state file to copy from (default: coily.db in the state directory)"),
		to:   stringFlag(fs, "to", "COILY_STATE", "", "the trust point to copy into: etcd://HOST:PORT,HOST:PORT/CLUSTER, as serve's --state (required)"),
		dry:  boolFlag(fs, "dry-run", "COILY_MIGRATE_DRY_RUN", "read the file, check the target is empty, print what would be copied; write nothing"),
	}
	f.etcd = registerEtcdFlags(fs, f.to)
	f.sealKey = sealKeyFlag(fs)
	return f
}

// stateMigrate copies the shared state of a state file (store.Shared:
// stops, rate buckets, keys, relay records and nonces, leases) into an
// etcd trust point that holds nothing yet. The file is opened read-only;
// a server holding it makes it refuse (exit 3). The local part (audit
// head, request records) stays in the file.
func stateMigrate(ctx context.Context, e *env, f *migrateFlags) int {
	if *f.to == "" {
		return usage(e, "state migrate: --to etcd://HOST:PORT,…/CLUSTER is required")
	}
	cfg, err := f.etcd.conn()
	if err == nil && *f.sealKey == "" {
		err = errors.New("--state-seal-key is required: the signing keys are sealed before they leave this host")
	}
	if err == nil {
		cfg.SealKey, err = readSealKey(*f.sealKey)
	}
	if err != nil {
		return usage(e, "state migrate: %v", err)
	}
	path := *f.from
	if path == "" {
		path = filepath.Join(e.global.StateDir, "coily.db")
	}
	db, err := store.OpenReadOnly(path, migrateLockWait)
	if errors.Is(err, berrors.ErrTimeout) {
		printLine(e.stderr, "coily state migrate: %v: stop the server first (it holds the file)", err)
		return cli.ExitStateBusy
	}
	if err != nil {
		printLine(e.stderr, "coily state migrate: %v", err)
		return 1
	}
	defer db.Close()
	now := time.Now()
	snap, err := db.Export(now)
	if err != nil {
		printLine(e.stderr, "coily state migrate: %v", err)
		return 1
	}
	st, err := etcdstore.Open(ctx, cfg)
	if err != nil {
		printLine(e.stderr, "coily state migrate: %v", err)
		return 1
	}
	defer st.Close()
	done, err := st.Import(ctx, snap, now, *f.dry)
	if err != nil {
		printLine(e.stderr, "coily state migrate: %v", err)
		return 1
	}
	printMigrated(e, path, *f.to, done, *f.dry)
	return 0
}

// printMigrated says what was copied: counts, never a secret.
func printMigrated(e *env, from, to string, n etcdstore.Imported, dry bool) {
	verb := "copied"
	if dry {
		verb = "would copy (dry run: nothing written)"
	}
	printLine(e.stdout, "%s from %s to %s:", verb, from, to)
	printLine(e.stdout, "  lockout %s, pause %s, %d principal(s) paused themselves", onOff(n.Lockout), onOff(n.Pause), n.SelfPauses)
	printLine(e.stdout, "  %d rate bucket(s), %d signing key(s) (sealed with the seal key), %d dynamic-secret lease(s)", n.Rates, n.Keys, n.Leases)
	printLine(e.stdout, "  %d relay record(s) (%d older than 24 h left out), %d unexpired nonce(s)", n.Relays, n.ExpiredRelays, n.Nonces)
	if !dry {
		printLine(e.stdout, "  in %d transaction(s)", n.Transactions)
	}
	printLine(e.stdout, "not copied: the audit head and the request records stay in %s (each host's own)", from)
}
