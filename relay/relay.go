// Package relay answers the requests a bridge relays from a sandbox's
// folder, exactly once per request id: it parses and verifies each
// descriptor (at most two parsed at once), joins a relay of an id already
// being answered, answers from the id's record when it has one, and
// otherwise checks freshness and the nonce, records the id as accepted
// before the server's pipeline runs it, and records its answer. It also
// cancels, or records ahead, the teardowns of requests.
//
// Invariants:
//   - a request id is run at most once, across relays, restarts and
//     bridges: its record is durable before its command can start, and a
//     record accepted but never answered is answered "interrupted", never
//     run again;
//   - an answer waiting for a request's client is never replaced by a
//     refusal of another body under the same id (held);
//   - a teardown cancels its request at whatever step it is, and one that
//     comes first makes the id's later request never run;
//   - the flights and teardowns in memory have a lock of their own
//     (Relayer.mu), never held while calling the pipeline.
package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/gitproxy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// Freshness: a descriptor is accepted when its created_at is at most
// MaxAge old and at most MaxSkew in the future.
const (
	MaxAge  = 5 * time.Minute
	MaxSkew = time.Minute
	// maxOutput caps each stream carried in a response.
	maxOutput = 1 << 20
	// maxKeptGitBody is the largest git answer's body a request's record
	// keeps for repeats, a stream's worth; a larger one is kept as its
	// status, length and digest only (keptGitAnswer).
	maxKeptGitBody = maxOutput
	// parsers bounds the descriptors parsed at once: a hostile YAML file
	// costs up to a CPU-second to refuse.
	parsers = 2
	// recordKeep is how long a relayed request's answer is kept for
	// repeats (a bridge restarting later gets stale-request instead).
	recordKeep = 24 * time.Hour
	pruneEvery = 256
)

// Store keeps the sandboxes' signing keys and the request records: what is
// kept, not how (every store.Shared is one).
type Store interface {
	// Key is the sandbox's current signing key (store.ErrNotFound: none).
	Key(sandbox string) (store.Key, error)
	// Relay is the record of request id (store.ErrNotFound: none).
	Relay(id string) (store.Relay, error)
	// AcceptRelay records r unless its id has a record (returned, found)
	// or its nonce was seen (store.ErrNonceSeen); durable on return.
	AcceptRelay(r store.Relay, nonce string, nonceExpiry time.Time) (existing store.Relay, found bool, err error)
	// FinishRelay records the answer of an accepted request.
	FinishRelay(id string, response []byte) error
	// PruneRelays forgets records accepted before before and nonces
	// expired at now.
	PruneRelays(before, now time.Time) (records, nonces int, err error)
}

var _ Store = store.Shared(nil)

// Exec is one relayed request on the server's side: its pipeline, its
// audit and its stop state.
type Exec interface {
	// Refuse audits a refusal of the request and returns it (naming its
	// audit record).
	Refuse(ctx context.Context, err error) error
	// Admit takes the Exec the descriptor asks for, refusing what would be
	// refused the same way however often it is relayed: a malformed
	// command, a paused or locked-out server.
	Admit(d *descriptor.Request) error
	// Run runs it through the Exec pipeline, its events sent to out, until
	// ctx ends.
	Run(ctx context.Context, out Sender) error
}

// GitProxy runs a git exchange as a relayed request's caller
// (gitproxy.Proxy).
type GitProxy interface {
	Exchange(ctx context.Context, c access.Caller, g *descriptor.GitExchange) (*descriptor.GitAnswer, error)
}

var _ GitProxy = (*gitproxy.Proxy)(nil)

// Sender receives an Exec's events.
type Sender interface {
	Send(*coilyv1.ExecResponse) error
}

// Config holds the relayer's collaborators; all are required.
type Config struct {
	Store  Store
	Logger *slog.Logger
	Now    func() time.Time
}

// Relayer answers relayed requests and teardowns for one server.
type Relayer struct {
	cfg Config
	// boot names this server's run in the records: a record accepted by
	// another boot was interrupted by a restart.
	boot     string
	parsers  chan struct{} // bounds concurrent descriptor parsing
	accepted atomic.Uint64 // requests accepted, for pruning
	git      atomic.Pointer[gitServed]
	bg       sync.WaitGroup

	mu sync.Mutex
	// flights are the requests being answered, by id.
	flights map[string]*flight
	// torn counts the teardowns being recorded for ids with no flight, by
	// sandbox and id (tornKey): a flight of one starts torn down.
	torn map[string]int
}

