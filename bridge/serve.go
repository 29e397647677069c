package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/refusal"
)

// maxNamedLogs is how many stray names one scan logs one by one; the rest
// are counted in one line (a sandbox can create names faster than a log
// should grow).
const maxNamedLogs = 10

// minScanGap is the least time between the starts of two scans woken by
// file-system events.
const minScanGap = time.Millisecond

// outcome is how a worker left a file.
type outcome int

const (
	settled outcome = iota // answered, deleted or gone
	retry                  // failed transiently: try again after a backoff
	leave                  // cannot be deleted: left alone while it is there
)

// result is a worker's report to its mount's loop.
type result struct {
	dir     *dir
	id      string
	name    string
	outcome outcome
}

// backoff is the retry state of one file.
type backoff struct {
	delay time.Duration
	next  time.Time
}

// loop is the state of one mount's scanning loop; only its goroutine
// touches it.
type loop struct {
	inFlight [2]map[string]bool // ids being handled, per directory
	retries  [2]map[string]*backoff
	// left are names in requests/ or teardowns/ that cannot be deleted
	// (directories, mostly): logged once and left alone while they are
	// there.
	left     [2]map[string]bool
	replaced bool // a directory was found replaced (logged once)
}

func (m *mount) serve(ctx context.Context) {
	if n, err := removeStaleTemps(m.respFd, time.Now()); err != nil {
		m.log.Warn("cannot list responses/ for stale temporary files", "err", err)
	} else if n > 0 {
		m.log.Info("removed stale temporary files", "dir", descriptor.ResponsesDir, "count", n)
	}
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// Watch before the first scan, so nothing written in between is missed.
	stopWatch := startWatch(m.log, m.dirs[:], poke)
	defer stopWatch()

	var workers sync.WaitGroup
	defer workers.Wait()
	// Every worker reports once; at most 2*maxInFlight run at once, so
	// reporting never blocks, even after the loop has stopped reading.
	results := make(chan result, 2*m.maxInFlight)
	l := &loop{}
	for i := range 2 {
		l.inFlight[i], l.retries[i], l.left[i] = map[string]bool{}, map[string]*backoff{}, map[string]bool{}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	m.log.Info("serving", "requests", m.dirs[0].path)
	for {
		began := time.Now()
		next := began.Add(m.rescan)
		for i, d := range m.dirs {
			if at := m.scan(ctx, l, i, d, results, &workers); !at.IsZero() && at.Before(next) {
				next = at
			}
		}
		m.checkReplaced(l)
		took := time.Since(began)
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			return
		case <-wake:
			// A sandbox churning files must not keep the bridge scanning:
			// scans are at least their own length (and minScanGap) apart.
			timer.Reset(max(time.Until(began.Add(max(minScanGap, 2*took))), 0))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		case <-timer.C:
		case r := <-results:
			l.settle(r)
			l.drain(results) // then scan once for all of them
		}
	}
}

// drain records the results already reported.
func (l *loop) drain(results <-chan result) {
	for {
		select {
		case r := <-results:
			l.settle(r)
		default:
			return
		}
	}
}

// settle records a worker's result.
func (l *loop) settle(r result) {
	i := r.dir.index()
	delete(l.inFlight[i], r.id)
	switch r.outcome {
	case leave:
		l.left[i][r.name] = true
		fallthrough
	case settled:
		delete(l.retries[i], r.name)
		return
	}
	b := l.retries[i][r.name]
	if b == nil {
		b = &backoff{delay: minBackoff}
		l.retries[i][r.name] = b
	} else {
		b.delay = min(2*b.delay, maxBackoff)
	}
	b.next = time.Now().Add(b.delay)
}

func (d *dir) index() int {
	if d.name == descriptor.RequestsDir {
		return 0
	}
	return 1
}

// scan lists one directory: it deletes names outside the grammar and
// starts a worker for each file that is due, while there is room. It
// returns the earliest time a file waiting for a retry becomes due (zero
// when none waits).
func (m *mount) scan(ctx context.Context, l *loop, i int, d *dir, results chan<- result, workers *sync.WaitGroup) time.Time {
	now := time.Now()
	var due time.Time
	seen := map[string]bool{}
	strays := 0
	complete := true
	err := listDir(d.fd, d.name, func(name string) {
		id, ok := descriptor.IDFromName(name)
		if !ok {
			if m.removeStray(l, i, d, name, strays < maxNamedLogs, seen) {
				strays++
			}
			return
		}
		seen[name] = true
		if l.inFlight[i][id] || l.left[i][name] {
			return
		}
		if b := l.retries[i][name]; b != nil && now.Before(b.next) {
			if due.IsZero() || b.next.Before(due) {
				due = b.next
			}
			return
		}
		if len(l.inFlight[i]) >= m.maxInFlight {
			return // a worker's report wakes the loop
		}
		l.inFlight[i][id] = true
		workers.Go(func() {
			out := m.handle(ctx, d, id, name)
			results <- result{dir: d, id: id, name: name, outcome: out}
		})
	})
	if err != nil {
		complete = false
		m.log.Error("cannot list directory", "dir", d.name, "err", err)
	}
	if strays > maxNamedLogs {
		m.log.Warn("deleted more names outside the protocol's grammar", "dir", d.name, "count", strays-maxNamedLogs)
	}
	if complete { // forget what is no longer there
		for name := range l.retries[i] {
			if !seen[name] {
				delete(l.retries[i], name)
			}
		}
		for name := range l.left[i] {
			if !seen[name] {
				delete(l.left[i], name)
			}
		}
	}
	return due
}

