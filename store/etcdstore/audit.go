package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/audit"
	"coily.dev/coily/store"
)

// The fleet's audit view: each host ships the records of its own log
// (package fleet/auditship) to
//
//	audit/<host>/<seq, 20 digits>   the record's line as written, without its '\n'
//	audithosts/<host>               {seq, hash}: the last record shipped
//
// Each record is created once (CreateRevision 0) under a lease of the
// hour its retention ends in; the host's key lists the hosts for readers.
// A record read back is untrusted bytes (another host wrote it, or
// whoever can write etcd): decodeAudit checks it strictly.
const (
	dirAudit      = "audit/"
	dirAuditHosts = "audithosts/"
	// auditBucket is the width of the lease buckets of shipped records.
	auditBucket = time.Hour
	seqDigits   = 20 // every uint64
)

// Limits of shipping.
const (
	// MaxAuditLine bounds one shipped record's line: a longer value read
	// back is corrupt, and a longer record is not shipped.
	MaxAuditLine = 256 << 10
	// MaxAuditBatch bounds the records of one transaction (etcd allows
	// 128 operations a transaction by default).
	MaxAuditBatch = 100
	// maxAuditBatchBytes keeps a batch under etcd's request size (1.5 MiB
	// by default).
	maxAuditBatchBytes = 1 << 20
	// DefaultAuditTailBytes is Config.AuditTailBytes's default: the
	// records one AuditTail keeps, their lines in all.
	DefaultAuditTailBytes = 16 << 20
	// DefaultAuditKeep is how long a shipped record is kept when
	// Config.AuditKeep is zero.
	DefaultAuditKeep = 7 * 24 * time.Hour
)

// ErrAuditDiffers reports a record etcd holds under a host's key that is
// not the one this host's log holds at that seq: another host ships under
// the same name, or the copy was written by someone else. It wraps
// store.ErrCorrupt.
var ErrAuditDiffers = fmt.Errorf("%w: the shipped record differs from the log's", store.ErrCorrupt)

// CheckHostName reports whether h can name a host in the audit view: 1 to
// 64 letters, digits, '.', '_' or '-' (not "." or "..").
func CheckHostName(h string) error {
	if h == "" || len(h) > 64 || h == "." || h == ".." {
		return fmt.Errorf("host name %q: 1 to 64 letters, digits, '.', '_' or '-'", h)
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("host name %q holds %q: 1 to 64 letters, digits, '.', '_' or '-'", h, r)
		}
	}
	return nil
}

// AuditLine is one record of a host's log as written (Line, without its
// '\n'), with its Seq, Hash and Time.
type AuditLine struct {
	Seq  uint64
	Hash string // the record's self-hash (Record.Hash)
	Time time.Time
	Line []byte
}

// AuditRecord is a record read back from etcd: decoded, its host and seq
// those of its key, and the SHA-256 of its line (what the host's next
// record's Prev holds).
type AuditRecord struct {
	audit.Record
	LineHash string
	// Size is the line's length, in bytes.
	Size int
}

func (s *Store) auditKey(host string, seq uint64) string {
	return fmt.Sprintf("%s%s%s/%0*d", s.prefix, dirAudit, host, seqDigits, seq)
}

// ShipAudit copies lines of host's log (oldest first, consecutive) to
// etcd, in transactions of at most MaxAuditBatch records, each created
// only where its key never was. A record already there with the same
// line is skipped (shipped before a restart); one with another line is
// ErrAuditDiffers, and nothing of its transaction is written. A line
// whose retention (Config.AuditKeep from its time) has passed is not
// shipped. A line
// longer than MaxAuditLine is an error.
func (s *Store) ShipAudit(ctx context.Context, host string, lines []AuditLine) error {
	if err := CheckHostName(host); err != nil {
		return fmt.Errorf("etcdstore: ship audit: %w", err)
	}
	keep := s.auditKeep
	for len(lines) > 0 {
		n, size := 0, 0
		for n < len(lines) && n < MaxAuditBatch && (n == 0 || size+len(lines[n].Line) <= maxAuditBatchBytes) {
			if len(lines[n].Line) > MaxAuditLine {
				return fmt.Errorf("etcdstore: ship audit: record %d of %s is %d bytes, more than %d", lines[n].Seq, host, len(lines[n].Line), MaxAuditLine)
			}
			size += len(lines[n].Line)
			n++
		}
		if err := s.shipBatch(ctx, host, lines[:n], keep); err != nil {
			return err
		}
		lines = lines[n:]
	}
	return nil
}

