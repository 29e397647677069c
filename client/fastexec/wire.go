package fastexec

import (
	"errors"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The messages of an Exec, encoded and decoded with protowire instead of
// the generated types: linking the protobuf runtime alone would cost this
// client a third of its start-up. Field numbers are those of
// proto/coily/v1/coily.proto and google/rpc/status.proto,
// error_details.proto; TestWireMatchesGenerated checks both ways against
// the generated code, so a field renumbered or added there fails it.

// Request is the subset of ExecRequest this client sends.
type Request struct {
	Argv  []string // field 1
	Stdin []byte   // field 2
}

func (r Request) marshal() []byte {
	var b []byte
	for _, a := range r.Argv {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, a)
	}
	if len(r.Stdin) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Stdin)
	}
	return b
}

// Exit is the ExecExit event.
type Exit struct {
	Code            int32    // field 1
	Signal          int32    // field 2
	EgressDenied    []string // field 7
	SSHAgentRefused []string // field 8
}

// Approval is the part of an Approval event this client shows.
type Approval struct {
	ID        string    // field 1
	Rule      string    // field 5
	ExpiresAt time.Time // field 7 (a Timestamp)
}

// response is one ExecResponse: at most one of its events (the oneof's
// fields 1 started, 2 output, 3 exit, 4 approval).
type response struct {
	output   []byte // ExecOutput.data (field 2)
	stderr   bool   // ExecOutput.stream (field 1) is STREAM_STDERR (2)
	exit     *Exit
	approval *Approval
}

var errWire = errors.New("malformed message")

// fields calls f with each field of a message; f consumes the value and
// returns how many bytes it took (from protowire's Consume*), or a
// negative number for a malformed one.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) int) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		m := f(num, typ, b)
		if m < 0 {
			return errWire
		}
		b = b[m:]
	}
	return nil
}

// skip consumes a field this client does not read.
func skip(num protowire.Number, typ protowire.Type, v []byte) int {
	return protowire.ConsumeFieldValue(num, typ, v)
}

// bytesField consumes a length-delimited field into *dst.
func bytesField(typ protowire.Type, v []byte, dst *[]byte) int {
	if typ != protowire.BytesType {
		return -1
	}
	b, n := protowire.ConsumeBytes(v)
	*dst = b
	return n
}

func stringField(typ protowire.Type, v []byte, dst *string) int {
	var b []byte
	n := bytesField(typ, v, &b)
	*dst = string(b)
	return n
}

// varintField consumes a varint field into *dst.
func varintField(typ protowire.Type, v []byte, dst *uint64) int {
	if typ != protowire.VarintType {
		return -1
	}
	x, n := protowire.ConsumeVarint(v)
	*dst = x
	return n
}

func unmarshalResponse(b []byte) (response, error) {
	var r response
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var sub []byte
		switch num {
		case 2:
			n := bytesField(typ, v, &sub)
			if n >= 0 && unmarshalOutput(sub, &r) != nil {
				return -1
			}
			return n
		case 3:
			n := bytesField(typ, v, &sub)
			if n >= 0 {
				r.exit = new(Exit)
				if unmarshalExit(sub, r.exit) != nil {
					return -1
				}
			}
			return n
		case 4:
			n := bytesField(typ, v, &sub)
			if n >= 0 {
				r.approval = new(Approval)
				if unmarshalApproval(sub, r.approval) != nil {
					return -1
				}
			}
			return n
		}
		return skip(num, typ, v)
	})
	return r, err
}

func unmarshalOutput(b []byte, r *response) error {
	r.output = []byte{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		switch num {
		case 1:
			var s uint64
			n := varintField(typ, v, &s)
			r.stderr = s == 2
			return n
		case 2:
			return bytesField(typ, v, &r.output)
		}
		return skip(num, typ, v)
	})
}

