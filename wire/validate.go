// Package wire holds the rules every gRPC request meets before anything
// acts on it: the codec that hands an undecodable request on marked
// instead of letting grpc-go answer it unaudited, the checks of any
// message (no field or enum value this server does not know) and the
// shape of each request's fields (sizes, names, characters). A request
// that breaks a rule is refused with bad-request; which commands run is
// the policy's decision, not this package's.
package wire

import (
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// Request limits. Anything beyond them is refused with bad-request.
const (
	maxArgs       = 1024
	maxArgvBytes  = 128 << 10
	maxStdinBytes = 1 << 20
	maxTextBytes  = 1 << 10 // reasons and notes
	maxEnv        = 64
	maxEnvValue   = 32 << 10
)

// CheckMessage refuses what this server cannot interpret faithfully:
// fields it does not know (a newer client's constraint silently dropped
// would widen what runs) and enum values outside their declared set.
func CheckMessage(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	return validateReflect(pm.ProtoReflect(), 0)
}

func validateReflect(m protoreflect.Message, depth int) error {
	if depth > 16 {
		return refusal.New(refusal.BadRequest, "message nested too deeply")
	}
	if isUndecodable(m) {
		return refusal.New(refusal.BadRequest, "request could not be decoded (malformed protobuf or invalid UTF-8)")
	}
	if len(m.GetUnknown()) > 0 {
		return refusal.New(refusal.BadRequest, "%s carries fields this server does not understand (is the server older than the client?)", m.Descriptor().Name())
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = validateField(fd, v, depth)
		return err == nil
	})
	return err
}

func validateField(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) error {
	switch {
	case fd.IsList():
		l := v.List()
		for i := 0; i < l.Len(); i++ {
			if err := validateValue(fd, l.Get(i), depth); err != nil {
				return err
			}
		}
		return nil
	case fd.IsMap():
		var err error
		v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
			err = validateValue(fd.MapValue(), mv, depth)
			return err == nil
		})
		return err
	default:
		return validateValue(fd, v, depth)
	}
}

func validateValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return refusal.New(refusal.BadRequest, "field %s: unknown enum value %d", fd.Name(), v.Enum())
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return validateReflect(v.Message(), depth+1)
	}
	return nil
}

// CheckExec checks an ExecRequest's shape before any policy is consulted.
func CheckExec(req *coilyv1.ExecRequest) error {
	argv := req.GetArgv()
	if len(argv) == 0 {
		return refusal.New(refusal.BadRequest, "argv is empty")
	}
	if len(argv) > maxArgs {
		return refusal.New(refusal.BadRequest, "argv has %d entries, more than %d", len(argv), maxArgs)
	}
	total := 0
	for i, a := range argv {
		total += len(a)
		switch {
		case strings.IndexByte(a, 0) >= 0:
			return refusal.New(refusal.BadRequest, "argv[%d] contains a NUL byte", i)
		case !utf8.ValidString(a):
			return refusal.New(refusal.BadRequest, "argv[%d] is not valid UTF-8", i)
		}
	}
	if total > maxArgvBytes {
		return refusal.New(refusal.BadRequest, "argv is %d bytes, more than %d", total, maxArgvBytes)
	}
	if !policy.IsCommandName(argv[0]) && (!filepath.IsAbs(argv[0]) || filepath.Clean(argv[0]) != argv[0]) {
		return refusal.New(refusal.BadRequest, "argv[0] must be a clean absolute path or a command name, got %q", truncate(argv[0], 256))
	}
	if len(req.GetStdin()) > maxStdinBytes {
		return refusal.New(refusal.BadRequest, "stdin is %d bytes, more than %d", len(req.GetStdin()), maxStdinBytes)
	}
	if t := req.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() <= 0 || t.AsDuration() > policy.MaxTimeout {
			return refusal.New(refusal.BadRequest, "timeout must be positive and at most %s", policy.MaxTimeout)
		}
	}
	if err := validateEnv("env", req.GetEnv()); err != nil {
		return err
	}
	if err := validateEnv("pass_env", req.GetPassEnv()); err != nil {
		return err
	}
	if c := req.GetCwd(); len(c) > 4096 || strings.IndexByte(c, 0) >= 0 {
		return refusal.New(refusal.BadRequest, "cwd must be at most 4096 bytes without NUL")
	}
	if c := req.GetCallerDir(); len(c) > 4096 || strings.IndexByte(c, 0) >= 0 {
		return refusal.New(refusal.BadRequest, "caller_dir must be at most 4096 bytes without NUL")
	}
	return CheckText("note", req.GetNote())
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// validateEnv checks the shape of caller-passed variables; which names are
// allowed is the policy's decision.
func validateEnv(field string, env map[string]string) error {
	if len(env) > maxEnv {
		return refusal.New(refusal.BadRequest, "%s has %d entries, more than %d", field, len(env), maxEnv)
	}
	for k, v := range env {
		switch {
		case !envName.MatchString(k):
			return refusal.New(refusal.BadRequest, "%s name %q is not of the form [A-Za-z_][A-Za-z0-9_]*", field, truncate(k, 64))
		case len(v) > maxEnvValue || strings.IndexByte(v, 0) >= 0:
			return refusal.New(refusal.BadRequest, "%s %s: value must be at most %d bytes without NUL", field, k, maxEnvValue)
		}
	}
	return nil
}

// CheckText checks a field of free text (a reason, a note, a principal's
// name): at most 1 KiB of UTF-8 without NUL bytes.
func CheckText(field, s string) error {
	if len(s) > maxTextBytes {
		return refusal.New(refusal.BadRequest, "%s is %d bytes, more than %d", field, len(s), maxTextBytes)
	}
	if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		return refusal.New(refusal.BadRequest, "%s must be UTF-8 text without NUL bytes", field)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
