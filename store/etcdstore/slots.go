package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// Defaults for the slot fields of Config left zero.
const (
	// DefaultSlotTTL is the term of a host's hold on its slots: a host
	// cut off for that long has its slots freed.
	DefaultSlotTTL = 15 * time.Second
	// DefaultSlotFence is how long before its hold may expire a host
	// that could not renew it stops its commands (OnLost), counted from
	// when the last renewal answered was sent: more than
	// stops.FenceGrace.
	DefaultSlotFence = 4 * time.Second
)

// ledger is the concurrency slots held by this host, in etcd: one key per
// slot, slots/held/<host>/<n>, under one lease of this host's (its hold),
// renewed as long as the host reaches the cluster.
type ledger struct {
	host  string // random, per Store: the hosts' keys never meet
	ttl   time.Duration
	fence time.Duration
	seq   atomic.Uint64
	// lock serialises this host's holds: concurrent holds from one host
	// would only fail each other's compares.
	lock chan struct{}

	// retries are the frees retried in the background (free).
	retries sync.WaitGroup

	mu     sync.Mutex
	sess   *session // nil until the first hold, or once lost
	lost   []func()
	closed bool
}

// session is one lease of this host's and what keeps it alive.
type session struct {
	id     clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{} // closed once renew has returned
	lost   bool          // guarded by ledger.mu
}

func (l *ledger) init(cfg Config) error {
	l.ttl, l.fence = cmp(cfg.SlotTTL, DefaultSlotTTL), cmp(cfg.SlotFence, DefaultSlotFence)
	if l.ttl < 2*time.Second || l.ttl%time.Second != 0 || l.fence >= l.ttl {
		return fmt.Errorf("etcdstore: slot term %v must be whole seconds, at least 2, and more than its fence %v", l.ttl, l.fence)
	}
	b := make([]byte, 16)
	rand.Read(b)
	l.host = hex.EncodeToString(b)
	l.lock = make(chan struct{}, 1)
	return nil
}

// OnLost registers f, called (once per lease) when this host could not
// renew its hold on its slots for its term minus the fence: they may be
// freed soon, so their commands must stop. It is also called when etcd
// says the lease is gone. Closing the store calls nothing.
func (s *Store) OnLost(f func()) {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	s.ledger.lost = append(s.ledger.lost, f)
}

// Hold reads every slot held (and the guard key's revision) at one
// revision, tallies those fits looks at, and, if fits allows, writes this
// slot under this host's lease in a transaction that requires the guard
// to be unchanged and bumps it: of hosts holding at once, one writes and
// the others read again. A free only loosens, so it needs no guard.
//
// The guard is one key for every principal: the server's cap and a
// rule's count every principal's slots, so takes of two principals each
// decide on the other's; a guard per principal lets both commit past the
// server's cap (TestSlotCapsHoldAcrossHosts).
func (s *Store) Hold(ctx context.Context, slot store.Slot, fits func(store.Tally) error) (func() error, error) {
	if slot.Principal == "" || slot.Rule == "" {
		return nil, errors.New("etcdstore: a slot without principal or rule")
	}
	val, err := encode("slot", slot)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	select {
	case s.ledger.lock <- struct{}{}:
		defer func() { <-s.ledger.lock }()
	case <-ctx.Done():
		return nil, s.fail("hold slot", ctx.Err())
	}
	key := s.prefix + dirHeld + s.ledger.host + "/" + strconv.FormatUint(s.ledger.seq.Add(1), 10)
	var refused error
	var under *session // the lease the slot was written under
	err = s.retryIn(ctx, "hold slot", func(ctx context.Context) error {
		refused = nil
		sess, err := s.session(ctx)
		if err != nil {
			return err
		}
		resp, err := s.cli.Get(ctx, s.prefix+dirSlots, clientv3.WithPrefix())
		if err != nil {
			return err
		}
		t, guard, err := s.tally(resp.Kvs, slot)
		if err != nil {
			return err
		}
		if refused = fits(t); refused != nil {
			return nil
		}
		g := s.prefix + keySlotGuard
		r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(g), "=", guard)).
			Then(clientv3.OpPut(g, ""), clientv3.OpPut(key, val, clientv3.WithLease(sess.id))).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.lose(sess) // expired in etcd: every slot under it is freed
			return errConflict
		case err != nil:
			return err
		case !r.Succeeded:
			return errConflict
		}
		under = sess
		return nil
	})
	if err != nil || refused != nil {
		return nil, errors.Join(err, refused)
	}
	return func() error { return s.free(key, under) }, nil
}

// free deletes one held slot's key. One that cannot be deleted now is
// retried every second in the background until it is, or until the lease
// it is under is lost or revoked (the key goes with it): a slot is never
// held for good by a command that ended.
func (s *Store) free(key string, sess *session) error {
	err := s.delete(key)
	if err == nil {
		return nil
	}
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.retries.Add(1)
		go s.freeLater(key, sess)
	}
	return err
}

func (s *Store) delete(key string) error {
	ctx, cancel := s.call(context.Background())
	defer cancel()
	if _, err := s.cli.Delete(ctx, key); err != nil {
		return s.fail("free slot", err)
	}
	return nil
}

func (s *Store) freeLater(key string, sess *session) {
	defer s.ledger.retries.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-sess.done:
			return
		case <-t.C:
		}
		if s.delete(key) == nil {
			return
		}
	}
}

