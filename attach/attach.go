// Package attach is what an execution carries besides its command: its
// egress proxy, its ssh agent, its GitHub App token, its git credential
// helper, its CA bundle and the leases of its credentials. Each is an
// Attachment, in a package of its own that knows its part of a rule, how
// to ready it for one run, what the audit records say about it, and how
// to undo it. The server readies an execution's attachments in order
// (step 9 of the Exec pipeline) and closes them, each once, when the
// command is over or will never run.
package attach

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/keystore"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// Attachment is one thing an execution carries.
type Attachment interface {
	// Prepare readies it for the run, adding what the command gets from
	// it to run's Env and Binds. An error is the exec's refusal (a
	// refusal.Error with its code); nothing runs.
	Prepare(ctx context.Context, run *Run) error
	// Close undoes Prepare and writes what the attachment saw into end.
	// The first call does it; later calls do nothing. It is called
	// whether Prepare ran, failed or never ran.
	Close(ctx context.Context, end *End)
	// Describe writes what every audit record of the execution says about
	// the attachment: names and references, never values.
	Describe(rec *audit.Record)
}

// Run is the execution an attachment is readied for, and what the
// attachments give its command.
type Run struct {
	// ID is the execution's id.
	ID string
	// Scratch is the server's scratch directory, where what an
	// attachment makes is named ScratchPrefix and something (the start's
	// sweep removes what a crash left); PrivateDir makes a new directory
	// there that only the server (and, for a root server, the sandbox's
	// user passing through) can reach. What an attachment makes there it
	// removes on Close.
	Scratch, ScratchPrefix string
	PrivateDir             func() (string, error)
	// Give hands a file or socket to the user the sandbox runs as, which
	// reaches it through its descriptor.
	Give func(path string) error
	// Secrets are the execution's credential values, redacted from
	// whatever an attachment reports.
	Secrets *scrub.Set
	Log     *slog.Logger

	// Env are the variables the attachments give the command, which no
	// caller-passed variable replaces (policy refuses the overlap).
	Env map[string]string
	// Binds are what they make visible inside its sandbox.
	Binds []sandbox.Bind
}

// SetEnv sets one variable of the command's environment.
func (r *Run) SetEnv(name, value string) {
	if r.Env == nil {
		r.Env = map[string]string{}
	}
	r.Env[name] = value
}

// Bind makes b visible inside the sandbox.
func (r *Run) Bind(b sandbox.Bind) { r.Binds = append(r.Binds, b) }

// Bound is the path of the bind at at, "" without one.
func (r *Run) Bound(at string) string {
	for _, b := range r.Binds {
		if b.At == at {
			return b.Path
		}
	}
	return ""
}

// End is how an execution ended, for its attachments to write what they
// saw into: the audit record of its end and, when its command ran, the
// answer's exit event.
type End struct {
	// Record is the end's audit record: the exec.result, or the refusal of
	// a command that never ran; nil when none is written.
	Record *audit.Record
	// Result says Record is an exec.result (the command ran, or was about
	// to when it failed).
	Result bool
	// Exit is the answer's exit event, nil when there is none.
	Exit *coilyv1.ExecExit
}

// ListenUnix listens on a unix socket at path that only its owner may
// connect to (0600, whatever the umask), for Run.Give to hand to the
// sandbox's user: no other process of that user, or of the server's
// group, reaches an exec's agent or proxy through it. (Between bind and
// chmod it has the umask's mode, in a directory whose 128-bit random name
// nobody else knows: see Run.PrivateDir.)
func ListenUnix(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// Credentialed is an attachment that needs credentials, fetched with the
// rule's (step 8), every failure refusing the exec before anything runs.
type Credentialed interface {
	Attachment
	// Refs are the references it needs, by the name it is given their
	// values under: never a variable of the child (policy reserves the
	// names), only a label of their redaction.
	Refs() map[string]keystore.Ref
	// Take takes its values out of vals, which then become the child's
	// environment, and returns those it took: they never reach the child,
	// but are redacted from its output all the same. A value it cannot
	// use is the exec's refusal (credential-unavailable, naming the
	// reference, never the value).
	Take(ctx context.Context, vals map[string]string) ([]scrub.Secret, error)
}

// Leased is an attachment that holds the leases the execution's
// credentials came with (dynamic secrets), before any attachment takes
// their values (step 8).
type Leased interface {
	Attachment
	// Hold holds leases until Close revokes them; an error is the exec's
	// refusal, and Close revokes what it holds.
	Hold(leases []keystore.Lease) error
}

// Keeper is an attachment with work to do while the command runs.
type Keeper interface {
	Attachment
	// Keep starts that work as the command starts, to last until
	// deadline (the command's timeout); the stop it returns is called as
	// soon as the command is over, and waits for the work to end.
	Keep(deadline time.Time) (stop func())
}
