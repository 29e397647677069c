package descriptor

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"
)

// Request asks coily to run a command.
type Request struct {
	Version int // as read; MarshalRequest writes Version (VersionGit with Git) for 0
	ID      string
	// CreatedAt is the creation time in UTC; CreatedAtRaw is the text it was
	// written as (MarshalRequest writes CreatedAtRaw when set, else
	// CreatedAt in RFC 3339 UTC).
	CreatedAt    time.Time
	CreatedAtRaw string
	Nonce        string
	Sandbox      string
	Argv         []string
	Cwd          string            // empty: not given
	Env          map[string]string // nil: none given
	Stdin        []byte            // nil: none given
	Timeout      time.Duration     // whole seconds; zero: not given
	// RequiresConfirm asks for a human's approval even if the rule does not.
	RequiresConfirm bool
	Note            string
	// Git, when set, makes the request a git exchange for the git proxy
	// instead of a command: it then has no Argv and none of the command's
	// members (Cwd, Env, Stdin, Timeout, RequiresConfirm, Note).
	Git  *GitExchange
	HMAC string // as read; MarshalRequest ignores it
}

// Teardown asks coily to cancel the request with the same ID.
type Teardown struct {
	Version   int // Version when read; MarshalTeardown writes Version for 0
	ID        string
	CreatedAt time.Time // UTC
	// CreatedAtRaw is the text CreatedAt was written as; MarshalTeardown
	// writes it when set, else CreatedAt in RFC 3339 UTC.
	CreatedAtRaw string
	Nonce        string
	Sandbox      string
	HMAC         string // as read; MarshalTeardown ignores it
}

// ParseRequest reads a request file. It returns the request and the
// canonical bytes its signature covers (RFC 8785 JSON of the object without
// "hmac"), to be checked with Verify(canonical, r.HMAC, key) before anything
// in it is trusted. Errors are *Error: CodeBadRequest, or CodeHMACFail when
// the signature is missing or malformed (the file is otherwise valid).
func ParseRequest(data []byte) (*Request, []byte, error) {
	root, src, err := parseObject(data, MaxSize)
	if err != nil {
		return nil, nil, err
	}
	r, err := decodeRequest(&decoder{src: src}, root, true)
	if err != nil {
		return nil, nil, err
	}
	canonical, err := Canonicalize(root.toAny("hmac"))
	if err != nil {
		return nil, nil, badf("cannot canonicalise: %v", err)
	}
	return r, canonical, nil
}

func decodeRequest(d *decoder, root *value, requireHMAC bool) (*Request, error) {
	r := &Request{}
	var h header
	var stdin, stdinB64 *value
	for _, m := range root.members {
		if ok, err := d.headerField(m, &h); ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		v := m.val
		var err error
		switch m.key {
		case "argv":
			r.Argv, err = d.argv(v)
		case "cwd":
			r.Cwd, err = d.text("cwd", v, MaxCwdBytes)
		case "env":
			r.Env, err = d.env(v)
		case "stdin":
			stdin = v
			var s string
			if s, err = d.text("stdin", v, MaxStdin); err == nil && s != "" {
				r.Stdin = []byte(s)
			}
		case "stdin_base64":
			stdinB64 = v
			var b []byte
			if b, err = d.base64("stdin_base64", v, MaxStdin); err == nil && len(b) > 0 {
				r.Stdin = b
			}
		case "timeout":
			var n int64
			n, err = d.integer("timeout", v, 1, MaxTimeout)
			r.Timeout = time.Duration(n) * time.Second
		case "requires_confirm":
			r.RequiresConfirm, err = d.boolean("requires_confirm", v)
		case "note":
			r.Note, err = d.text("note", v, MaxNoteBytes)
		case "git":
			r.Git, err = d.git(v)
		default:
			err = unknown(d, m)
		}
		if err != nil {
			return nil, err
		}
	}
	if stdin != nil && stdinB64 != nil {
		return nil, d.fail("stdin_base64", stdinB64, "stdin and stdin_base64 are exclusive")
	}
	if err := d.kindMembers(root, h.version); err != nil {
		return nil, err
	}
	sig, err := d.finishHeader(root, &h, requireHMAC)
	if err != nil {
		return nil, err
	}
	r.Version, r.ID, r.CreatedAt, r.CreatedAtRaw = h.version, h.id, h.createdAt, h.createdRaw
	r.Nonce, r.Sandbox, r.HMAC = h.nonce, h.sandbox, sig
	return r, nil
}

// commandMembers are the members of a request that runs a command.
var commandMembers = []string{"argv", "cwd", "env", "stdin", "stdin_base64", "timeout", "requires_confirm", "note"}

