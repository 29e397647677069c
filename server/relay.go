package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// Freshness: a descriptor is accepted when its created_at is at most
// RelayMaxAge old and at most RelayMaxSkew in the future.
const (
	RelayMaxAge  = 5 * time.Minute
	RelayMaxSkew = time.Minute
	// relayMaxOutput caps each stream carried in a response.
	relayMaxOutput = 1 << 20
	// relayParsers bounds the descriptors parsed at once: a hostile YAML
	// file costs up to a CPU-second to refuse.
	relayParsers = 2
	// relayRecordKeep is how long a relayed request's answer is kept for
	// repeats (a bridge restarting later gets stale-request instead).
	relayRecordKeep = 24 * time.Hour
	relayPruneEvery = 256
)

var errTeardown = errors.New("cancelled by a teardown")

// flight is a relayed request being answered by this server: a second
// relay of the same id waits for it instead of running it again.
type flight struct {
	sandbox string
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
}

// tornDown says whether a teardown cancelled the flight's run context.
func (f *flight) tornDown() bool { return errors.Is(context.Cause(f.ctx), errTeardown) }

// Relay implements the descriptor path: DESIGN §4 step 4, then the Exec
// pipeline, exactly once per request id.
func (s *Server) Relay(ctx context.Context, req *coilyv1.RelayRequest) (*coilyv1.RelayResponse, error) {
	bridge, err := callerFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.mayRelay(ctx, bridge, req.GetSandbox(), "relay"); err != nil {
		return nil, err
	}
	if _, ok := descriptor.IDFromName(descriptor.FileName(req.GetId())); !ok {
		return nil, s.refuseControl(ctx, bridge, "relay", refusal.New(refusal.BadRequest, "id must be a lower-case UUID"))
	}
	id, resp, held := s.relay(ctx, bridge, s.policyFrom(ctx), req.GetSandbox(), req.GetId(), req.GetRequest())
	return &coilyv1.RelayResponse{Response: resp, Id: id, Duplicate: held}, nil
}

// mayRelay checks that the bridge may relay for the sandbox (audited when
// not).
func (s *Server) mayRelay(ctx context.Context, bridge Caller, sandbox, event string) error {
	var err error
	switch pol := s.policyFrom(ctx); {
	case !policy.SandboxNamePattern.MatchString(sandbox):
		err = refusal.New(refusal.BadRequest, "sandbox name must match %s", policy.SandboxNamePattern)
	case !pol.MayRelay(bridge.Subject(), sandbox):
		err = refusal.New(refusal.PermissionDenied, "%s may not relay for sandbox %q", bridge.Principal, sandbox)
	default:
		return nil
	}
	return s.refuseControl(ctx, bridge, event, err)
}