// removeStray deletes a name outside the grammar without opening it;
// what cannot be deleted (a directory) is left alone and logged once. It
// reports whether it deleted a stray this scan.
func (m *mount) removeStray(l *loop, i int, d *dir, name string, logIt bool, seen map[string]bool) bool {
	err := unix.Unlinkat(d.fd, name, 0)
	switch {
	case err == nil:
		if logIt {
			m.log.Warn("deleted a file whose name is outside the protocol's grammar", "dir", d.name, "name", shownName(name))
		}
		return true
	case errors.Is(err, unix.ENOENT):
		return false
	}
	// Left alone while it is there, and logged once.
	seen[name] = true
	if l.left[i][name] {
		return false
	}
	l.left[i][name] = true
	if isDirAt(d.fd, name) {
		m.log.Warn("left a directory whose name is outside the protocol's grammar", "dir", d.name, "name", shownName(name))
	} else {
		m.log.Error("cannot delete a file whose name is outside the protocol's grammar; leaving it alone while it is there",
			"dir", d.name, "name", shownName(name), "err", err)
	}
	return false
}

// handle relays one request or teardown.
func (m *mount) handle(ctx context.Context, d *dir, id, name string) outcome {
	if d.name == descriptor.RequestsDir {
		return m.handleRequest(ctx, d, id, name)
	}
	return m.handleTeardown(ctx, d, id, name)
}

func (m *mount) handleRequest(ctx context.Context, d *dir, id, name string) outcome {
	log := m.log.With("dir", d.name, "name", name)
	data, fid, err := readFile(d.fd, name, descriptor.MaxSize)
	var bad *badFile
	switch {
	case errors.Is(err, errGone):
		return settled
	case errors.As(err, &bad):
		log.Warn("refused a request file", "reason", "the file "+bad.reason)
		resp, merr := refusedResponse(id, descriptor.CodeBadRequest, "the request file "+bad.reason, "")
		if merr != nil {
			log.Error("cannot encode a refusal", "err", merr)
		}
		return m.answer(log, d, id, name, fid, resp)
	case err != nil:
		log.Warn("cannot read a request file; will retry", "err", err)
		return retry
	}
	resp, err := m.relayer.Relay(ctx, m.Sandbox, id, data)
	var ref *Refusal
	switch {
	case errors.As(err, &ref) && ref.Held:
		// Another request holds the id: its client reads that one's answer.
		log.Warn("relay refused: the id is another request's; no answer written", "code", ref.Code)
		return m.drop(log, d, name, fid)
	case errors.As(err, &ref):
		log.Warn("relay refused", "code", ref.Code, "message", ref.Message)
		if resp, err = refusedResponse(id, ref.Code, ref.Message, ref.AuditID); err != nil {
			log.Error("cannot encode a refusal", "err", err)
		}
	case err != nil && ctx.Err() != nil:
		return settled // stopping: the request stays for the next start
	case err != nil:
		log.Warn("relay failed; will retry", "err", err)
		return retry
	default:
		log.Info("answered")
	}
	return m.answer(log, d, id, name, fid, resp)
}

// answer writes the response to responses/<id>.json, then deletes the
// request (if the name still leads to the file that was answered). A
// refusal never replaces an answer waiting for its client there: it
// refuses a second request under an id another request had (a second
// body, a file the bridge cannot read, a request refused after the
// first's), and the first's client must read its own answer.
func (m *mount) answer(log *slog.Logger, d *dir, id, name string, fid fileID, resp []byte) outcome {
	if m.answered(id) && refused(resp) {
		log.Warn("a refusal of a request whose id has an answer waiting; no answer written")
		return m.drop(log, d, name, fid)
	}
	switch err := writeFile(m.respFd, descriptor.FileName(id), resp); {
	case errors.Is(err, errTargetDir):
		log.Warn("cannot answer: a directory stands in the response's place; the answer is dropped",
			"response", descriptor.FileName(id))
	case err != nil:
		log.Error("cannot write a response; will retry", "err", err)
		return retry
	}
	if err := unlinkSame(d.fd, name, fid); err != nil {
		log.Error("cannot delete an answered request; leaving it alone while it is there", "err", err)
		return leave
	}
	return settled
}

