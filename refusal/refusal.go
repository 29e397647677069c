// Package refusal owns coily's stable refusal codes and their one mapping to
// and from gRPC status errors.
//
// A refusal carries a code (one of the Code constants, sent to the caller as
// google.rpc.ErrorInfo.reason in domain "coily.dev"), a message that is safe
// to show the caller, and optionally a detail error that only the server's
// log sees. Codes are part of the API: they are never renamed or reused.
package refusal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Domain is the ErrorInfo domain of every coily refusal.
const Domain = "coily.dev"

// Code is a stable refusal code.
type Code string

// The refusal codes (docs/architecture.md#refusal-codes; when each is
// emitted: docs/api.md#refusals).
const (
	Unauthenticated       Code = "unauthenticated"
	PermissionDenied      Code = "permission-denied"
	HMACFail              Code = "hmac-fail"
	ReplayDetected        Code = "replay-detected"
	StaleRequest          Code = "stale-request"
	LockoutActive         Code = "lockout-active"
	PauseActive           Code = "pause-active"
	RateLimit             Code = "rate-limit"
	ConcurrencyBusy       Code = "concurrency-busy"
	PolicyDeny            Code = "policy-deny"
	ConfirmRejected       Code = "confirm-rejected"
	ConfirmTimeout        Code = "confirm-timeout"
	CredentialUnavailable Code = "credential-unavailable"
	SandboxUnavailable    Code = "sandbox-unavailable"
	CommandTimeout        Code = "command-timeout"
	// StateUnavailable: the state a decision depends on (the rate
	// buckets, the relay's records, the signing keys, the stop controls)
	// could not be reached; nothing was run.
	StateUnavailable Code = "state-unavailable"
	// CommandKilled: someone allowed to stop commands killed this one
	// alone (the web console's kill), while it waited or ran.
	CommandKilled Code = "command-killed"
	BadRequest    Code = "bad-request"
	Internal      Code = "internal"
)

// grpcCodes maps each refusal code to its gRPC status code. A code missing
// here maps to codes.Internal.
var grpcCodes = map[Code]codes.Code{
	Unauthenticated:       codes.Unauthenticated,
	PermissionDenied:      codes.PermissionDenied,
	HMACFail:              codes.Unauthenticated,
	ReplayDetected:        codes.AlreadyExists,
	StaleRequest:          codes.FailedPrecondition,
	LockoutActive:         codes.FailedPrecondition,
	PauseActive:           codes.FailedPrecondition,
	RateLimit:             codes.ResourceExhausted,
	ConcurrencyBusy:       codes.ResourceExhausted,
	PolicyDeny:            codes.PermissionDenied,
	ConfirmRejected:       codes.PermissionDenied,
	ConfirmTimeout:        codes.DeadlineExceeded,
	CredentialUnavailable: codes.Unavailable,
	SandboxUnavailable:    codes.Unavailable,
	CommandTimeout:        codes.DeadlineExceeded,
	StateUnavailable:      codes.Unavailable,
	CommandKilled:         codes.Aborted,
	BadRequest:            codes.InvalidArgument,
	Internal:              codes.Internal,
}

// Codes lists every refusal code in a stable order.
func Codes() []Code {
	return []Code{Unauthenticated, PermissionDenied, HMACFail, ReplayDetected, StaleRequest,
		LockoutActive, PauseActive, RateLimit, ConcurrencyBusy, PolicyDeny, ConfirmRejected,
		ConfirmTimeout, CredentialUnavailable, SandboxUnavailable, CommandTimeout, CommandKilled, StateUnavailable,
		BadRequest, Internal}
}

// GRPCCode returns the gRPC status code a refusal code is sent with.
func (c Code) GRPCCode() codes.Code {
	if gc, ok := grpcCodes[c]; ok {
		return gc
	}
	return codes.Internal
}

// Error is a refusal.
type Error struct {
	Code Code
	// Msg is shown to the caller. It must never contain a secret.
	Msg string
	// RetryAfter, for rate-limit refusals, is when a retry may succeed.
	RetryAfter time.Duration
	// Detail is for the server's log only.
	Detail error
	// AuditID names the audit record of the refusal ("A" and 12 digits),
	// when it was recorded on its own line. It travels as the "audit_id"
	// metadata of the ErrorInfo detail.
	AuditID string
}

func (e *Error) Error() string {
	if e.Detail != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Msg, e.Detail)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Msg)
}

// Unwrap exposes the detail to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Detail }

// New returns a refusal with a caller-safe message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns a refusal whose detail (logged, never sent) is err.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Detail: err}
}

// WithAudit returns err as a refusal (see As) that names its audit record
// id; err itself is not changed. An empty id returns err unchanged.
func WithAudit(err error, id string) error {
	if id == "" || err == nil {
		return err
	}
	r := *As(err)
	r.AuditID = id
	return &r
}

// As returns err as a refusal. Anything that is not one becomes an internal
// refusal whose message reveals nothing and whose detail is err; context
// cancellation stays recognisable to the caller's transport.
func As(err error) *Error {
	var r *Error
	if errors.As(err, &r) {
		return r
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: Internal, Msg: "request cancelled", Detail: err}
	}
	return &Error{Code: Internal, Msg: "internal error", Detail: err}
}

// Status converts err to the gRPC status sent to the caller: the code's
// gRPC code, the safe message, ErrorInfo, and RetryInfo when set. This is the
// only place refusals become gRPC errors.
func Status(err error) *status.Status {
	r := As(err)
	st := status.New(r.Code.GRPCCode(), r.Msg)
	info := &errdetails.ErrorInfo{Reason: string(r.Code), Domain: Domain}
	if r.AuditID != "" {
		info.Metadata = map[string]string{"audit_id": r.AuditID}
	}
	details := []protoadapt.MessageV1{info}
	if r.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st
}

// FromStatus recovers the refusal from a gRPC error received by a client.
// Errors without coily ErrorInfo keep their gRPC code as context: an
// Unauthenticated status from the transport reads as unauthenticated, and
// anything else as internal with the status message.
func FromStatus(err error) *Error {
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Code: Internal, Msg: err.Error(), Detail: err}
	}
	r := &Error{Code: Internal, Msg: st.Message(), Detail: err}
	found := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == Domain {
				r.Code, r.AuditID, found = Code(d.GetReason()), d.GetMetadata()["audit_id"], true
			}
		case *errdetails.RetryInfo:
			r.RetryAfter = d.GetRetryDelay().AsDuration()
		}
	}
	if !found {
		r.Code = fromGRPC(st.Code())
	}
	return r
}

func fromGRPC(c codes.Code) Code {
	switch c {
	case codes.Unauthenticated:
		return Unauthenticated
	case codes.PermissionDenied:
		return PermissionDenied
	case codes.InvalidArgument, codes.ResourceExhausted:
		// Without ErrorInfo these come from gRPC itself: a request it
		// could not accept (e.g. larger than the message size limit).
		return BadRequest
	default:
		return Internal
	}
}