// relay answers one descriptor with the bytes of its response file. held
// reports a refusal of a second request under an id another request of the
// sandbox is running under: that answer is not the id's, and the bridge
// must not write it where the first request's client will read its own.
func (s *Server) relay(ctx context.Context, bridge Caller, pol *policy.Policy, sandbox, fileID string, raw []byte) (id string, resp []byte, held bool) {
	x := &execution{caller: Caller{Principal: policy.SandboxPrincipal(sandbox), Transport: "relay",
		Peer: "bridge " + bridge.Principal + " " + bridge.Peer}, req: &coilyv1.ExecRequest{}, policy: pol,
		method: coilyv1grpc.CoilyService_Relay_FullMethodName,
		// The execution's id is the server's own, as for every transport:
		// the descriptor's id names only the answer (relayID), so nothing a
		// sandbox writes can collide with, replace or remove another
		// execution (the job table, the request records, the console's kill).
		id: newID(), relayID: fileID}
	d, canon, err := s.parseRequest(raw)
	if err != nil {
		return fileID, s.relayRefusal(ctx, x, fileID, err), false
	}
	if d.ID != fileID {
		return fileID, s.relayRefusal(ctx, x, fileID, refusal.New(refusal.BadRequest, "file named %q carries id %q", fileID, d.ID)), false
	}
	if err := s.verify(sandbox, d.Sandbox, canon, d.HMAC); err != nil {
		return d.ID, s.relayRefusal(ctx, x, d.ID, err), false
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	f, first := s.joinFlight(ctx, d.ID, sandbox, hash)
	if !first {
		resp := s.waitFlight(ctx, x, f, hash)
		return d.ID, resp, x.held
	}
	resp = s.answerOnce(ctx, x, f, d)
	s.landFlight(d.ID, f, resp)
	return d.ID, resp, x.held
}

// parseRequest parses a descriptor, a few at a time.
func (s *Server) parseRequest(raw []byte) (*descriptor.Request, []byte, error) {
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
func (s *Server) verify(sandbox, named string, canon []byte, mac string) error {
	if named != sandbox {
		return refusal.New(refusal.HMACFail, "descriptor is for sandbox %q, relayed for %q", named, sandbox)
	}
	k, err := s.cfg.Store.Key(sandbox)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return refusal.New(refusal.HMACFail, "sandbox %q has no signing key", sandbox)
	case err != nil:
		return refusal.Wrap(refusal.Internal, err, "signing keys unavailable")
	}
	if err := descriptor.Verify(canon, mac, k.Secret); err != nil {
		return refusal.New(refusal.HMACFail, "signature does not verify with sandbox %q's current key", sandbox)
	}
	return nil
}

// answerOnce answers a request this server is the first to see since it
// started: the recorded answer if there is one, else it runs it.
func (s *Server) answerOnce(ctx context.Context, x *execution, f *flight, d *descriptor.Request) []byte {
	rec, err := s.cfg.Store.Relay(d.ID)
	switch {
	case err == nil:
		return s.recorded(ctx, x, rec, f)
	case !errors.Is(err, store.ErrNotFound):
		return s.relayRefusal(ctx, x, d.ID, refusal.Wrap(refusal.Internal, err, "request records unavailable"))
	}
	now := s.cfg.Now()
	switch {
	case d.CreatedAt.Before(now.Add(-RelayMaxAge)):
		return s.relayRefusal(ctx, x, d.ID, refusal.New(refusal.StaleRequest, "created %s, older than %s", d.CreatedAtRaw, RelayMaxAge))
	case d.CreatedAt.After(now.Add(RelayMaxSkew)):
		return s.relayRefusal(ctx, x, d.ID, refusal.New(refusal.StaleRequest, "created %s, in the future", d.CreatedAtRaw))
	}
	// What would be refused the same way however often it is relayed is
	// refused before the id is recorded: a malformed command, a paused
	// or locked server (the sandbox may try again later).
	x.req = execRequest(d)
	if err := validateExec(x.req); err != nil {
		x.req = &coilyv1.ExecRequest{} // never echo hostile input into the audit log
		return s.relayRefusal(ctx, x, d.ID, err)
	}
	if err := s.stops.Stopped(x.caller.Principal); err != nil {
		return s.relayRefusal(ctx, x, d.ID, err)
	}
	if f.tornDown() { // a teardown came while it was checked: as if it came first
		rec, err := s.tombstone(d.ID, f.sandbox)
		if err != nil {
			return s.relayRefusal(ctx, x, d.ID, refusal.Wrap(refusal.Internal, err, "request records unavailable"))
		}
		return s.recorded(ctx, x, rec, f)
	}
	s.pruneRelayState(now)
	rec = store.Relay{ID: d.ID, Sandbox: f.sandbox, BodyHash: f.hash, State: store.RelayAccepted, Boot: s.boot, Accepted: now}
	existing, found, err := s.cfg.Store.AcceptRelay(rec, d.Nonce, d.CreatedAt.Add(RelayMaxAge+RelayMaxSkew))
	switch {
	case errors.Is(err, store.ErrNonceSeen):
		return s.relayRefusal(ctx, x, d.ID, refusal.New(refusal.ReplayDetected, "nonce already used"))
	case err != nil:
		return s.relayRefusal(ctx, x, d.ID, refusal.Wrap(refusal.Internal, err, "request records unavailable"))
	case found:
		return s.recorded(ctx, x, existing, f)
	}
	resp := s.runRelayed(ctx, x, f, d)
	if err := s.cfg.Store.FinishRelay(d.ID, resp); err != nil {
		s.log.Error("store relay answer", "request_id", d.ID, "err", err)
	}
	return resp
}

// recorded answers from a request's record. A record another sandbox made
// (its teardown of an id it should not know) answers nothing of it.
func (s *Server) recorded(ctx context.Context, x *execution, rec store.Relay, f *flight) []byte {
	switch {
	case rec.Sandbox != f.sandbox:
		return s.relayRefusal(ctx, x, rec.ID, refusal.New(refusal.ReplayDetected, "request id already used by another sandbox"))
	case rec.BodyHash == "" && rec.State == store.RelayDone: // a teardown that came first
		return rec.Response
	case rec.BodyHash != f.hash:
		return s.relayRefusal(ctx, x, rec.ID, refusal.New(refusal.ReplayDetected, "request id already used for a different request"))
	case rec.State == store.RelayDone:
		return rec.Response
	}
	// Accepted by a server that is gone (or whose answer could not be
	// stored): the command may have run; it is never run again.
	resp := s.relayRefusal(ctx, x, rec.ID, refusal.New(refusal.Internal,
		"interrupted: the request was accepted but its answer was never recorded (the server stopped?); it was not run again"))
	if err := s.cfg.Store.FinishRelay(rec.ID, resp); err != nil {
		s.log.Error("store relay answer", "request_id", rec.ID, "err", err)
	}
	return resp
}

// runRelayed runs the descriptor through the Exec pipeline. The command
// does not depend on the bridge's connection (a restarted bridge relays
// again and waits for it); a teardown, lockout or shutdown stops it.
func (s *Server) runRelayed(ctx context.Context, x *execution, f *flight, d *descriptor.Request) []byte {
	x.confirm = d.RequiresConfirm
	if f.tornDown() { // since it was accepted: it never starts
		return s.relayRefusal(ctx, x, d.ID, refusal.New(refusal.Internal, "cancelled by a teardown"))
	}
	// The answer is ready at the exit event; the pipeline's bookkeeping
	// after it (the store's request index) finishes in the background.
	col := &collector{exited: make(chan struct{})}
	ended := make(chan error, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer f.cancel(nil)
		ended <- s.execute(f.ctx, x, col)
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

// execRequest is the Exec a descriptor asks for.
func execRequest(d *descriptor.Request) *coilyv1.ExecRequest {
	req := &coilyv1.ExecRequest{Argv: d.Argv, Env: d.Env, Cwd: d.Cwd, Stdin: d.Stdin, Note: d.Note}
	if d.Timeout > 0 {
		req.Timeout = durationpb.New(d.Timeout)
	}
	return req
}

// pruneRelayState forgets, every relayPruneEvery accepted requests (and
// at the first), the nonces and request records old enough that any
// descriptor they could answer is refused as stale anyway.
func (s *Server) pruneRelayState(now time.Time) {
	if s.accepted.Add(1)%relayPruneEvery != 1 {
		return
	}
	if _, _, err := s.cfg.Store.PruneRelays(now.Add(-relayRecordKeep), now); err != nil {
		s.log.Error("prune relay records", "err", err)
	}
}

// relayRefusal audits a refusal of a relayed request and returns its
// response file.
func (s *Server) relayRefusal(ctx context.Context, x *execution, id string, err error) []byte {
	err = s.refuseExec(ctx, x, err)
	return (&collector{}).response(id, err)
}

// joinFlight registers the answering of id, or returns the flight already
// answering it (first is false). A flight that starts while a teardown of
// id is being recorded starts torn down.
func (s *Server) joinFlight(ctx context.Context, id, sandbox, hash string) (f *flight, first bool) {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
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
func (s *Server) landFlight(id string, f *flight, resp []byte) {
	s.relayMu.Lock()
	f.resp = resp
	delete(s.flights, id)
	close(f.done)
	torn := f.tornDown()
	if torn {
		s.torn[tornKey(id, f.sandbox)]++
	}
	s.relayMu.Unlock()
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
// (s.torn, under s.relayMu) as it found no flight for it or landed its torn
// flight: a relay of the id that starts before the record is written
// starts torn down.
func (s *Server) recordTeardown(id, sandbox string) {
	_, _ = s.tombstone(id, sandbox) // logged
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	decr(s.torn, tornKey(id, sandbox))
}

// waitFlight answers a repeated relay with the running one's answer.
func (s *Server) waitFlight(ctx context.Context, x *execution, f *flight, hash string) []byte {
	if f.hash != hash {
		x.held = true
		return s.relayRefusal(ctx, x, x.relayID, refusal.New(refusal.ReplayDetected, "request id already used for a different request"))
	}
	select {
	case <-f.done:
		return f.resp
	case <-ctx.Done():
		return s.relayRefusal(ctx, x, x.relayID, refusal.New(refusal.Internal, "bridge went away while waiting"))
	}
}

// RelayTeardown cancels a relayed request in flight, whatever step it is
// at (docs/protocol.md §5), or records a teardown that came first.
func (s *Server) RelayTeardown(ctx context.Context, req *coilyv1.RelayTeardownRequest) (*coilyv1.RelayTeardownResponse, error) {
	bridge, err := callerFrom(ctx)
	if err != nil {
		return nil, err
	}
	sandbox := req.GetSandbox()
	if err := s.mayRelay(ctx, bridge, sandbox, "relay.teardown"); err != nil {
		return nil, err
	}
	s.parsers <- struct{}{}
	t, canon, err := descriptor.ParseTeardown(req.GetTeardown())
	<-s.parsers
	if err != nil {
		return nil, s.refuseControl(ctx, bridge, "relay.teardown", descriptorRefusal(err))
	}
	if t.ID != req.GetId() {
		return nil, s.refuseControl(ctx, bridge, "relay.teardown", refusal.New(refusal.BadRequest, "file named %q carries id %q", req.GetId(), t.ID))
	}
	if err := s.verify(sandbox, t.Sandbox, canon, t.HMAC); err != nil {
		return nil, s.refuseControl(ctx, bridge, "relay.teardown", err)
	}
	if now := s.cfg.Now(); t.CreatedAt.Before(now.Add(-RelayMaxAge)) || t.CreatedAt.After(now.Add(RelayMaxSkew)) {
		return nil, s.refuseControl(ctx, bridge, "relay.teardown", refusal.New(refusal.StaleRequest, "teardown created %s", t.CreatedAtRaw))
	}
	s.relayMu.Lock()
	f := s.flights[t.ID]
	cancelled := f != nil && f.sandbox == sandbox && f.ctx.Err() == nil
	switch {
	case cancelled:
		f.cancel(errTeardown)
	case f == nil:
		s.torn[tornKey(t.ID, sandbox)]++
	}
	s.relayMu.Unlock()
	if f == nil {
		s.recordTeardown(t.ID, sandbox)
	}
	rec := callerRecord(bridge, coilyv1grpc.CoilyService_RelayTeardown_FullMethodName, "relay.teardown", "")
	rec.RelayID = t.ID
	rec.Details = map[string]string{"sandbox": sandbox, "cancelled": fmt.Sprint(cancelled)}
	if err := s.recordControl(ctx, rec, "allow", nil); err != nil {
		return nil, err
	}
	return &coilyv1.RelayTeardownResponse{Cancelled: cancelled}, nil
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

// Send implements sender.
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
		if room := relayMaxOutput - buf.Len(); len(data) > room {
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
func (s *Server) tombstone(id, sandbox string) (store.Relay, error) {
	resp := (&collector{}).response(id, refusal.New(refusal.Internal, "cancelled by a teardown before it started"))
	rec := store.Relay{ID: id, Sandbox: sandbox, State: store.RelayDone, Boot: s.boot, Accepted: s.cfg.Now(), Response: resp}
	existing, found, err := s.cfg.Store.AcceptRelay(rec, "teardown:"+id, s.cfg.Now().Add(RelayMaxAge+RelayMaxSkew))
	switch {
	case found:
		return existing, nil
	case err != nil && !errors.Is(err, store.ErrNonceSeen):
		s.log.Error("record teardown", "request_id", id, "err", err)
		return rec, err
	}
	return rec, nil
}
