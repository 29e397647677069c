package supervise

import (
	"errors"
	"strings"
	"testing"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/scrub"
)

// A secret split across two reads of one stream is still redacted, the
// streams are scrubbed apart, and a refusal quoting the secret is too.
func TestOutputScrubsAcrossChunks(t *testing.T) {
	const tok = "ghp_OutputCanary0123456789"
	set := scrub.NewSet([]scrub.Secret{{Name: "TOKEN", Value: tok}})
	got := map[coilyv1.Stream]string{}
	o := NewOutput(set, func(c Chunk) error {
		got[c.Stream] += string(c.Data)
		return nil
	})
	out, errs := coilyv1.Stream_STREAM_STDOUT, coilyv1.Stream_STREAM_STDERR
	for _, c := range []Chunk{{out, []byte("a " + tok[:7])}, {errs, []byte(tok[:3])}, {out, []byte(tok[7:] + " b")}, {errs, []byte("x")}} {
		if err := o.Emit(c); err != nil {
			t.Fatal(err)
		}
	}
	runErr := o.Finish(refusal.Wrap(refusal.SandboxUnavailable, errors.New("stderr: "+tok), "set-up failed: %s", tok))
	if got[out] != "a [REDACTED:TOKEN] b" || got[errs] != tok[:3]+"x" {
		t.Errorf("output %q", got)
	}
	r := refusal.As(runErr)
	if r.Code != refusal.SandboxUnavailable || strings.Contains(r.Msg, tok) || strings.Contains(r.Detail.Error(), tok) {
		t.Errorf("refusal %q (%v)", r.Msg, r.Detail)
	}
}

// Without secrets, output passes through as it came.
func TestOutputWithoutSecrets(t *testing.T) {
	var got []Chunk
	o := NewOutput(nil, func(c Chunk) error { got = append(got, c); return nil })
	c := Chunk{coilyv1.Stream_STREAM_STDOUT, []byte("plain")}
	if err := o.Emit(c); err != nil || o.Finish(nil) != nil || len(got) != 1 || string(got[0].Data) != "plain" {
		t.Errorf("got %v, %v", got, err)
	}
}