func unmarshalExit(b []byte, e *Exit) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var x uint64
		var s string
		switch num {
		case 1, 2:
			n := varintField(typ, v, &x)
			if num == 1 {
				e.Code = int32(x)
			} else {
				e.Signal = int32(x)
			}
			return n
		case 7, 8:
			n := stringField(typ, v, &s)
			if num == 7 {
				e.EgressDenied = append(e.EgressDenied, s)
			} else {
				e.SSHAgentRefused = append(e.SSHAgentRefused, s)
			}
			return n
		}
		return skip(num, typ, v)
	})
}

func unmarshalApproval(b []byte, a *Approval) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var sub []byte
		switch num {
		case 1:
			return stringField(typ, v, &a.ID)
		case 5:
			return stringField(typ, v, &a.Rule)
		case 7:
			n := bytesField(typ, v, &sub)
			if n >= 0 {
				sec, nanos, err := unmarshalSecondsNanos(sub)
				if err != nil {
					return -1
				}
				a.ExpiresAt = time.Unix(sec, int64(nanos))
			}
			return n
		}
		return skip(num, typ, v)
	})
}

// unmarshalSecondsNanos reads a Timestamp or a Duration: seconds (1),
// nanos (2).
func unmarshalSecondsNanos(b []byte) (int64, int32, error) {
	var sec, nanos uint64
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		switch num {
		case 1:
			return varintField(typ, v, &sec)
		case 2:
			return varintField(typ, v, &nanos)
		}
		return skip(num, typ, v)
	})
	return int64(sec), int32(nanos), err
}

// statusDetails is what a google.rpc.Status's details say to coily: the
// ErrorInfo of domain coily.dev (its reason, the refusal code) and a
// RetryInfo's delay.
type statusDetails struct {
	code       int32
	message    string
	reason     string
	domain     string
	retryAfter time.Duration
}

const (
	typeErrorInfo = "type.googleapis.com/google.rpc.ErrorInfo"
	typeRetryInfo = "type.googleapis.com/google.rpc.RetryInfo"
)

func unmarshalStatus(b []byte) (statusDetails, error) {
	var d statusDetails
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var x uint64
		var sub []byte
		switch num {
		case 1:
			n := varintField(typ, v, &x)
			d.code = int32(x)
			return n
		case 2:
			return stringField(typ, v, &d.message)
		case 3:
			n := bytesField(typ, v, &sub)
			if n >= 0 && unmarshalAny(sub, &d) != nil {
				return -1
			}
			return n
		}
		return skip(num, typ, v)
	})
	return d, err
}

// unmarshalAny reads one detail (an Any: type_url 1, value 2).
func unmarshalAny(b []byte, d *statusDetails) error {
	var url string
	var value []byte
	if err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		switch num {
		case 1:
			return stringField(typ, v, &url)
		case 2:
			return bytesField(typ, v, &value)
		}
		return skip(num, typ, v)
	}); err != nil {
		return err
	}
	switch url {
	case typeErrorInfo:
		return unmarshalErrorInfo(value, d)
	case typeRetryInfo:
		return fields(value, func(num protowire.Number, typ protowire.Type, v []byte) int {
			var sub []byte
			if num != 1 {
				return skip(num, typ, v)
			}
			n := bytesField(typ, v, &sub)
			if n >= 0 {
				sec, nanos, err := unmarshalSecondsNanos(sub)
				if err != nil {
					return -1
				}
				d.retryAfter = time.Duration(sec)*time.Second + time.Duration(nanos)
			}
			return n
		})
	}
	return nil
}

// unmarshalErrorInfo reads reason (1) and domain (2); the metadata (3)
// names the refusal's audit record, which coily exec prints only as JSON,
// a case coily-exec hands to it.
func unmarshalErrorInfo(b []byte, d *statusDetails) error {
	var reason, domain string
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		switch num {
		case 1:
			return stringField(typ, v, &reason)
		case 2:
			return stringField(typ, v, &domain)
		}
		return skip(num, typ, v)
	})
	if err == nil && domain == refusalDomain {
		d.reason, d.domain = reason, domain
	}
	return err
}