// kindMembers checks that a request is one kind: a command (argv, at
// Version) or a git exchange (git at VersionGit, and none of the
// command's members).
func (d *decoder) kindMembers(root *value, version int) error {
	git := root.get("git")
	switch {
	case git == nil && version == VersionGit:
		return d.fail("version", root.get("version"), "unsupported for a command: version %d is a git exchange's (git is missing)", VersionGit)
	case git == nil && root.get("argv") == nil:
		return d.missing("argv")
	case git == nil:
		return nil
	case version != VersionGit && root.get("version") != nil:
		return d.fail("git", git, "only allowed at version %d", VersionGit)
	}
	for _, f := range commandMembers {
		if v := root.get(f); v != nil {
			return d.fail(f, v, "not allowed in a git exchange")
		}
	}
	return nil
}

func (d *decoder) argv(v *value) ([]string, error) {
	if v.kind != kindArray {
		return nil, d.fail("argv", v, "must be a sequence of strings, not %s", kindName(v.kind))
	}
	if len(v.items) == 0 {
		return nil, d.fail("argv", v, "must not be empty")
	}
	if len(v.items) > MaxArgs {
		return nil, d.fail("argv", v, "more than %d entries", MaxArgs)
	}
	argv := make([]string, len(v.items))
	for i, e := range v.items {
		s, err := d.text(indexPath("argv", i), e, MaxArgBytes)
		if err != nil {
			return nil, err
		}
		argv[i] = s
	}
	if argv[0] == "" {
		return nil, d.fail("argv[0]", v.items[0], "must not be empty")
	}
	return argv, nil
}

func (d *decoder) env(v *value) (map[string]string, error) {
	if v.kind != kindObject {
		return nil, d.fail("env", v, "must be a mapping of strings, not %s", kindName(v.kind))
	}
	if len(v.members) > MaxEnv {
		return nil, d.fail("env", v, "more than %d entries", MaxEnv)
	}
	if len(v.members) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(v.members))
	for _, m := range v.members {
		field := memberPath("env", m.key)
		if !envNameRE().MatchString(m.key) {
			return nil, d.src.errAt(field, m.keyPos, "variable names must match [A-Za-z_][A-Za-z0-9_]*")
		}
		s, err := d.text(field, m.val, MaxSize)
		if err != nil {
			return nil, err
		}
		env[m.key] = s
	}
	return env, nil
}

// ParseTeardown reads a teardown file; see ParseRequest.
func ParseTeardown(data []byte) (*Teardown, []byte, error) {
	root, src, err := parseObject(data, MaxSize)
	if err != nil {
		return nil, nil, err
	}
	t, err := decodeTeardown(&decoder{src: src}, root, true)
	if err != nil {
		return nil, nil, err
	}
	canonical, err := Canonicalize(root.toAny("hmac"))
	if err != nil {
		return nil, nil, badf("cannot canonicalise: %v", err)
	}
	return t, canonical, nil
}

func decodeTeardown(d *decoder, root *value, requireHMAC bool) (*Teardown, error) {
	var h header
	for _, m := range root.members {
		ok, err := d.headerField(m, &h)
		if !ok {
			err = unknown(d, m)
		}
		if err != nil {
			return nil, err
		}
	}
	sig, err := d.finishHeader(root, &h, requireHMAC)
	if err != nil {
		return nil, err
	}
	if h.version != Version {
		return nil, d.fail("version", root.get("version"), "a teardown is version %d", Version)
	}
	return &Teardown{Version: h.version, ID: h.id, CreatedAt: h.createdAt, CreatedAtRaw: h.createdRaw,
		Nonce: h.nonce, Sandbox: h.sandbox, HMAC: sig}, nil
}

// MarshalRequest returns the signed file for r: the canonical JSON of its
// object, with "hmac" computed over the canonical JSON without it, and a
// final newline. Empty optional fields are left out; Stdin is written as
// "stdin" when it is valid UTF-8 without NUL, else as "stdin_base64". r must
// satisfy every rule ParseRequest applies (errors are *Error naming the
// field); r.HMAC is ignored. key must be KeySize bytes (else ErrKeySize).
func MarshalRequest(r *Request, key []byte) ([]byte, error) {
	if len(key) != KeySize {
		return nil, ErrKeySize
	}
	obj, err := requestObject(r)
	if err != nil {
		return nil, err
	}
	if _, err := decodeRequest(&decoder{}, fromAny(obj), false); err != nil {
		return nil, err
	}
	return signObject(obj, key)
}

