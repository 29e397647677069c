package supervise

import (
	"bytes"
	"errors"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// Output forwards a command's output to the caller, scrubbed of the
// injected credentials when there are any (step 10). Each stream has its
// own scrub.Writer, so a value split across two reads of one stream is
// still redacted; the writers hold back at most the longest form's length
// less one byte.
type Output struct {
	set  *scrub.Set
	send func(Chunk) error
	w    map[coilyv1.Stream]*scrub.Writer
}

// NewOutput returns the Output of a command whose secrets are set, sending
// what may be shown through send.
func NewOutput(set *scrub.Set, send func(Chunk) error) *Output {
	o := &Output{set: set, send: send}
	if set == nil || set.MaxLen() == 0 {
		return o
	}
	o.w = map[coilyv1.Stream]*scrub.Writer{}
	for _, st := range []coilyv1.Stream{coilyv1.Stream_STREAM_STDOUT, coilyv1.Stream_STREAM_STDERR} {
		o.w[st] = set.NewWriter(streamWriter{st, send})
	}
	return o
}

// Emit is Run's emit function.
func (o *Output) Emit(c Chunk) error {
	if o.w == nil {
		return o.send(c)
	}
	_, err := o.w[c.Stream].Write(c.Data)
	return err
}

// Finish flushes what the writers held back and scrubs the run's refusal,
// whose message may quote the command's stderr (a sandbox set-up failure).
func (o *Output) Finish(runErr error) error {
	if o.w == nil {
		return runErr
	}
	var flushErr error
	for _, st := range []coilyv1.Stream{coilyv1.Stream_STREAM_STDOUT, coilyv1.Stream_STREAM_STDERR} {
		flushErr = errors.Join(flushErr, o.w[st].Flush())
	}
	if runErr != nil {
		return ScrubRefusal(o.set, runErr)
	}
	if flushErr != nil {
		return refusal.Wrap(refusal.Internal, flushErr, "caller went away")
	}
	return nil
}

// ScrubRefusal redacts the credentials of an execution from its refusal,
// whose message may quote what the command made or said (its stderr, a
// file name, a host): every refusal an execution answers and audits passes
// here.
func ScrubRefusal(set *scrub.Set, err error) error {
	if err == nil || set == nil || set.MaxLen() == 0 {
		return err
	}
	r := refusal.As(err)
	scrubbed := &refusal.Error{Code: r.Code, Msg: set.RedactText(r.Msg), RetryAfter: r.RetryAfter, AuditID: r.AuditID}
	if r.Detail != nil {
		scrubbed.Detail = errors.New(set.RedactText(r.Detail.Error()))
	}
	return scrubbed
}

// streamWriter sends what a scrub.Writer lets through as chunks of one
// stream.
type streamWriter struct {
	stream coilyv1.Stream
	send   func(Chunk) error
}

func (w streamWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := min(len(p), chunkSize)
		if err := w.send(Chunk{Stream: w.stream, Data: bytes.Clone(p[:n])}); err != nil {
			return 0, err
		}
		p = p[n:]
	}
	return total, nil
}
