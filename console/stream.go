package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/webapi"
)

// An event stream (text/event-stream, read by the pages' EventSource).
// It outlives the server's WriteTimeout: each event has that long to be
// written instead, so a client that stops reading is cut off then.
type eventStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // to write one event
}

// startStream answers 200 with the stream's headers and its reconnection
// delay, flushed at once: the client sees the stream open (EventSource's
// "open") before the first event, which may be a heartbeat away.
func (c *Console) startStream(w http.ResponseWriter) *eventStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	s := &eventStream{w: w, rc: http.NewResponseController(w), timeout: c.limits.WriteTimeout}
	s.deadline()
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 1000\n\n")
	_ = s.rc.Flush()
	return s
}

// deadline gives the next event its time to be written.
func (s *eventStream) deadline() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout)) // a recorder has none
}

// send writes one event: its name, id (none when empty) and JSON data
// (one line: encoding/json writes no newline inside a value).
func (s *eventStream) send(event, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.deadline()
	if id != "" {
		if _, err := fmt.Fprintf(s.w, "id: %s\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *eventStream) ping() error {
	s.deadline()
	if _, err := fmt.Fprint(s.w, ": ping\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}

// refused ends a stream whose caller lost the right to it.
func (s *eventStream) refused(err error) {
	re := refusal.As(err)
	_ = s.send("refused", "", errorBody{Code: string(re.Code), Message: vt(re.Msg), AuditID: re.AuditID})
}

// apiAuditStream streams the audit log: the last records matching the
// filter, an event "ready", then each new matching record as it is
// written, with its Seq as the event id (a reconnecting EventSource sends
// the last one back in Last-Event-ID, and gets what it missed, as far as
// the backlog reaches). The stream re-checks the caller's right every
// heartbeat: a revoked grant ends it.
func (c *Console) apiAuditStream(w http.ResponseWriter, r *request) {
	f, err := parseFilter(r.URL.RawQuery, webapi.MaxAuditBacklog)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	lastID, _ := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64)
	backlog := f.backlog
	if lastID > 0 {
		backlog = webapi.MaxAuditBacklog
	}
	st, err := c.cfg.Server.WebAudit(r.Request, backlog)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	defer st.Close()
	es := c.startStream(w)
	id := func(rec audit.Record) string { return strconv.FormatUint(rec.Seq, 10) }
	if st.Fleet { // several hosts' seqs: no position to resume from
		lastID, id = 0, func(audit.Record) string { return "" }
	}
	var last uint64
	for _, rec := range st.Backlog {
		last = rec.Seq
		if rec.Seq > lastID && f.match(rec) {
			if es.send("record", id(rec), newRecordView(rec)) != nil {
				return
			}
		}
	}
	if st.Fleet {
		last = 0 // Live repeats none of the backlog
	}
	// dropped: older records of the backlog left out to bound its bytes
	// (a fleet's view), which the page says.
	if es.send("ready", "", map[string]uint64{"seq": last, "dropped": uint64(max(st.Dropped, 0))}) != nil {
		return
	}
	beat := time.NewTicker(c.cfg.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done(): // the console closes
			return
		case rec, ok := <-st.Live:
			if !ok {
				return // behind, or the server stops: the page reconnects
			}
			if rec.Seq <= last || !f.match(rec) {
				continue
			}
			if es.send("record", id(rec), newRecordView(rec)) != nil {
				return
			}
		case <-beat.C:
			if err := c.cfg.Server.WebAdmit(r.Request, access.WebAudit); err != nil {
				es.refused(err)
				return
			}
			if es.ping() != nil {
				return
			}
		}
	}
}

// apiApprovalStream streams the approvals' changes (as WatchApprovals):
// each pending one first, then every change, as events "approval". The
// pages fetch /api/approvals for the details when one arrives.
func (c *Console) apiApprovalStream(w http.ResponseWriter, r *request) {
	wa, err := c.cfg.Server.WebWatchApprovals(r.Request)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	defer wa.Close()
	es := c.startStream(w)
	beat := time.NewTicker(c.cfg.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done(): // the console closes
			return
		case <-wa.Done:
			return
		case a, ok := <-wa.Changes:
			if !ok {
				return
			}
			if es.send("approval", "", newApprovalView(a, nil, c.cfg.Now())) != nil {
				return
			}
		case <-beat.C:
			if err := c.cfg.Server.WebAdmit(r.Request, access.WebWatchApprovals); err != nil {
				es.refused(err)
				return
			}
			if es.ping() != nil {
				return
			}
		}
	}
}