// New returns a relayer.
func New(cfg Config) *Relayer {
	return &Relayer{cfg: cfg, boot: descriptor.NewID(), parsers: make(chan struct{}, parsers),
		flights: map[string]*flight{}, torn: map[string]int{}}
}

// gitServed is the git proxy git exchanges run through.
type gitServed struct{ p GitProxy }

// ServeGit makes the git exchanges relayed from now on run through p; a
// nil p changes nothing. Until then they are refused.
func (s *Relayer) ServeGit(p *gitproxy.Proxy) {
	if p != nil {
		s.git.Store(&gitServed{p})
	}
}

// Wait waits for the runs of relayed requests to end.
func (s *Relayer) Wait() { s.bg.Wait() }

var errTeardown = errors.New("cancelled by a teardown")

// flight is a relayed request being answered by this server: a second
// relay of the same id waits for it instead of running it again.
type flight struct {
	sandbox string
	caller  access.Caller // who a git exchange runs as
	hash    string
	done    chan struct{}
	resp    []byte
	// ctx is the request's run context from the moment it is in flight
	// (row 10 of docs/protocol.md §7.3), detached from the bridge's call.
	// A teardown cancels it with errTeardown at whatever step the request
	// is: one torn down before its command starts never starts. Its run
	// cancels it once over (runRelayed); a flight that never runs needs
	// no cancel, its context having no parent to detach from.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// kept is what the request's record keeps in place of its answer,
	// when not the answer itself (a large git answer).
	kept []byte
}

// tornDown says whether a teardown cancelled the flight's run context.
func (f *flight) tornDown() bool { return errors.Is(context.Cause(f.ctx), errTeardown) }

// Relay answers the descriptor raw, relayed for sandbox in the file named
// for fileID, with the bytes of its response file and the id it answers.
// x is the request on the server's side, caller the sandbox's principal
// as the server names it (a git exchange runs as it). held reports a refusal of a
// second request under an id another request of the sandbox is running
// under: that answer is not the id's, and the bridge must not write it
// where the first request's client will read its own.
func (s *Relayer) Relay(ctx context.Context, x Exec, caller access.Caller, sandbox, fileID string, raw []byte) (id string, resp []byte, held bool) {
	d, canon, err := s.parseRequest(raw)
	if err != nil {
		return fileID, refused(ctx, x, fileID, err), false
	}
	if d.ID != fileID {
		return fileID, refused(ctx, x, fileID, refusal.New(refusal.BadRequest, "file named %q carries id %q", fileID, d.ID)), false
	}
	if err := s.verify(sandbox, d.Sandbox, canon, d.HMAC); err != nil {
		return d.ID, refused(ctx, x, d.ID, err), false
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	f, first := s.joinFlight(ctx, d.ID, sandbox, hash)
	if !first {
		resp, held := s.waitFlight(ctx, x, d.ID, f, hash)
		return d.ID, resp, held
	}
	f.caller = caller
	f.caller.RelayID = d.ID
	resp = s.answerOnce(ctx, x, f, d)
	s.landFlight(d.ID, f, resp)
	return d.ID, resp, false
}

// parseRequest parses a descriptor, a few at a time.
func (s *Relayer) parseRequest(raw []byte) (*descriptor.Request, []byte, error) {
	s.parsers <- struct{}{}
	defer func() { <-s.parsers }()
	d, canon, err := descriptor.ParseRequest(raw)
	if err != nil {
		return nil, nil, descriptorRefusal(err)
	}
	return d, canon, nil
}

// verify checks the descriptor is the sandbox's and signed with its
// current key.
func (s *Relayer) verify(sandbox, named string, canon []byte, mac string) error {
	if named != sandbox {
		return refusal.New(refusal.HMACFail, "descriptor is for sandbox %q, relayed for %q", named, sandbox)
	}
	k, err := s.cfg.Store.Key(sandbox)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return refusal.New(refusal.HMACFail, "sandbox %q has no signing key", sandbox)
	case err != nil:
		return stateRefusal(err, "signing keys unavailable")
	}
	if err := descriptor.Verify(canon, mac, k.Secret); err != nil {
		return refusal.New(refusal.HMACFail, "signature does not verify with sandbox %q's current key", sandbox)
	}
	return nil
}

