package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"coily.dev/coily/client"
	"coily.dev/coily/refusal"
)

// Exit codes (docs/cli.md). `exec` exits with the command's own code when
// it ran; the codes below are coily's, chosen as env(1), timeout(1) and
// sysexits(3) do, to stay apart from most commands' own.
const (
	ExitOK      = 0
	ExitFailure = 1 // a command other than exec failed (audit verify found a break, …)
	ExitUsage   = 2 // the command line cannot be run: nothing was sent
	// ExitStateBusy: serve, dev, state rebuild or audit repair found the
	// state directory held by another process; nothing was changed.
	ExitStateBusy = 3
	// ExitUnreachable: no answer from the server (no socket, no route,
	// the tailnet down), as sysexits' EX_UNAVAILABLE.
	ExitUnreachable = 69
	// ExitTimeout: the command ran out of time (command-timeout) and was
	// killed, as timeout(1).
	ExitTimeout = 124
	// ExitRefused: coily refused or could not run the request (any other
	// refusal code, printed on stderr), as env(1) and docker run.
	ExitRefused = client.RefusedExit
)

// Exit is an error carrying the process's exit code; what went wrong was
// already printed.
type Exit int

func (e Exit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exit is nil for success, else the code as an error.
func exit(code int) error {
	if code == ExitOK {
		return nil
	}
	return Exit(code)
}

// Refusal prints err (a refusal, or a transport failure) the one way the
// CLI does and returns its exit code: `coily: refused (CODE): message` and
// 125, `coily: command timed out: …` and 124, `coily: server unreachable: …`
// and 69; a usage error (Usagef: settings no transport can use, nothing
// sent) as `coily: message` and 2. With asJSON, stderr gets one JSON
// object instead.
func Refusal(w io.Writer, err error, asJSON bool) int {
	var u usageError
	if errors.As(err, &u) { // a transport's settings cannot be used: nothing was sent
		if asJSON {
			writeJSON(w, map[string]any{"code": "usage", "message": u.Error()})
		} else {
			PrintLine(w, "coily: %s", u.Error())
		}
		return ExitUsage
	}
	var r *refusal.Error
	if !errors.As(err, &r) {
		r = refusal.FromStatus(err)
	}
	if client.Unreachable(err) {
		if asJSON {
			writeJSON(w, map[string]any{"code": "unreachable", "message": r.Msg})
		} else {
			PrintLine(w, "coily: server unreachable: %s", r.Msg)
		}
		return ExitUnreachable
	}
	code := ExitRefused
	if r.Code == refusal.CommandTimeout {
		code = ExitTimeout
	}
	if asJSON {
		out := map[string]any{"code": r.Code, "message": r.Msg}
		if r.AuditID != "" {
			out["audit_id"] = r.AuditID
		}
		if r.RetryAfter > 0 {
			out["retry_after_ms"] = r.RetryAfter.Milliseconds()
		}
		writeJSON(w, out)
		return code
	}
	PrintLine(w, "coily: refused (%s): %s", r.Code, r.Msg)
	return code
}

// writeJSON writes v as one line of JSON, terminal-safe.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(JSON(b)))
	return err
}

// writeJSONProto writes m as one line of JSON, terminal-safe.
func writeJSONProto(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(JSON(b)))
	return err
}