// tally counts the slots held as a claim for slot sees them, and returns
// the guard's revision (0: never written). A key or value that is not a
// held slot is ErrCorrupt: a slot must never go uncounted.
func (s *Store) tally(kvs []*mvccpb.KeyValue, slot store.Slot) (store.Tally, int64, error) {
	var t store.Tally
	var guard int64
	for _, kv := range kvs {
		k := string(kv.Key)
		if k == s.prefix+keySlotGuard {
			guard = kv.ModRevision
			continue
		}
		if err := heldKey(s.prefix+dirHeld, k); err != nil {
			return t, 0, err
		}
		var h store.Slot
		if err := decode(k, kv.Value, &h); err != nil {
			return t, 0, err
		}
		if h.Principal == "" || h.Rule == "" {
			return t, 0, fmt.Errorf("%w: %s: a slot without principal or rule", store.ErrCorrupt, k)
		}
		t.Count(slot, h)
	}
	return t, guard, nil
}

// heldKey checks that key is dir + <host>/<n>: two names, nothing else.
func heldKey(dir, key string) error {
	rest, ok := strings.CutPrefix(key, dir)
	host, _, two := strings.Cut(rest, "/")
	if !ok || !two {
		return fmt.Errorf("%w: key %q is not a held slot under %s", store.ErrCorrupt, key, dir)
	}
	if _, err := unname(dir, dir+host); err != nil {
		return err
	}
	_, err := unname(dir+host+"/", key)
	return err
}

// session is this host's lease, granted (and kept alive) on first use and
// again after one is lost.
func (s *Store) session(ctx context.Context) (*session, error) {
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("etcdstore: closed")
	}
	if l.sess != nil && !l.sess.lost {
		return l.sess, nil
	}
	sent := time.Now()
	g, err := s.cli.Grant(ctx, int64(l.ttl/time.Second))
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	sess := &session{id: g.ID, cancel: cancel, done: make(chan struct{})}
	l.sess = sess
	go s.renew(kctx, sess, sent, time.Duration(g.TTL)*time.Second)
	return sess, nil
}

// renewal is one keep-alive's outcome: when it was sent, and the lease's
// term from then (err nil).
type renewal struct {
	sent time.Time
	ttl  time.Duration
	err  error
}

// renew keeps sess's lease alive: a keep-alive every third of its term,
// each sent on its own (a slow answer delays none of the next), and the
// fence due its term minus the fence after the last renewal answered was
// *sent*: the members renewed the lease when they received it, later
// than that, so the lease expires at least the fence after the fence is
// due. Counted from the answer, a slow answer would put the fence after
// the lease's expiry. sess is lost when the fence is due, or when etcd
// says the lease is gone.
func (s *Store) renew(ctx context.Context, sess *session, sent time.Time, ttl time.Duration) {
	var calls sync.WaitGroup
	defer close(sess.done)
	defer calls.Wait()
	fence := time.NewTimer(time.Until(sent.Add(ttl - s.ledger.fence)))
	defer fence.Stop()
	every := time.NewTicker(max(ttl/3, 100*time.Millisecond))
	defer every.Stop()
	due := sent.Add(ttl - s.ledger.fence)
	answers := make(chan renewal, 8)
	for {
		select {
		case <-ctx.Done():
			return
		case <-fence.C:
			s.lose(sess)
			return
		case <-every.C:
			calls.Go(func() { s.keepAlive(ctx, sess.id, ttl, answers) })
		case r := <-answers:
			switch {
			case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
				s.lose(sess)
				return
			case r.err != nil:
				continue // the next tries again; the fence stays due
			}
			if d := r.sent.Add(r.ttl - s.ledger.fence); d.After(due) {
				due = d
				fence.Reset(time.Until(due))
			}
		}
	}
}

// keepAlive sends one keep-alive of lease id, stamped with when it was
// sent, and reports it on answers unless ctx has ended. An answer later
// than the term is of no use: the call is bounded by it.
func (s *Store) keepAlive(ctx context.Context, id clientv3.LeaseID, ttl time.Duration, answers chan<- renewal) {
	cctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	r := renewal{sent: time.Now()}
	resp, err := s.cli.KeepAliveOnce(cctx, id)
	switch {
	case err != nil:
		r.err = err
	case resp.TTL <= 0:
		r.err = rpctypes.ErrLeaseNotFound
	default:
		r.ttl = time.Duration(resp.TTL) * time.Second
	}
	select {
	case answers <- r:
	case <-ctx.Done():
	}
}

// lose marks sess lost (the next hold grants another lease) and calls the
// OnLost functions, unless the store is closing.
func (s *Store) lose(sess *session) {
	l := &s.ledger
	l.mu.Lock()
	if sess.lost {
		l.mu.Unlock()
		return
	}
	sess.lost = true
	closed, fs := l.closed, slices.Clone(l.lost)
	l.mu.Unlock()
	sess.cancel()
	if closed {
		return
	}
	for _, f := range fs {
		f()
	}
}

// closeLedger ends the renewals and revokes the lease (bounded, best
// effort: otherwise it expires), freeing this host's slots at once.
func (s *Store) closeLedger() {
	l := &s.ledger
	l.mu.Lock()
	was := l.closed
	l.closed = true
	sess := l.sess
	l.mu.Unlock()
	if was || sess == nil {
		return
	}
	sess.cancel()
	<-sess.done
	l.retries.Wait()
	ctx, cancel := s.call(context.Background())
	defer cancel()
	_, _ = s.cli.Revoke(ctx, sess.id)
}