// answerOnce answers a request this server is the first to see since it
// started: the recorded answer if there is one, else it runs it.
func (s *Relayer) answerOnce(ctx context.Context, x Exec, f *flight, d *descriptor.Request) []byte {
	rec, err := s.cfg.Store.Relay(d.ID)
	switch {
	case err == nil:
		return s.recorded(ctx, x, rec, f)
	case !errors.Is(err, store.ErrNotFound):
		return refused(ctx, x, d.ID, stateRefusal(err, "request records unavailable"))
	}
	now := s.cfg.Now()
	switch {
	case d.CreatedAt.Before(now.Add(-MaxAge)):
		return refused(ctx, x, d.ID, refusal.New(refusal.StaleRequest, "created %s, older than %s", d.CreatedAtRaw, MaxAge))
	case d.CreatedAt.After(now.Add(MaxSkew)):
		return refused(ctx, x, d.ID, refusal.New(refusal.StaleRequest, "created %s, in the future", d.CreatedAtRaw))
	}
	// What would be refused the same way however often it is relayed is
	// refused before the id is recorded: a malformed command, a paused
	// or locked server (the sandbox may try again later).
	if err := s.admit(x, d); err != nil {
		return refused(ctx, x, d.ID, err)
	}
	if f.tornDown() { // a teardown came while it was checked: as if it came first
		rec, err := s.tombstone(d.ID, f.sandbox)
		if err != nil {
			return refused(ctx, x, d.ID, stateRefusal(err, "request records unavailable"))
		}
		return s.recorded(ctx, x, rec, f)
	}
	s.pruneRelayState(now)
	rec = store.Relay{ID: d.ID, Sandbox: f.sandbox, BodyHash: f.hash, State: store.RelayAccepted, Boot: s.boot, Accepted: now}
	existing, found, err := s.cfg.Store.AcceptRelay(rec, d.Nonce, d.CreatedAt.Add(MaxAge+MaxSkew))
	switch {
	case errors.Is(err, store.ErrNonceSeen):
		return refused(ctx, x, d.ID, refusal.New(refusal.ReplayDetected, "nonce already used"))
	case err != nil:
		return refused(ctx, x, d.ID, stateRefusal(err, "request records unavailable"))
	case found:
		return s.recorded(ctx, x, existing, f)
	}
	resp := s.runRelayed(ctx, x, f, d)
	keep := resp
	if f.kept != nil {
		keep = f.kept
	}
	if err := s.cfg.Store.FinishRelay(d.ID, keep); err != nil {
		s.cfg.Logger.Error("store relay answer", "request_id", d.ID, "err", err)
	}
	return resp
}

// admit takes a command through x.Admit, and a git exchange when a git
// proxy is served: its gate and policy decide the rest, as for any caller.
func (s *Relayer) admit(x Exec, d *descriptor.Request) error {
	switch {
	case d.Git == nil:
		return x.Admit(d)
	case s.git.Load() == nil:
		return refusal.New(refusal.Internal, "this server does not serve the git proxy (git is not installed on it)")
	}
	return nil
}

// recorded answers from a request's record. A record another sandbox made
// (its teardown of an id it should not know) answers nothing of it.
func (s *Relayer) recorded(ctx context.Context, x Exec, rec store.Relay, f *flight) []byte {
	switch {
	case rec.Sandbox != f.sandbox:
		return refused(ctx, x, rec.ID, refusal.New(refusal.ReplayDetected, "request id already used by another sandbox"))
	case rec.BodyHash == "" && rec.State == store.RelayDone: // a teardown that came first
		return rec.Response
	case rec.BodyHash != f.hash:
		return refused(ctx, x, rec.ID, refusal.New(refusal.ReplayDetected, "request id already used for a different request"))
	case rec.State == store.RelayDone:
		return rec.Response
	}
	// Accepted by a server that is gone (or whose answer could not be
	// stored): the command may have run; it is never run again.
	resp := refused(ctx, x, rec.ID, refusal.New(refusal.Internal,
		"interrupted: the request was accepted but its answer was never recorded (the server stopped?); it was not run again"))
	if err := s.cfg.Store.FinishRelay(rec.ID, resp); err != nil {
		s.cfg.Logger.Error("store relay answer", "request_id", rec.ID, "err", err)
	}
	return resp
}