// answered reports whether responses/ holds an answer for id: a regular
// file (anything else there is replaced, never followed).
func (m *mount) answered(id string) bool {
	var st unix.Stat_t
	return unix.Fstatat(m.respFd, descriptor.FileName(id), &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG
}

// refused reports whether a response file refuses its request (one that
// cannot be read counts as a refusal: it replaces nothing).
func refused(resp []byte) bool {
	r, err := descriptor.ParseResponse(resp)
	return err != nil || r.Outcome != descriptor.OutcomeExit
}

// drop deletes a request file that gets no answer of its own (if the name
// still leads to the file that was read).
func (m *mount) drop(log *slog.Logger, d *dir, name string, fid fileID) outcome {
	if err := unlinkSame(d.fd, name, fid); err != nil {
		log.Error("cannot delete a request file; leaving it alone while it is there", "err", err)
		return leave
	}
	return settled
}

func (m *mount) handleTeardown(ctx context.Context, d *dir, id, name string) outcome {
	log := m.log.With("dir", d.name, "name", name)
	data, fid, err := readFile(d.fd, name, MaxTeardownSize)
	var bad *badFile
	switch {
	case errors.Is(err, errGone):
		return settled
	case errors.As(err, &bad):
		log.Warn("refused a teardown file", "reason", "the file "+bad.reason)
	case err != nil:
		log.Warn("cannot read a teardown file; will retry", "err", err)
		return retry
	default:
		err = m.relayer.Teardown(ctx, m.Sandbox, id, data)
		var ref *Refusal
		switch {
		case err != nil && ctx.Err() != nil:
			return settled // stopping: the teardown stays for the next start
		case err != nil && !errors.As(err, &ref):
			// The server is unreachable: keep the teardown and retry (the
			// server refuses it as stale after its freshness window).
			log.Warn("teardown not relayed; will retry", "err", err)
			return retry
		case err != nil:
			log.Warn("teardown refused", "code", ref.Code, "message", ref.Message)
		default:
			log.Info("teardown relayed")
		}
	}
	if err := unlinkSame(d.fd, name, fid); err != nil {
		log.Error("cannot delete a teardown; leaving it alone while it is there", "err", err)
		return leave
	}
	return settled
}

// refusedResponse is the response file of a refusal. A code or message
// the protocol cannot carry is replaced.
func refusedResponse(id, code, msg, auditID string) ([]byte, error) {
	msg = strings.ToValidUTF8(strings.ReplaceAll(msg, "\x00", ""), "?")
	if len(msg) > 4096 {
		msg = msg[:4096]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	r := &descriptor.Response{ID: id, Outcome: descriptor.OutcomeRefused, Code: code, Message: msg, AuditID: auditID}
	out, err := descriptor.MarshalResponse(r)
	if err == nil {
		return out, nil
	}
	r.AuditID = ""
	r.Code, r.Message = string(refusal.Internal), fmt.Sprintf("the bridge could not relay the refusal (code %q)", shownName(code))
	if out, err2 := descriptor.MarshalResponse(r); err2 == nil {
		return out, err
	}
	r.Message = "the bridge could not relay the refusal"
	out, _ = descriptor.MarshalResponse(r)
	return out, err
}

// listDir calls fn with each name in the directory dirFd, a batch at a
// time. It lists a fresh open of the directory ("." relative to dirFd), so
// listings never share an offset.
func listDir(dirFd int, what string, fn func(name string)) error {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(dirFd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), what)
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, name := range names {
			fn(name)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// checkReplaced warns (once) when .coily or one of its directories is no
// longer what the bridge opened: the sandbox replaced it, and files in the
// replacement are not seen until the bridge restarts.
func (m *mount) checkReplaced(l *loop) {
	if l.replaced {
		return
	}
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(m.Dir, descriptor.DirName), &st) != nil || idOf(&st) != m.coilyID {
		l.replaced = true
		m.log.Error("the .coily directory was replaced after the bridge opened it; the bridge keeps serving the one it opened (restart it to serve the new one)")
		return
	}
	for _, d := range m.dirs {
		if unix.Fstatat(m.coilyFd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || idOf(&st) != d.id {
			l.replaced = true
			m.log.Error("a protocol directory was replaced after the bridge opened it; the bridge keeps serving the one it opened (restart it to serve the new one)",
				"dir", d.name)
			return
		}
	}
}
