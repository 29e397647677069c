package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// One name, one host. A host's name keys its audit records in etcd
// (audit/<host>/…) and names it in its leases: two processes started with
// one name would interleave their audit shipping and revoke each other's
// leases as leftovers. So a host claims hosts/<name> at start, create-only,
// under a lease of the claim's own, kept alive while it runs and revoked
// at Close (a host that dies frees it within HostClaimTTL).
//
// The claim carries the claiming host's id: a random id kept in its state
// directory (one state directory, one host: its lock keeps a second
// process out). A claim held under another id is another process's, and
// the start is refused (ErrHostTaken, naming it); one held under this
// host's own id is this host's previous run, whose lease has not expired
// yet (killed, not stopped): it is taken over at once, its lease revoked.

// dirHosts holds the hosts' claims on their names.
const dirHosts = "hosts/"

// HostClaimTTL is the term of a host's claim on its name: a host gone
// without Close frees its name this long after its last renewal.
const HostClaimTTL = 10 * time.Second

// ErrHostTaken reports a host name another live process holds.
var ErrHostTaken = errors.New("etcdstore: the host name is held by another coily")

// hostClaim is the value of hosts/<name>.
type hostClaim struct {
	ID       string    `json:"id"`
	Hostname string    `json:"hostname"` // the system's, to find the other process
	PID      int       `json:"pid"`
	Since    time.Time `json:"since"`
}

// claim is this store's hold on its host name.
type claim struct {
	mu     sync.Mutex
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	// lost is why the claim, lost while the host ran, could not be made
	// again: another process holds the name (a copy of this state
	// directory, or another host given this name while this one was cut
	// off). Health fails with it: the host admits nothing new.
	lost error
}

// claimLost is Health's error while another process holds this host's
// name, nil otherwise.
func (s *Store) claimLost() error {
	s.host.mu.Lock()
	defer s.host.mu.Unlock()
	if s.host.lost == nil {
		return nil
	}
	return fmt.Errorf("%w: this host's name was taken by another process: %w", store.ErrUnavailable, s.host.lost)
}

// ClaimHost claims hosts/<name> for this host, whose id is id (kept in
// its state directory), until Close. It is ErrHostTaken, naming the other
// holder and how to go on, when another host's id holds it; a claim of
// this host's own id (a previous run not yet expired) is taken over.
// While the host runs, a claim lost (cut off past HostClaimTTL) is made
// again on reconnect; log hears when that fails.
func (s *Store) ClaimHost(ctx context.Context, name, id string, log *slog.Logger) error {
	if err := CheckHostName(name); err != nil {
		return err
	}
	if id == "" {
		return errors.New("etcdstore: claim a host name: no host id")
	}
	key := s.prefix + dirHosts + name // CheckHostName: a name holds no '/'
	host, _ := os.Hostname()
	data, err := encode(key, hostClaim{ID: id, Hostname: host, PID: os.Getpid(), Since: time.Now().UTC()})
	if err != nil {
		return err
	}
	lease, err := s.claimOnce(ctx, key, id, data, true)
	if err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(context.Background())
	s.host.mu.Lock()
	s.host.lease, s.host.cancel = lease, cancel
	s.host.mu.Unlock()
	go s.keepClaim(kctx, key, id, data, lease, log)
	return nil
}

// claimOnce writes the claim under a new lease: create-only, or, at
// start (takeOver), over a claim of this host's own id at the revision it
// was read. While the host runs, a claim of its id it does not hold is
// another process's that has this host's id (a copied state directory):
// ErrHostTaken.
func (s *Store) claimOnce(ctx context.Context, key, id, data string, takeOver bool) (clientv3.LeaseID, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	g, err := s.cli.Grant(cctx, int64(HostClaimTTL/time.Second))
	if err != nil {
		return 0, s.fail("claim the host name", err)
	}
	// No claim while a migration writes the prefix (the marker checked
	// at Open may have come since): the host would read half a state.
	marker := s.prefix + keyMigrating
	noImport := clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)
	for {
		resp, err := s.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), noImport).
			Then(clientv3.OpPut(key, data, clientv3.WithLease(g.ID))).Else(clientv3.OpGet(key), clientv3.OpGet(marker)).Commit()
		if err != nil {
			return 0, s.fail("claim the host name", err)
		}
		if resp.Succeeded {
			return g.ID, nil
		}
		if len(resp.Responses[1].GetResponseRange().Kvs) > 0 {
			s.revoke(g.ID)
			if err := s.checkMigrating(ctx); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("etcdstore: %w", ErrMigrating)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // freed meanwhile
		}
		var held hostClaim
		if err := decode(key, kvs[0].Value, &held); err != nil {
			s.revoke(g.ID)
			return 0, err
		}
		if held.ID != id || !takeOver {
			s.revoke(g.ID)
			return 0, fmt.Errorf("%w: %s is held by the coily of %s (pid %d) since %s: give each host its own --host-name, "+
				"or stop the other (a host gone without stopping frees its name within %v; a copied state directory "+
				"shares its host id: remove its host-id file)", ErrHostTaken, key[len(s.prefix):],
				held.Hostname, held.PID, held.Since.Format(time.RFC3339), HostClaimTTL)
		}
		// This host's previous run: its lease outlived it.
		over, err := s.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision), noImport).
			Then(clientv3.OpPut(key, data, clientv3.WithLease(g.ID))).Commit()
		if err != nil {
			return 0, s.fail("take over the host name", err)
		}
		if over.Succeeded {
			if old := clientv3.LeaseID(kvs[0].Lease); old != 0 {
				s.revoke(old)
			}
			return g.ID, nil
		}
	}
}

// keepClaim keeps the claim's lease alive until ctx ends, and claims the
// name again (every second, while the cluster is out of reach) when the
// lease is lost.
func (s *Store) keepClaim(ctx context.Context, key, id, data string, lease clientv3.LeaseID, log *slog.Logger) {
	for {
		ch, err := s.cli.KeepAlive(ctx, lease)
		if err == nil {
			for range ch { // the client renews; the channel closes when the lease is lost
			}
		}
		if ctx.Err() != nil {
			return
		}
		for {
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if lease, err = s.claimOnce(ctx, key, id, data, false); err == nil {
				break
			}
			if errors.Is(err, ErrHostTaken) {
				s.host.mu.Lock()
				s.host.lost = err
				s.host.mu.Unlock()
			}
			if errors.Is(err, ErrHostTaken) || !errors.Is(err, store.ErrUnavailable) {
				log.Error("the claim on this host's name was lost and cannot be made again: admitting nothing new", "err", err)
			}
		}
		s.host.mu.Lock()
		s.host.lease, s.host.lost = lease, nil
		s.host.mu.Unlock()
	}
}

// releaseHost ends the claim and revokes its lease: the name is free.
func (s *Store) releaseHost() {
	s.host.mu.Lock()
	cancel, lease := s.host.cancel, s.host.lease
	s.host.cancel, s.host.lease = nil, 0
	s.host.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	s.revoke(lease)
}
