// Package auditship gives a fleet one view of its hosts' audit logs. Each
// host keeps its own chained log (package audit), the record of what it
// decided; a Shipper copies each of its records, as its exact line, to
// etcd (store/etcdstore: audit/<host>/<seq>), and the readers (Tail,
// Follow, and Feed for the web console) show every host's records merged
// by time, each naming its host.
//
// Invariants:
//   - shipping is asynchronous: an audit write never waits for etcd, and
//     a host cut from etcd audits as before and ships its backlog once it
//     is back. The local log stays the record; the copy in etcd is a view;
//   - only durable records are shipped (audit.Log.Head): a line a power
//     cut could still take back never reaches etcd; and only those naming
//     this host (records written before it had its name stay local);
//   - each record is created once under its key; a restart resumes after
//     the last record etcd holds of this host, after checking that it is
//     this log's record: a copy that is not (another host ships under this
//     host's name, a log begun again) stops the shipping, logged, rather
//     than mixing two chains under one name;
//   - a record read back is untrusted: decoded strictly, its host and seq
//     those of its key, consecutive records of a host chained, or
//     store.ErrCorrupt.
package auditship

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/store/etcdstore"
)

// Defaults for the Config fields left zero.
const (
	DefaultInterval = 250 * time.Millisecond
	// maxHeld bounds the records read ahead of shipping.
	maxHeld = etcdstore.MaxAuditBatch * 4
)

// Config says what to ship where.
type Config struct {
	Store *etcdstore.Store
	Log   *audit.Log
	// Host is this host's name: the records' Host (audit.Config.Host) and
	// their keys'.
	Host string
	// Interval is how often the log is read for new records, and the
	// wait before trying again after etcd failed (DefaultInterval when
	// zero).
	Interval time.Duration
	Logger   *slog.Logger
}

// Shipper copies a host's audit log to etcd until stopped.
type Shipper struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	shipped uint64 // the last seq etcd holds
	err     error  // why shipping stopped, if it did
}

// Start ships cfg.Log's records from the one after the last etcd holds of
// cfg.Host, until Stop.
func Start(cfg Config) (*Shipper, error) {
	if err := etcdstore.CheckHostName(cfg.Host); err != nil {
		return nil, fmt.Errorf("auditship: %w", err)
	}
	if cfg.Store == nil || cfg.Log == nil {
		return nil, errors.New("auditship: a store and a log are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Shipper{cfg: cfg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := s.run(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("audit shipping stopped: the fleet's view lacks this host's records from here on", "host", cfg.Host, "err", err)
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// Stop stops shipping and waits for it.
func (s *Shipper) Stop() {
	s.cancel()
	<-s.done
}

// Shipped is the last seq of this host's log etcd is known to hold, and
// why shipping stopped (nil while it goes on).
func (s *Shipper) Shipped() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shipped, s.err
}

func (s *Shipper) setShipped(seq uint64) {
	s.mu.Lock()
	s.shipped = seq
	s.mu.Unlock()
}

// run resumes after the last record shipped and ships until ctx ends; it
// returns an error only for what trying again cannot mend.
func (s *Shipper) run(ctx context.Context) error {
	after, err := s.resume(ctx)
	if err != nil {
		return err
	}
	s.setShipped(after)
	f := audit.NewFollower(s.cfg.Log.Dir(), after)
	var held []etcdstore.AuditLine
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		held, err = s.readAhead(f, held)
		if err != nil {
			return err
		}
		n, err := s.ship(ctx, held)
		switch {
		case errors.Is(err, etcdstore.ErrAuditDiffers):
			return err
		case err != nil && ctx.Err() == nil:
			s.cfg.Logger.Warn("audit shipping: etcd failed; trying again", "host", s.cfg.Host, "err", err)
		}
		held = held[n:]
		if n == etcdstore.MaxAuditBatch {
			continue // a backlog: on at once
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// errFull ends a read once enough records are held.
var errFull = errors.New("held")

// readAhead reads new records into held, up to maxHeld.
func (s *Shipper) readAhead(f *audit.Follower, held []etcdstore.AuditLine) ([]etcdstore.AuditLine, error) {
	if len(held) >= maxHeld {
		return held, nil
	}
	err := f.ReadNew(func(r audit.Record, line []byte) error {
		if r.Host != s.cfg.Host {
			return nil // written before the log had this name: not this name's to ship
		}
		held = append(held, etcdstore.AuditLine{Seq: r.Seq, Hash: r.Hash, Time: r.Time, Line: append([]byte(nil), line...)})
		if len(held) >= maxHeld {
			return errFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		return held, fmt.Errorf("auditship: read the log: %w", err)
	}
	return held, nil
}

// ship ships the first batch of held that is durable, and says how many
// records it shipped.
func (s *Shipper) ship(ctx context.Context, held []etcdstore.AuditLine) (int, error) {
	durable := s.cfg.Log.Head().Seq
	n := 0
	for n < len(held) && n < etcdstore.MaxAuditBatch && held[n].Seq <= durable {
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if err := s.cfg.Store.ShipAudit(ctx, s.cfg.Host, held[:n]); err != nil {
		return 0, err
	}
	s.setShipped(held[n-1].Seq)
	return n, nil
}

// resume is the seq after which to ship: the last record etcd holds of
// this host, once it is known to be this log's (0 when etcd holds none).
// It waits out an unreachable etcd.
func (s *Shipper) resume(ctx context.Context) (uint64, error) {
	for {
		last, ok, err := s.cfg.Store.AuditLast(ctx, s.cfg.Host)
		switch {
		case err == nil && !ok:
			return 0, nil
		case err == nil:
			return last.Seq, s.same(last)
		case ctx.Err() != nil:
			return 0, nil
		}
		s.cfg.Logger.Warn("audit shipping: cannot read where it stopped; trying again", "host", s.cfg.Host, "err", err)
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(s.cfg.Interval):
		}
	}
}

// same checks that the log holds last, the record etcd holds of it.
func (s *Shipper) same(last etcdstore.AuditRecord) error {
	if s.cfg.Log.Records() < last.Seq {
		return fmt.Errorf("auditship: %w: etcd holds record %d of host %s, past this log's last (%d): another host ships under this name, or the log began again",
			etcdstore.ErrAuditDiffers, last.Seq, s.cfg.Host, s.cfg.Log.Records())
	}
	mine, err := audit.Find(s.cfg.Log.Dir(), last.ID)
	if err != nil {
		return fmt.Errorf("auditship: record %d, the last etcd holds: %w", last.Seq, err)
	}
	if mine.Hash != last.Hash {
		return fmt.Errorf("auditship: %w: record %d of host %s", etcdstore.ErrAuditDiffers, last.Seq, s.cfg.Host)
	}
	return nil
}
