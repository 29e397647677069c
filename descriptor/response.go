package descriptor

import (
	"encoding/base64"
	"unicode/utf8"
)

// Outcomes of a response.
const (
	OutcomeExit    = "exit"    // the command ran and ended
	OutcomeRefused = "refused" // coily refused the request
	OutcomeHTTP    = "http"    // the git proxy answered a git exchange
)

// Response is the bridge's answer to a request. It is not signed: the
// sandbox trusts the shared folder's bridge-written side.
//
// For OutcomeRefused, Code and Message say why and the exit fields are
// empty. For OutcomeExit, the output of each stream is carried as text
// (StdoutText) when it is valid UTF-8, else as base64 (StdoutBase64); set
// both with SetOutput and read them with Stdout and Stderr.
type Response struct {
	Version int // as read; MarshalResponse writes Version (VersionGit for OutcomeHTTP) for 0
	ID      string
	Outcome string
	Code    string // refusal code, when refused
	Message string // refusal message, when refused

	ExitCode int // -1 when killed by a signal
	Signal   int // 0 if none

	StdoutText, StdoutBase64 string
	StderrText, StderrBase64 string

	StdoutTruncated, StderrTruncated bool

	DurationMS int64
	AuditID    string
	Rule       string // the rule that allowed the command, if any

	// Git is the git proxy's answer, for OutcomeHTTP.
	Git *GitAnswer
}

// SetOutput sets the output fields, as text when valid UTF-8 and as base64
// otherwise.
func (r *Response) SetOutput(stdout, stderr []byte) {
	r.StdoutText, r.StdoutBase64 = encodeOutput(stdout)
	r.StderrText, r.StderrBase64 = encodeOutput(stderr)
}

func encodeOutput(b []byte) (text, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

// Stdout returns the command's standard output.
func (r *Response) Stdout() ([]byte, error) { return decodeOutput(r.StdoutText, r.StdoutBase64) }

// Stderr returns the command's standard error.
func (r *Response) Stderr() ([]byte, error) { return decodeOutput(r.StderrText, r.StderrBase64) }

func decodeOutput(text, b64 string) ([]byte, error) {
	if b64 == "" {
		return []byte(text), nil
	}
	if text != "" {
		return nil, badf("output set both as text and as base64")
	}
	b, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, badf("output is not standard padded base64")
	}
	return b, nil
}

// MarshalResponse returns r's file: its canonical JSON (RFC 8785) and a
// newline. version, id, outcome and duration_ms are always written; a
// refusal adds code and message; an exit adds exit_code, signal, both
// *_truncated flags and each stream as text or base64 (empty output as "");
// audit_id and rule are written when set. Errors are *Error naming the field
// that breaks a rule ParseResponse applies.
func MarshalResponse(r *Response) ([]byte, error) {
	version := r.Version
	switch {
	case version == 0 && r.Outcome == OutcomeHTTP:
		version = VersionGit
	case version == 0:
		version = Version
	}
	obj := map[string]any{
		"version":     int64(version),
		"id":          r.ID,
		"outcome":     r.Outcome,
		"duration_ms": r.DurationMS,
	}
	switch {
	case r.Outcome == OutcomeRefused:
		obj["code"], obj["message"] = r.Code, r.Message
	case r.Outcome == OutcomeHTTP && r.Git != nil:
		answerObject(obj, r.Git)
	case r.Outcome == OutcomeHTTP:
		return nil, &Error{Code: CodeBadRequest, Field: "status", Msg: "missing (required)"}
	default:
		obj["exit_code"], obj["signal"] = int64(r.ExitCode), int64(r.Signal)
		if r.StdoutBase64 != "" {
			obj["stdout_base64"] = r.StdoutBase64
		}
		if r.StdoutBase64 == "" || r.StdoutText != "" {
			obj["stdout"] = r.StdoutText
		}
		if r.StderrBase64 != "" {
			obj["stderr_base64"] = r.StderrBase64
		}
		if r.StderrBase64 == "" || r.StderrText != "" {
			obj["stderr"] = r.StderrText
		}
		obj["stdout_truncated"], obj["stderr_truncated"] = r.StdoutTruncated, r.StderrTruncated
	}
	if r.AuditID != "" {
		obj["audit_id"] = r.AuditID
	}
	if r.Rule != "" {
		obj["rule"] = r.Rule
	}
	if _, err := decodeResponse(&decoder{}, fromAny(obj)); err != nil {
		return nil, err
	}
	out, err := Canonicalize(obj)
	if err != nil {
		return nil, badf("cannot canonicalise: %v", err)
	}
	if len(out)+1 > MaxResponseSize {
		return nil, badf("response larger than %d bytes", MaxResponseSize)
	}
	return append(out, '\n'), nil
}