// shipBatch ships at most MaxAuditBatch lines in one transaction, then
// the host's last shipped record in the same.
func (s *Store) shipBatch(ctx context.Context, host string, lines []AuditLine, keep time.Duration) error {
	now := time.Now()
	live := slices.DeleteFunc(slices.Clone(lines), func(l AuditLine) bool { return !l.Time.Add(keep).After(now) })
	if len(live) == 0 {
		return nil
	}
	last := live[len(live)-1]
	head, err := encode(dirAuditHosts+host, map[string]any{"seq": last.Seq, "hash": last.Hash})
	if err != nil {
		return err
	}
	return s.retryIn(ctx, "ship audit", func(ctx context.Context) error {
		cctx, cancel := s.call(ctx)
		defer cancel()
		var ifs []clientv3.Cmp
		var puts, gets []clientv3.Op
		var leases []clientv3.LeaseID
		for _, l := range live {
			lease, err := s.lease(cctx, l.Time.Add(keep), auditBucket)
			if err != nil {
				return err
			}
			leases = append(leases, lease)
			k := s.auditKey(host, l.Seq)
			ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			puts = append(puts, clientv3.OpPut(k, string(l.Line), clientv3.WithLease(lease)))
			gets = append(gets, clientv3.OpGet(k))
		}
		puts = append(puts, clientv3.OpPut(s.prefix+dirAuditHosts+host, head))
		resp, err := s.cli.Txn(cctx).If(ifs...).Then(puts...).Else(gets...).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.forgetLeases(leases...) // expired while this host's clock ran behind: grant anew
			return errConflict
		}
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		// Some were there: those that are this log's are skipped, the
		// rest shipped again; one that is not is an error.
		var rest []AuditLine
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().Kvs
			switch {
			case len(kvs) == 0:
				rest = append(rest, live[i])
			case !bytes.Equal(kvs[0].Value, live[i].Line):
				return fmt.Errorf("%w: record %d of host %s", ErrAuditDiffers, live[i].Seq, host)
			}
		}
		live = rest
		if len(live) == 0 {
			return nil
		}
		return errConflict
	})
}

// AuditLast is the last record etcd holds of host's log (ok false when
// none is left).
func (s *Store) AuditLast(ctx context.Context, host string) (rec AuditRecord, ok bool, err error) {
	if err := CheckHostName(host); err != nil {
		return AuditRecord{}, false, fmt.Errorf("etcdstore: audit: %w", err)
	}
	recs, err := s.auditBefore(ctx, host, 0, 0, 1)
	if err != nil || len(recs) == 0 {
		return AuditRecord{}, false, err
	}
	return recs[0], true, nil
}

// AuditHosts lists the hosts that shipped records, at revision rev (0:
// now), and the revision read at.
func (s *Store) AuditHosts(ctx context.Context, rev int64) ([]string, int64, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(cctx, s.prefix+dirAuditHosts, opts...)
	if err != nil {
		return nil, 0, s.fail("audit hosts", err)
	}
	var hosts []string
	for _, kv := range resp.Kvs {
		h, ok := strings.CutPrefix(string(kv.Key), s.prefix+dirAuditHosts)
		if !ok || CheckHostName(h) != nil {
			return nil, 0, fmt.Errorf("%w: key %q does not name a host", store.ErrCorrupt, kv.Key)
		}
		hosts = append(hosts, h)
	}
	return hosts, resp.Header.Revision, nil
}