func requestObject(r *Request) (map[string]any, error) {
	version := r.Version
	if version == 0 && r.Git != nil {
		version = VersionGit
	}
	obj, err := headerObject(version, r.ID, r.CreatedAt, r.CreatedAtRaw, r.Nonce, r.Sandbox)
	if err != nil {
		return nil, err
	}
	if r.Git != nil {
		if r.Argv != nil || r.Cwd != "" || r.Env != nil || r.Stdin != nil || r.Timeout != 0 || r.RequiresConfirm || r.Note != "" {
			return nil, &Error{Code: CodeBadRequest, Field: "git", Msg: "a git exchange runs no command: argv, cwd, env, stdin, timeout, requires_confirm and note must be empty"}
		}
		g, err := gitObject(r.Git)
		if err != nil {
			return nil, err
		}
		obj["git"] = g
		return obj, nil
	}
	if len(r.Argv) > MaxArgs {
		return nil, &Error{Code: CodeBadRequest, Field: "argv", Msg: fmt.Sprintf("more than %d entries", MaxArgs)}
	}
	argv := make([]any, len(r.Argv))
	for i, a := range r.Argv {
		argv[i] = a
	}
	obj["argv"] = argv
	if r.Cwd != "" {
		obj["cwd"] = r.Cwd
	}
	if len(r.Env) > 0 {
		env := make(map[string]any, len(r.Env))
		for _, k := range slices.Sorted(maps.Keys(r.Env)) {
			env[k] = r.Env[k]
		}
		obj["env"] = env
	}
	if len(r.Stdin) > MaxStdin {
		return nil, &Error{Code: CodeBadRequest, Field: "stdin", Msg: fmt.Sprintf("longer than %d bytes", MaxStdin)}
	}
	if len(r.Stdin) > 0 {
		if utf8.Valid(r.Stdin) && bytes.IndexByte(r.Stdin, 0) < 0 {
			obj["stdin"] = string(r.Stdin)
		} else {
			obj["stdin_base64"] = base64.StdEncoding.EncodeToString(r.Stdin)
		}
	}
	if r.Timeout != 0 {
		if r.Timeout%time.Second != 0 {
			return nil, &Error{Code: CodeBadRequest, Field: "timeout", Msg: "must be whole seconds"}
		}
		obj["timeout"] = int64(r.Timeout / time.Second)
	}
	if r.RequiresConfirm {
		obj["requires_confirm"] = true
	}
	if r.Note != "" {
		obj["note"] = r.Note
	}
	return obj, nil
}

func headerObject(version int, id string, createdAt time.Time, createdRaw, nonce, sandbox string) (map[string]any, error) {
	if version == 0 {
		version = Version
	}
	created, err := createdText(createdAt, createdRaw)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"version":    int64(version),
		"id":         id,
		"created_at": created,
		"nonce":      nonce,
		"sandbox":    sandbox,
	}, nil
}

// createdText returns the created_at text to write.
func createdText(t time.Time, raw string) (string, error) {
	if raw == "" {
		if t.IsZero() {
			return "", &Error{Code: CodeBadRequest, Field: "created_at", Msg: "missing (required)"}
		}
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if !t.IsZero() {
		parsed, err := time.Parse(time.RFC3339Nano, raw)
		if err == nil && !parsed.Equal(t) {
			return "", &Error{Code: CodeBadRequest, Field: "created_at", Msg: "CreatedAt and CreatedAtRaw disagree"}
		}
	}
	return raw, nil // checked with the other fields
}

// MarshalTeardown returns the signed file for t; see MarshalRequest.
func MarshalTeardown(t *Teardown, key []byte) ([]byte, error) {
	if len(key) != KeySize {
		return nil, ErrKeySize
	}
	obj, err := headerObject(t.Version, t.ID, t.CreatedAt, t.CreatedAtRaw, t.Nonce, t.Sandbox)
	if err != nil {
		return nil, err
	}
	if _, err := decodeTeardown(&decoder{}, fromAny(obj), false); err != nil {
		return nil, err
	}
	return signObject(obj, key)
}

// signObject adds "hmac" to obj and returns the file: its canonical JSON and
// a newline.
func signObject(obj map[string]any, key []byte) ([]byte, error) {
	body, err := Canonicalize(obj)
	if err != nil {
		return nil, badf("cannot canonicalise: %v", err)
	}
	obj["hmac"] = Sign(body, key)
	out, err := Canonicalize(obj)
	if err != nil {
		return nil, badf("cannot canonicalise: %v", err)
	}
	return append(out, '\n'), nil
}
