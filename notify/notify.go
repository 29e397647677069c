// Package notify pushes the owner's notifications: an approval waits, the
// server was locked out or paused, one caller's refusals repeat. Sinks: an
// ntfy server (JSON publish, with a click link and action buttons that
// open the web console or POST the decision to it) and a webhook (JSON,
// signed with HMAC-SHA256 over a timestamp and the exact body).
//
// Invariants:
//   - Notify never blocks its caller (the Exec pipeline): each sink has a
//     bounded queue, and an event that finds it full is dropped and
//     counted (coily_notifications_total{result="dropped"});
//   - every delivery attempt has a timeout, failed attempts are retried
//     with backoff a bounded number of times, and every outcome is logged
//     and counted;
//   - no secret value is ever in a notification, and no argv unless the
//     policy says include_argv; a notification names the rule, the
//     requester, the approval id and its expiry;
//   - text from callers (principals, rule names, reasons, argv) is
//     stripped of control and formatting characters and bounded before it
//     reaches a title or a message; HTTP headers carry only values coily
//     made (a timestamp, a signature, an event name, a delivery id, the
//     token), never caller text;
//   - the ntfy token and the webhook key are fetched through the keystore
//     by the references the policy names; the last value read is kept, so
//     that a lockout that revoked the keystore's access is still notified.
package notify

import "time"

// Kind names an event.
type Kind string

// Event kinds. The policy's notify.events names them (approval, lockout,
// refusals, pause); a refusal is counted, and notified only as refusals.
const (
	KindApproval Kind = "approval"
	KindLockout  Kind = "lockout"
	KindPause    Kind = "pause"
	// KindRefusal is one refusal, for the count; the server reports every
	// one.
	KindRefusal Kind = "refusal"
	// KindRefusals is a caller's repeated refusals: the dispatcher makes it
	// when a caller reaches the policy's refusals.count within
	// refusals.window.
	KindRefusals Kind = "refusals"
	// KindCheckpoint is a signed checkpoint of the audit log, sent as it
	// is (Checkpoints decides which).
	KindCheckpoint Kind = "checkpoint"
)

// Event is something that happened on the server. Exactly the part of its
// kind is set.
type Event struct {
	Kind     Kind
	Time     time.Time
	Approval *Approval
	Stop     *Stop
	Refusal  *Refusal
	Refusals *Refusals
	// Checkpoint is the signed note (audit.SignCheckpoint), coily's own
	// text: sent verbatim, so that a copy saved to a file is what
	// `coily audit verify --checkpoint FILE` reads.
	Checkpoint []byte
}

// Approval is an approval waiting for a human.
type Approval struct {
	ID        string
	Rule      string
	Requester string
	// Argv is sent only when the policy says include_argv.
	Argv    []string
	Created time.Time
	Expires time.Time
}

// Stop is a lockout or a pause.
type Stop struct {
	By     string
	Reason string
	// Killed commands and Rejected approvals (lockout); Running commands
	// left to finish (pause).
	Killed, Rejected, Running int
}

// Refusal is one refused call.
type Refusal struct {
	// Caller is the principal, or what identifies an unknown caller (the
	// transport and peer address).
	Caller string
	Code   string
}

// Refusals is one caller's refusals within a window.
type Refusals struct {
	Caller      string
	Count       int
	Codes       map[string]int
	First, Last time.Time
	Window      time.Duration
}
