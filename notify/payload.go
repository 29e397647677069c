package notify

import "time"

// PayloadVersion is the version of the webhook body's schema.
const PayloadVersion = 1

// Payload is the JSON body of a webhook delivery (docs/operations.md,
// "Notifications"). Strings that came from callers are as they were
// (JSON escapes them); Title and Message are the cleaned text a push
// notification shows.
type Payload struct {
	Version int `json:"version"`
	// ID is the delivery's id: the same for every attempt of one
	// notification, so a receiver drops duplicates and replays by it.
	ID      string    `json:"id"`
	Event   string    `json:"event"`
	Time    time.Time `json:"time"`
	Title   string    `json:"title"`
	Message string    `json:"message"`
	// URL is the console page of the event, when the console is known.
	URL      string           `json:"url,omitempty"`
	Approval *PayloadApproval `json:"approval,omitempty"`
	Lockout  *PayloadStop     `json:"lockout,omitempty"`
	Pause    *PayloadStop     `json:"pause,omitempty"`
	Refusals *PayloadRefusals `json:"refusals,omitempty"`
	// Checkpoint is a signed checkpoint of the audit log (event
	// audit.checkpoint), verbatim.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// PayloadApproval is a waiting approval.
type PayloadApproval struct {
	ID        string    `json:"id"`
	Rule      string    `json:"rule"`
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"`
	// Argv is present only when the policy says include_argv.
	Argv       []string `json:"argv,omitempty"`
	URL        string   `json:"url,omitempty"`
	ApproveURL string   `json:"approve_url,omitempty"`
	DenyURL    string   `json:"deny_url,omitempty"`
}

// PayloadStop is a lockout or a pause.
type PayloadStop struct {
	By                string `json:"by"`
	Reason            string `json:"reason,omitempty"`
	Killed            int    `json:"killed,omitempty"`
	ApprovalsRejected int    `json:"approvals_rejected,omitempty"`
	Running           int    `json:"running,omitempty"`
}

// PayloadRefusals is one caller's repeated refusals.
type PayloadRefusals struct {
	Caller        string         `json:"caller"`
	Count         int            `json:"count"`
	Codes         map[string]int `json:"codes"`
	First         time.Time      `json:"first"`
	Last          time.Time      `json:"last"`
	WindowSeconds int64          `json:"window_seconds"`
}