// runRelayed runs the descriptor through the Exec pipeline. The command
// does not depend on the bridge's connection (a restarted bridge relays
// again and waits for it); a teardown, lockout or shutdown stops it.
func (s *Relayer) runRelayed(ctx context.Context, x Exec, f *flight, d *descriptor.Request) []byte {
	if f.tornDown() { // since it was accepted: it never starts
		return refused(ctx, x, d.ID, refusal.New(refusal.Internal, "cancelled by a teardown"))
	}
	if d.Git != nil {
		return s.exchange(ctx, x, f, d)
	}
	// The answer is ready at the exit event; the pipeline's bookkeeping
	// after it (the store's request index) finishes in the background.
	col := &collector{exited: make(chan struct{})}
	ended := make(chan error, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer f.cancel(nil)
		ended <- x.Run(f.ctx, col)
	}()
	var err error
	select {
	case <-col.exited:
	case err = <-ended:
	}
	if f.tornDown() && err != nil {
		err = refusal.WithAudit(refusal.New(refusal.Internal, "cancelled by a teardown"), refusal.As(err).AuditID)
	}
	return col.response(d.ID, err)
}

// exchange runs a git exchange through the git proxy, as runRelayed runs
// a command: on the flight's context, which a teardown, lockout or
// shutdown cancels.
func (s *Relayer) exchange(ctx context.Context, x Exec, f *flight, d *descriptor.Request) []byte {
	s.bg.Add(1)
	defer s.bg.Done()
	defer f.cancel(nil)
	start := s.cfg.Now()
	a, err := s.git.Load().p.Exchange(f.ctx, f.caller, d.Git)
	if f.tornDown() && err != nil {
		err = refusal.New(refusal.Internal, "cancelled by a teardown")
	}
	if err != nil {
		return refused(ctx, x, d.ID, err)
	}
	out, err := descriptor.MarshalResponse(&descriptor.Response{ID: d.ID, Outcome: descriptor.OutcomeHTTP, Git: a,
		DurationMS: s.cfg.Now().Sub(start).Milliseconds()})
	if err != nil {
		return refused(ctx, x, d.ID, refusal.Wrap(refusal.Internal, err, "the git proxy's answer cannot be carried"))
	}
	if len(a.Body) > maxKeptGitBody {
		f.kept = keptGitAnswer(d.ID, a)
	}
	return out
}

// keptGitAnswer is what the record of request id keeps of a git answer
// too large to keep whole: a refusal that names the answer's status,
// length and digest, so that what one sandbox makes the server keep for
// a day is bounded by the number of its requests. A repeat of the id
// (a bridge that restarted before writing the answer) gets it: the
// exchange is never run twice, and git, which gets no answer, is run
// again.
func keptGitAnswer(id string, a *descriptor.GitAnswer) []byte {
	sum := sha256.Sum256(a.Body)
	return (&collector{}).response(id, refusal.New(refusal.ReplayDetected,
		"request id already answered (http status %d, %d bytes, sha256 %s); an answer over %d bytes is not kept for repeats: run git again",
		a.Status, len(a.Body), hex.EncodeToString(sum[:]), maxKeptGitBody))
}

// pruneRelayState forgets, every pruneEvery accepted requests (and
// at the first), the nonces and request records old enough that any
// descriptor they could answer is refused as stale anyway.
func (s *Relayer) pruneRelayState(now time.Time) {
	if s.accepted.Add(1)%pruneEvery != 1 {
		return
	}
	if _, _, err := s.cfg.Store.PruneRelays(now.Add(-recordKeep), now); err != nil {
		s.cfg.Logger.Error("prune relay records", "err", err)
	}
}

// refused audits a refusal of a relayed request and returns its
// response file.
func refused(ctx context.Context, x Exec, id string, err error) []byte {
	return (&collector{}).response(id, x.Refuse(ctx, err))
}

