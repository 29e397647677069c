package store

import (
	"errors"
	"time"
)

// ErrUnavailable reports shared state that cannot be reached now (no
// quorum, a timeout, a lost connection): the caller refuses with
// state-unavailable and admits nothing it cannot record. It is never read
// as "no record".
var ErrUnavailable = errors.New("store: shared state unavailable")

// ErrChanged reports a loosening (an unlock, a resume) refused because
// the stop it would lift is no longer the one it was decided on: another
// host locked out or paused meanwhile (Stop.DecidedOn). What is in force
// stands; read the state again and decide again.
var ErrChanged = errors.New("store: the stop state changed since it was read (another host stopped meanwhile): read it again")

// ChangedHint is what a caller whose loosening failed with err is told
// beyond "could not be persisted": for ErrChanged, that another host
// stopped meanwhile and what to do; else nothing.
func ChangedHint(err error) string {
	if !errors.Is(err, ErrChanged) {
		return ""
	}
	return ": another host locked out or paused after the state this host decided on; that stop stands (coily status), decide again"
}

// Local is the state each host keeps for itself, always in its own bbolt
// file: the audit chain's head (the log is per host), the record of every
// Exec request it ran, and whether the file was found missing.
type Local interface {
	AuditHead() (AuditHead, error)
	SetAuditHead(AuditHead) error
	// AuditCheckpoint and SetAuditCheckpoint keep the latest signed
	// checkpoint of the audit log's tree, next to its head.
	AuditCheckpoint() (AuditCheckpoint, error)
	SetAuditCheckpoint(AuditCheckpoint) error
	// AuditSigner is the key the checkpoints are signed with: its
	// verifier opens the one kept (ErrNotFound before the first start).
	AuditSigner() (AuditSigner, error)
	PutRequest(Request) error
	Request(id string) (Request, error)
	// Created reports that the file held no state when opened.
	Created() bool
	Path() string
}

// Shared is the state that decides what runs, kept once for every host
// that serves as one trust point: the stop controls, the rate buckets, the
// sandboxes' signing keys, the relay's exactly-once records and nonces,
// and the dynamic-secret leases in use. One host keeps it in its bbolt file
// (*DB); several keep it in etcd. Every write that decides something is
// atomic with the read it depends on, so two hosts never both admit what
// one would refuse. A value that cannot be decoded is ErrCorrupt and a
// store that cannot be reached ErrUnavailable, never a zero value.
type Shared interface {
	// Stops reads every stop control.
	Stops() (Stops, error)
	SetLockout(Stop) error
	SetPause(Stop) error
	// SetSelfPause sets one principal's pause of itself, leaving the
	// others' as they are.
	SetSelfPause(principal string, s Stop) error
	// SetPauses replaces the server's pause and every principal's pause of
	// itself at once: both or neither.
	SetPauses(pause Stop, self map[string]Stop) error

	// Take takes a token from the bucket named key (see DB.Take).
	Take(key string, r Rate, now time.Time) (ok bool, retryAfter time.Duration, err error)

	Key(sandbox string) (Key, error)
	Keys() ([]Key, error)
	IssueKey(sandbox string, secret []byte, now time.Time) (Key, error)
	ReplaceKeys(sandboxes []string, secret func(sandbox string) ([]byte, error), now time.Time) ([]Key, error)

	Relay(id string) (Relay, error)
	AcceptRelay(r Relay, nonce string, nonceExpiry time.Time) (existing Relay, found bool, err error)
	FinishRelay(id string, response []byte) error
	PruneRelays(before, now time.Time) (records, nonces int, err error)

	PutLease(Lease) error
	DeleteLease(id string) error
	Leases() ([]Lease, error)
}

var (
	_ Local  = (*DB)(nil)
	_ Shared = (*DB)(nil)
)
