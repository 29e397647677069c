package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// keyMigrating is the marker `coily state migrate` (Import) writes first,
// create-only into an empty prefix, and deletes last: while it is there the
// prefix holds part of a state (the lockout may be there and the keys not,
// or the reverse), and no host opens it (Open: ErrMigrating).
const keyMigrating = "migrating"

// ErrMigrating reports a prefix an import is writing, or one an import
// cut off left half written. It wraps store.ErrUnavailable: a host that
// cannot read the whole state refuses (state-unavailable).
var ErrMigrating = fmt.Errorf("%w: a migration into this trust point is under way or was cut off", store.ErrUnavailable)

// migrating is the marker's value: who migrates, and since when.
type migrating struct {
	Host  string    `json:"host"`
	Since time.Time `json:"since"`
}

// checkMigrating is ErrMigrating, naming the marker's host and time and
// how to go on, while the prefix holds the marker.
func (s *Store) checkMigrating(ctx context.Context) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.prefix+keyMigrating)
	if err != nil {
		return s.fail("read the migration marker", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	var m migrating
	if err := decode(s.prefix+keyMigrating, resp.Kvs[0].Value, &m); err != nil {
		return err
	}
	return fmt.Errorf("etcdstore: %w: %s started it at %s; wait for `coily state migrate` to end, or, if it failed, "+
		"empty the prefix (etcdctl del --prefix %s) and migrate again", ErrMigrating, m.Host,
		m.Since.UTC().Format(time.RFC3339), s.prefix)
}

// beginMigration writes the marker into an empty prefix (ErrNotEmpty when
// the prefix holds anything): from here only this import writes there. It
// returns the marker's revision, which every later transaction compares.
func (s *Store) beginMigration(ctx context.Context, now time.Time) (int64, error) {
	host, _ := os.Hostname()
	data, err := encode(keyMigrating, migrating{Host: host, Since: now.UTC()})
	if err != nil {
		return 0, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(s.prefix).WithPrefix(), "=", 0)).
		Then(clientv3.OpPut(s.prefix+keyMigrating, data)).Commit()
	switch {
	case err != nil:
		return 0, s.fail("import: write the migration marker", err)
	case !resp.Succeeded:
		return 0, fmt.Errorf("%w: keys appeared under %s meanwhile", ErrNotEmpty, s.prefix)
	}
	return resp.Header.Revision, nil
}

// ownsMigration is the compare that the marker is still the one this
// import wrote at rev.
func (s *Store) ownsMigration(rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.prefix+keyMigrating), "=", rev)
}

// endMigration deletes the marker this import wrote at rev: the state is
// whole.
func (s *Store) endMigration(ctx context.Context, rev int64) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).If(s.ownsMigration(rev)).Then(clientv3.OpDelete(s.prefix + keyMigrating)).Commit()
	switch {
	case err != nil:
		return s.fail("import: delete the migration marker", err)
	case !resp.Succeeded:
		return errors.New("etcdstore: import: the migration marker was removed or replaced meanwhile: look, empty the prefix, import again")
	}
	return nil
}