// ParseResponse reads a response file, as strictly as ParseRequest reads
// requests, up to MaxResponseSize bytes (larger than MaxSize only as JSON).
func ParseResponse(data []byte) (*Response, error) {
	root, src, err := parseObject(data, MaxResponseSize)
	if err != nil {
		return nil, err
	}
	return decodeResponse(&decoder{src: src}, root)
}

// exitOnly are the members only an "exit" response has.
var exitOnly = map[string]bool{
	"exit_code": true, "signal": true, "stdout": true, "stdout_base64": true, "stderr": true,
	"stderr_base64": true, "stdout_truncated": true, "stderr_truncated": true,
}

func decodeResponse(d *decoder, root *value) (*Response, error) {
	r := &Response{}
	for _, f := range []string{"version", "id", "outcome"} {
		if root.get(f) == nil {
			return nil, d.missing(f)
		}
	}
	outcome := root.get("outcome")
	switch {
	case outcome.kind == kindString && outcome.str == OutcomeExit:
	case outcome.kind == kindString && outcome.str == OutcomeRefused:
	case outcome.kind == kindString && outcome.str == OutcomeHTTP:
		r.Git = &GitAnswer{}
	default:
		return nil, d.fail("outcome", outcome, "must be %q, %q or %q", OutcomeExit, OutcomeRefused, OutcomeHTTP)
	}
	r.Outcome = outcome.str
	refused := r.Outcome == OutcomeRefused
	for _, m := range root.members {
		v := m.val
		switch {
		case refused && exitOnly[m.key]:
			return nil, d.src.errAt(m.key, m.keyPos, "not allowed in a refusal")
		case r.Git != nil && exitOnly[m.key]:
			return nil, d.src.errAt(m.key, m.keyPos, "not allowed in an http answer")
		case r.Git == nil && httpOnly[m.key]:
			return nil, d.src.errAt(m.key, m.keyPos, "only allowed in an http answer")
		case httpOnly[m.key]:
			if err := d.answerField(m, r.Git); err != nil {
				return nil, err
			}
			continue
		}
		var err error
		var n int64
		switch m.key {
		case "version":
			r.Version, err = d.version(v)
		case "id":
			r.ID, err = d.id("id", v)
		case "outcome":
		case "code":
			if !refused {
				return nil, d.src.errAt("code", m.keyPos, "only allowed in a refusal")
			}
			r.Code, err = d.match("code", v, codeRE(), "a refusal code (a-z 0-9 -)")
		case "message":
			if !refused {
				return nil, d.src.errAt("message", m.keyPos, "only allowed in a refusal")
			}
			r.Message, err = d.text("message", v, maxMessage)
		case "exit_code":
			n, err = d.integer("exit_code", v, -1, 255)
			r.ExitCode = int(n)
		case "signal":
			n, err = d.integer("signal", v, 0, 255)
			r.Signal = int(n)
		case "stdout":
			r.StdoutText, err = d.str("stdout", v)
		case "stderr":
			r.StderrText, err = d.str("stderr", v)
		case "stdout_base64":
			r.StdoutBase64, err = d.outputBase64("stdout_base64", v)
		case "stderr_base64":
			r.StderrBase64, err = d.outputBase64("stderr_base64", v)
		case "stdout_truncated":
			r.StdoutTruncated, err = d.boolean("stdout_truncated", v)
		case "stderr_truncated":
			r.StderrTruncated, err = d.boolean("stderr_truncated", v)
		case "duration_ms":
			r.DurationMS, err = d.integer("duration_ms", v, 0, maxSafeInt)
		case "audit_id":
			r.AuditID, err = d.text("audit_id", v, maxLabel)
		case "rule":
			r.Rule, err = d.text("rule", v, maxLabel)
		default:
			err = unknown(d, m)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, s := range []string{"stdout", "stderr"} {
		if root.get(s) != nil && root.get(s+"_base64") != nil {
			return nil, d.fail(s+"_base64", root.get(s+"_base64"), "%s and %s_base64 are exclusive", s, s)
		}
	}
	if refused {
		for _, f := range []string{"code", "message"} {
			if root.get(f) == nil {
				return nil, d.missing(f)
			}
		}
	} else if r.Git != nil {
		if root.get("status") == nil {
			return nil, d.missing("status")
		}
	} else if root.get("exit_code") == nil {
		return nil, d.missing("exit_code")
	}
	switch {
	case r.Git != nil && r.Version != VersionGit:
		return nil, d.fail("outcome", outcome, "%q only at version %d", OutcomeHTTP, VersionGit)
	case r.Outcome == OutcomeExit && r.Version != Version:
		return nil, d.fail("version", root.get("version"), "an exit is version %d", Version)
	}
	return r, nil
}

// outputBase64 checks a base64 output member and returns it as written.
func (d *decoder) outputBase64(field string, v *value) (string, error) {
	if _, err := d.base64(field, v, MaxResponseSize); err != nil {
		return "", err
	}
	return v.str, nil
}
