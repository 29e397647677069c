// Package webapi is what the web console asks of the server: the Server
// interface (implemented by package server's Server, whose Web methods
// admit every request through access before acting) and the views it
// answers with. The console depends on it, never on package server.
package webapi

import (
	"net/http"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/stops"
)

// Server is the server as the console reaches it. Each method identifies
// and authorizes the request it is given for its action, audits a
// refusal, and returns a refusal (refusal.As) with a caller-safe message.
type Server interface {
	// WebAdmit identifies and authorizes r for a without doing anything
	// else (pages, and a stream's periodic re-check).
	WebAdmit(r *http.Request, a access.WebAction) error
	// WebWhoAmI identifies the caller.
	WebWhoAmI(r *http.Request) (Caller, error)
	// WebStatus answers as Status does, with the Execs in flight.
	WebStatus(r *http.Request) (*StatusView, error)
	// WebApprovals lists the pending approvals with the rules that asked
	// for them.
	WebApprovals(r *http.Request) ([]approvals.Pending, error)
	// WebDecide approves or denies a pending approval.
	WebDecide(r *http.Request, id string, approve bool, note string) (*coilyv1.Approval, error)
	WebLockout(r *http.Request, reason string) (*coilyv1.LockoutResponse, error)
	WebPause(r *http.Request, reason string) (*coilyv1.PauseResponse, error)
	WebResume(r *http.Request, reason string) (*coilyv1.ResumeResponse, error)
	// WebKill kills one command in flight by its request id; it reports
	// whether the command was running.
	WebKill(r *http.Request, requestID, reason string) (bool, error)
	// WebAudit subscribes to the audit log: the last backlog records (at
	// most MaxAuditBacklog), then every record as it is appended.
	WebAudit(r *http.Request, backlog int) (*AuditStream, error)
	// WebWatchApprovals subscribes to the approvals.
	WebWatchApprovals(r *http.Request) (*ApprovalWatch, error)
	// WebHTTPServer is an HTTP server for h under lim whose connections
	// are capped per peer, each refusal audited.
	WebHTTPServer(h http.Handler, lim httpserve.Limits) *httpserve.Server
	// WebRefuse audits a request the console's guard refused before any
	// action, and returns the refusal (permission-denied with msg).
	WebRefuse(r *http.Request, msg string) error
}

// Caller is who a console request comes from and what it may do.
type Caller struct {
	Principal   string
	Peer        string
	Roles       []string
	Permissions []policy.Permission
}

// StatusView is what the console's status page shows.
type StatusView struct {
	// Status is the Status RPC's answer for this caller.
	Status *coilyv1.StatusResponse
	// Execs are the Execs in flight, oldest first; shown only to callers
	// holding the status permission (ExecsShown), as they name other
	// principals' commands.
	Execs      []stops.ExecInfo
	ExecsShown bool
}

// AuditStream is the live audit log for one subscriber.
type AuditStream struct {
	// Backlog are the last records written before the subscription, oldest
	// first.
	Backlog []audit.Record
	// Dropped is how many older records of the backlog were left out
	// to bound its bytes (a fleet's, WithAuditFeed), at least.
	Dropped int
	// Live carries every record appended since (some may also be in the
	// backlog: skip those up to the backlog's last Seq). It is closed when
	// the subscriber falls too far behind (reconnect) or the server shuts
	// down.
	Live <-chan audit.Record
	// Close ends the subscription.
	Close func()
	// Fleet is set for the records of several hosts (WithAuditFeed): Live
	// repeats none of the backlog, and a Seq orders one host's records
	// only, so it is no position in the stream.
	Fleet bool
}

// MaxAuditBacklog bounds the records a stream starts with.
const MaxAuditBacklog = 500

// ApprovalWatch is the approvals' changes for one subscriber.
type ApprovalWatch struct {
	// Changes first carries the pending approvals, then every change. It
	// is closed when the subscriber falls too far behind (reconnect).
	Changes <-chan *coilyv1.Approval
	// Done is closed when the server shuts down.
	Done <-chan struct{}
	// Close ends the subscription.
	Close func()
}