// auditBefore returns host's last n records of seq below before (0: any),
// at revision rev (0: now), newest first.
func (s *Store) auditBefore(ctx context.Context, host string, before uint64, rev int64, n int) ([]AuditRecord, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	from := s.auditKey(host, 0)
	end := clientv3.GetPrefixRangeEnd(s.prefix + dirAudit + host + "/")
	if before != 0 {
		end = s.auditKey(host, before)
	}
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n))}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(cctx, from, opts...)
	if err != nil {
		return nil, s.fail("audit of "+host, err)
	}
	out := make([]AuditRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeAudit(s.prefix, kv.Key, kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// auditPage is how many records AuditTail reads of a host at once: at
// most 16 MiB of lines (MaxAuditLine each) held while they are sorted.
const auditPage = 64

// AuditView is what AuditTail read.
type AuditView struct {
	// Records are the records kept, oldest first.
	Records []AuditRecord
	// Rev is the revision they were read at (WatchAudit from the next
	// one misses nothing and repeats nothing).
	Rev int64
	// Dropped is how many older records of the last n were left out to
	// keep the records' lines within Config.AuditTailBytes in all (at
	// least: a host's older records are not read once they could not be
	// kept).
	Dropped int
}

// AuditTail returns the last n records of every host's shipped log that
// match accepts (all when nil), read at one revision, merged by time
// (then host, then seq), oldest first; and the revision (WatchAudit from
// the next one misses nothing and repeats nothing). Where two records of
// one host read are consecutive, the second's Prev must be the first's
// line hash: a copy that breaks its host's chain is store.ErrCorrupt.
//
// However many hosts, it never keeps more than n records, nor more than
// Config.AuditTailBytes of their lines, in all (plus one page of a host
// being read): the oldest are left out, counted in Dropped.
func (s *Store) AuditTail(ctx context.Context, n int, match func(audit.Record) bool) (AuditView, error) {
	hosts, rev, err := s.AuditHosts(ctx, 0)
	if err != nil || n <= 0 {
		return AuditView{Rev: rev}, err
	}
	kept := tailSet{n: n, max: s.tailBytes}
	for _, h := range hosts {
		if err := s.hostTail(ctx, h, rev, &kept, match); err != nil {
			return AuditView{}, err
		}
		if s.tailHook != nil {
			s.tailHook(len(kept.recs), kept.bytes)
		}
	}
	return AuditView{Records: kept.recs, Rev: rev, Dropped: min(kept.cut, n-len(kept.recs))}, nil
}

// hostTail adds host's records match accepts at rev to kept, newest
// first, until kept takes no more of them, checking the chain between
// consecutive records read.
func (s *Store) hostTail(ctx context.Context, host string, rev int64, kept *tailSet, match func(audit.Record) bool) error {
	var newer *AuditRecord // the record read before (one seq later)
	before := uint64(0)
	for {
		page, err := s.auditBefore(ctx, host, before, rev, auditPage)
		if err != nil {
			return err
		}
		for i := range page {
			r := page[i]
			if newer != nil && newer.Seq == r.Seq+1 && newer.Prev != r.LineHash {
				return fmt.Errorf("%w: host %s: record %d does not chain to record %d", store.ErrCorrupt, host, newer.Seq, r.Seq)
			}
			newer = &page[i]
			if match != nil && !match(r.Record) {
				continue
			}
			if !kept.add(r) {
				return nil // the host's older records would not be kept either
			}
		}
		if len(page) < auditPage {
			return nil
		}
		before = page[len(page)-1].Seq
	}
}

// tailSet is the records a tail keeps: the newest n of those added, their
// lines at most max bytes in all (the oldest left out first).
type tailSet struct {
	n, max int
	recs   []AuditRecord // oldest first
	bytes  int
	// floor is the newest record left out for the bytes (nil: none);
	// cut counts those left out for the bytes and those offered older.
	floor *AuditRecord
	cut   int
}

// add keeps r if it is among the newest, and reports whether it was.
func (t *tailSet) add(r AuditRecord) bool {
	if t.floor != nil && compareAudit(r, *t.floor) <= 0 {
		t.cut++
		return false
	}
	if len(t.recs) >= t.n && compareAudit(r, t.recs[0]) <= 0 {
		return false
	}
	i, _ := slices.BinarySearchFunc(t.recs, r, compareAudit)
	t.recs = slices.Insert(t.recs, i, r)
	t.bytes += r.Size
	if len(t.recs) > t.n {
		t.drop()
	}
	for t.bytes > t.max && len(t.recs) > 0 {
		old := t.recs[0]
		t.drop()
		t.floor = &old
		t.cut++
	}
	return t.floor == nil || compareAudit(r, *t.floor) > 0
}

// drop leaves out the oldest record kept.
func (t *tailSet) drop() {
	t.bytes -= t.recs[0].Size
	t.recs = slices.Delete(t.recs, 0, 1)
}

// compareAudit orders records by time, then host, then seq.
func compareAudit(a, b AuditRecord) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	switch {
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}

// AuditEvent is a record shipped after the watch's revision, or Err: the
// watch has ended (the cluster was lost, it fell behind a compaction, or a
// record is corrupt) and the channel closes after it.
type AuditEvent struct {
	Record AuditRecord
	Err    error
}

// WatchAudit sends every record shipped from revision fromRev on, as
// written (records of several hosts interleave), until ctx ends or the
// watch fails; a record that does not decode ends it with
// store.ErrCorrupt. Records expiring are not events.
func (s *Store) WatchAudit(ctx context.Context, fromRev int64) <-chan AuditEvent {
	out := make(chan AuditEvent, 64)
	go func() {
		defer close(out)
		err := s.watchAudit(ctx, fromRev, func(r AuditRecord) bool {
			select {
			case out <- AuditEvent{Record: r}:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err != nil && ctx.Err() == nil {
			select {
			case out <- AuditEvent{Err: err}:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

func (s *Store) watchAudit(ctx context.Context, rev int64, send func(AuditRecord) bool) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.watchPrefix(wctx, s.prefix+dirAudit, rev, clientv3.WithFilterDelete()) {
		if err := wr.Err(); err != nil {
			return s.fail("watch audit", err)
		}
		for _, ev := range wr.Events {
			r, err := decodeAudit(s.prefix, ev.Kv.Key, ev.Kv.Value)
			if err != nil {
				return err
			}
			if !send(r) {
				return nil
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return s.fail("watch audit", errors.New("watch closed"))
}

// decodeAudit reads a shipped record strictly: its key is exactly
// prefix + "audit/" + a host name + "/" + 20 digits (a seq above 0), its
// value at most MaxAuditLine bytes of one line that audit.ParseLine
// accepts, naming that host and that seq. Anything else is
// store.ErrCorrupt.
func decodeAudit(prefix string, key, value []byte) (AuditRecord, error) {
	bad := func(why string, args ...any) (AuditRecord, error) {
		return AuditRecord{}, fmt.Errorf("%w: audit key %q: %s", store.ErrCorrupt, key, fmt.Sprintf(why, args...))
	}
	rest, ok := strings.CutPrefix(string(key), prefix+dirAudit)
	if !ok {
		return bad("not under %s", prefix+dirAudit)
	}
	host, seqText, ok := strings.Cut(rest, "/")
	if !ok || CheckHostName(host) != nil {
		return bad("does not name a host")
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || len(seqText) != seqDigits || seq == 0 {
		return bad("does not end in a seq of %d digits", seqDigits)
	}
	if len(value) > MaxAuditLine {
		return bad("value of %d bytes, more than %d", len(value), MaxAuditLine)
	}
	if bytes.IndexByte(value, '\n') >= 0 {
		return bad("value is not one line")
	}
	rec, lineHash, err := audit.ParseLine(value)
	if err != nil {
		return bad("%v", err)
	}
	if rec.Host != host || rec.Seq != seq {
		return bad("holds record %d of host %q", rec.Seq, rec.Host)
	}
	return AuditRecord{Record: rec, LineHash: lineHash, Size: len(value)}, nil
}