// stateRefusal refuses a request whose key or record could not be read or
// written: state-unavailable when the store says its state is out of
// reach, internal otherwise.
func stateRefusal(err error, msg string) *refusal.Error {
	code := refusal.Internal
	if errors.Is(err, store.ErrUnavailable) {
		code = refusal.StateUnavailable
	}
	return refusal.Wrap(code, err, "%s", msg)
}

// joinFlight registers the answering of id, or returns the flight already
// answering it (first is false). A flight that starts while a teardown of
// id is being recorded starts torn down.
func (s *Relayer) joinFlight(ctx context.Context, id, sandbox, hash string) (f *flight, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.flights[id]; f != nil {
		return f, false
	}
	f = &flight{sandbox: sandbox, hash: hash, done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if s.torn[tornKey(id, sandbox)] > 0 {
		f.cancel(errTeardown)
	}
	s.flights[id] = f
	return f, true
}

// landFlight hands the answer to the relays waiting for it. A flight torn
// down is remembered as a teardown that came first: when the request did
// not use its id up (refused before row 15, e.g. while the server was
// paused), relayed again later it never runs.
func (s *Relayer) landFlight(id string, f *flight, resp []byte) {
	s.mu.Lock()
	f.resp = resp
	delete(s.flights, id)
	close(f.done)
	torn := f.tornDown()
	if torn {
		s.torn[tornKey(id, f.sandbox)]++
	}
	s.mu.Unlock()
	if torn {
		s.recordTeardown(id, f.sandbox)
	}
}

func tornKey(id, sandbox string) string { return sandbox + "\x00" + id }

func decr(m map[string]int, k string) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

// recordTeardown records the answer of a request torn down before it
// started (tombstone), then stops marking it torn. The caller marked it
// (s.torn, under s.mu) as it found no flight for it or landed its torn
// flight: a relay of the id that starts before the record is written
// starts torn down.
func (s *Relayer) recordTeardown(id, sandbox string) {
	_, _ = s.tombstone(id, sandbox) // logged
	s.mu.Lock()
	defer s.mu.Unlock()
	decr(s.torn, tornKey(id, sandbox))
}

// waitFlight answers a repeated relay of id with the running one's
// answer; held when its body is another (the answer is not the id's).
func (s *Relayer) waitFlight(ctx context.Context, x Exec, id string, f *flight, hash string) (resp []byte, held bool) {
	if f.hash != hash {
		return refused(ctx, x, id, refusal.New(refusal.ReplayDetected, "request id already used for a different request")), true
	}
	select {
	case <-f.done:
		return f.resp, false
	case <-ctx.Done():
		return refused(ctx, x, id, refusal.New(refusal.Internal, "bridge went away while waiting")), false
	}
}

// Teardown cancels the request id of sandbox in flight, whatever step it
// is at, or records a teardown that came first, for the teardown file raw.
// It reports whether it cancelled a request in flight; err is the refusal
// of a teardown that does not parse, verify or is not fresh, which the
// caller audits.
func (s *Relayer) Teardown(sandbox, id string, raw []byte) (cancelled bool, err error) {
	s.parsers <- struct{}{}
	t, canon, err := descriptor.ParseTeardown(raw)
	<-s.parsers
	if err != nil {
		return false, descriptorRefusal(err)
	}
	if t.ID != id {
		return false, refusal.New(refusal.BadRequest, "file named %q carries id %q", id, t.ID)
	}
	if err := s.verify(sandbox, t.Sandbox, canon, t.HMAC); err != nil {
		return false, err
	}
	if now := s.cfg.Now(); t.CreatedAt.Before(now.Add(-MaxAge)) || t.CreatedAt.After(now.Add(MaxSkew)) {
		return false, refusal.New(refusal.StaleRequest, "teardown created %s", t.CreatedAtRaw)
	}
	s.mu.Lock()
	f := s.flights[t.ID]
	cancelled = f != nil && f.sandbox == sandbox && f.ctx.Err() == nil
	switch {
	case cancelled:
		f.cancel(errTeardown)
	case f == nil:
		s.torn[tornKey(t.ID, sandbox)]++
	}
	s.mu.Unlock()
	if f == nil {
		s.recordTeardown(t.ID, sandbox)
	}
	return cancelled, nil
}

// descriptorRefusal turns a descriptor error into a refusal with its code.
func descriptorRefusal(err error) error {
	var de *descriptor.Error
	if errors.As(err, &de) {
		return refusal.New(refusal.Code(de.Code), "%s", de.Error())
	}
	return refusal.Wrap(refusal.BadRequest, err, "unreadable descriptor")
}

// collector gathers a relayed execution's events into a response.
type collector struct {
	stdout, stderr bytes.Buffer
	truncated      [3]bool
	started        *coilyv1.ExecStarted
	exit           *coilyv1.ExecExit
	exited         chan struct{} // closed at the exit event, when not nil
}

// Send implements Sender.
func (c *collector) Send(m *coilyv1.ExecResponse) error {
	switch ev := m.GetEvent().(type) {
	case *coilyv1.ExecResponse_Started:
		c.started = ev.Started
	case *coilyv1.ExecResponse_Output:
		buf := &c.stdout
		if ev.Output.GetStream() == coilyv1.Stream_STREAM_STDERR {
			buf = &c.stderr
		}
		data := ev.Output.GetData()
		if room := maxOutput - buf.Len(); len(data) > room {
			data, c.truncated[ev.Output.GetStream()] = data[:max(room, 0)], true
		}
		buf.Write(data)
	case *coilyv1.ExecResponse_Exit:
		c.exit = ev.Exit
		if c.exited != nil {
			close(c.exited)
		}
	}
	return nil
}

// response renders the response file for request id.
func (c *collector) response(id string, err error) []byte {
	r := &descriptor.Response{ID: id, Outcome: descriptor.OutcomeExit}
	if c.started != nil {
		r.Rule, r.AuditID = c.started.GetRule(), c.started.GetAuditId()
	}
	switch {
	case err != nil || c.exit == nil:
		rr := refusal.As(err)
		if err == nil {
			rr = refusal.New(refusal.Internal, "the command ended without an exit status")
		}
		// A refusal names its own audit record (absent when it was only
		// counted in a refusal.summary), not the decision that let the
		// command start.
		r.Outcome, r.Code, r.Message, r.AuditID = descriptor.OutcomeRefused, string(rr.Code), rr.Msg, rr.AuditID
	default:
		e := c.exit
		r.ExitCode, r.Signal, r.AuditID = int(e.GetExitCode()), int(e.GetSignal()), e.GetAuditId()
		r.DurationMS = e.GetDuration().AsDuration().Milliseconds()
		r.SetOutput(c.stdout.Bytes(), c.stderr.Bytes())
		r.StdoutTruncated = e.GetStdoutTruncated() || c.truncated[coilyv1.Stream_STREAM_STDOUT]
		r.StderrTruncated = e.GetStderrTruncated() || c.truncated[coilyv1.Stream_STREAM_STDERR]
	}
	out, err := descriptor.MarshalResponse(r)
	if err != nil { // cannot happen for what the server builds; say so rather than send nothing
		out, _ = descriptor.MarshalResponse(&descriptor.Response{ID: id, Outcome: descriptor.OutcomeRefused,
			Code: string(refusal.Internal), Message: "response could not be encoded"})
	}
	return out
}

// tombstone records the answer of a request torn down before it was
// accepted, so that it never runs when it is relayed later, and returns
// the id's record: that answer, or the record the id already had, which
// it keeps.
func (s *Relayer) tombstone(id, sandbox string) (store.Relay, error) {
	resp := (&collector{}).response(id, refusal.New(refusal.Internal, "cancelled by a teardown before it started"))
	rec := store.Relay{ID: id, Sandbox: sandbox, State: store.RelayDone, Boot: s.boot, Accepted: s.cfg.Now(), Response: resp}
	existing, found, err := s.cfg.Store.AcceptRelay(rec, "teardown:"+id, s.cfg.Now().Add(MaxAge+MaxSkew))
	switch {
	case found:
		return existing, nil
	case err != nil && !errors.Is(err, store.ErrNonceSeen):
		s.cfg.Logger.Error("record teardown", "request_id", id, "err", err)
		return rec, err
	}
	return rec, nil
}
