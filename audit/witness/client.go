package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

// Prover makes a consistency proof of the log's tree from old records to
// n (audit.TreeReader and tlog.ProveTree).
type Prover func(n, old int64) (tlog.TreeProof, error)

// Client pushes a log's checkpoints to one witness.
type Client struct {
	URL string // the witness's prefix: URL+"/add-checkpoint"
	Key string // the witness's pinned cosignature/v1 verifier key
	// LogKey is the log's own verifier key: a refusal is believed only
	// when the witness shows a checkpoint signed by it and cosigned by
	// Key that proves records lost or changed (else it is an outage).
	LogKey string
	Prove  Prover
	HTTP   *http.Client // nil means http.DefaultClient

	mu   sync.Mutex
	size int64 // the size the witness last acknowledged (0: none yet)
}

// AheadError reports a witness that holds a larger tree than the log's
// checkpoint: the log lost records the witness saw.
type AheadError struct {
	URL           string
	Witness, Sent int64
	// WitnessRoot and SentRoot are the roots of the witness's checkpoint
	// and of the one sent.
	WitnessRoot, SentRoot string
}

func (e *AheadError) Error() string {
	return fmt.Sprintf("witness %s holds %d records of the log, more than the %d of the checkpoint sent: records %d to %d were removed",
		e.URL, e.Witness, e.Sent, e.Sent+1, e.Witness)
}

// InconsistentError reports a witness that refused the checkpoint as not
// consistent with the tree it holds (422, or a 409 fork): the log changed
// records the witness saw.
type InconsistentError struct {
	URL                   string
	Witness, Sent         int64
	WitnessRoot, SentRoot string
	Why                   string
}

func (e *InconsistentError) Error() string {
	return fmt.Sprintf("witness %s holds a tree of %d records (root %s) the log's checkpoint of %d records (root %s) does not extend (%s): records it saw were changed",
		e.URL, e.Witness, e.WitnessRoot, e.Sent, e.SentRoot, e.Why)
}

// ReplacedError reports a witness that holds a checkpoint it cosigned of
// the log's origin under another log key: the log's key (and so the
// state file that held it) was replaced since.
type ReplacedError struct {
	URL     string
	Witness int64  // the records of the checkpoint the witness holds
	Root    string // its root
	Signers string // who signed it
}

func (e *ReplacedError) Error() string {
	return fmt.Sprintf("witness %s holds a checkpoint it cosigned of %d records (root %s) of this log's origin signed by another key (%s): the log's key and the state file that held it were replaced",
		e.URL, e.Witness, e.Root, e.Signers)
}

// UnprovenError is a witness's refusal it does not back with a
// checkpoint, cosigned by it and signed by the log's key, that proves
// records lost or changed: whoever answers at its address (a proxy, a
// spoofer) is not trusted for what it does not sign. An outage.
type UnprovenError struct {
	URL string
	Why string // the refusal
	Err error  // why it is not proven
}

func (e *UnprovenError) Error() string {
	return fmt.Sprintf("witness %s refused the checkpoint (%s) without proof: %v", e.URL, e.Why, e.Err)
}

func (e *UnprovenError) Unwrap() error { return e.Err }

// Add pushes the signed checkpoint with a consistency proof from the size
// the witness last acknowledged (on a 409, from the size it answers, once)
// and returns its cosignature, checked against the pinned key. A witness
// that holds more, or another tree, is an *AheadError or an
// *InconsistentError.
func (c *Client) Add(ctx context.Context, signed []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, err := audit.ParseCheckpoint(noteTextOf(signed))
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		sig, held, err := c.post(ctx, cp, signed)
		var conflict *sizeConflict
		var refused *refusal
		switch {
		case err == nil:
			c.size = cp.N
			return sig, nil
		case errors.As(err, &refused):
			return nil, c.proven(ctx, cp, refused)
		case !errors.As(err, &conflict):
			return nil, err
		case held > cp.N:
			return nil, c.proven(ctx, cp, &refusal{status: http.StatusConflict, why: fmt.Sprintf("it holds %d records", held)})
		case try > 0:
			return nil, fmt.Errorf("witness %s: a second 409 (holds %d)", c.URL, held)
		}
		c.size = held // a lie here fails the next proof: the witness checks it
	}
}

type sizeConflict struct{ held int64 }

func (e *sizeConflict) Error() string { return fmt.Sprintf("the witness holds %d", e.held) }

// post sends one add-checkpoint from c.size.
func (c *Client) post(ctx context.Context, cp audit.Checkpoint, signed []byte) ([]byte, int64, error) {
	req := AddRequest{Old: c.size, Checkpoint: signed}
	if c.size > 0 && c.size < cp.N {
		p, err := c.Prove(cp.N, c.size)
		if err != nil {
			return nil, 0, fmt.Errorf("witness %s: proving %d to %d: %w", c.URL, c.size, cp.N, err)
		}
		req.Proof = p
	}
	if c.size > cp.N {
		return nil, 0, &refusal{status: http.StatusConflict, why: fmt.Sprintf("it acknowledged %d records before", c.size)}
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/add-checkpoint", bytes.NewReader(req.Format()))
	if err != nil {
		return nil, 0, fmt.Errorf("witness %s: %w", c.URL, err)
	}
	hr.Header.Set("Content-Type", "text/plain")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, 0, fmt.Errorf("witness %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxCosignature+1))
	if err != nil {
		return nil, 0, fmt.Errorf("witness %s: %w", c.URL, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		if _, err := CheckCosignature(signed, body, c.Key); err != nil {
			return nil, 0, fmt.Errorf("witness %s: %w", c.URL, err)
		}
		return body, 0, nil
	case resp.StatusCode == http.StatusConflict && resp.Header.Get("Content-Type") == SizeType:
		held, err := ParseSize(body)
		if err != nil {
			return nil, 0, fmt.Errorf("witness %s: 409: %w", c.URL, err)
		}
		return nil, held, &sizeConflict{held: held}
	case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusUnprocessableEntity ||
		resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound:
		return nil, 0, &refusal{status: resp.StatusCode, why: fmt.Sprintf("%s: %s", resp.Status, snippet(body))}
	}
	return nil, 0, fmt.Errorf("witness %s: %s: %s", c.URL, resp.Status, snippet(body))
}

// Size is the size the witness last acknowledged.
func (c *Client) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// snippet is an untrusted body, bounded and printable.
func snippet(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, strings.TrimSpace(string(b)))
}

func noteTextOf(msg []byte) []byte {
	text, _, _ := splitNote(msg)
	return text
}

// Fetch reads the latest checkpoint a witness at url cosigned for origin
// (GET <url>/checkpoint/<origin>).
func Fetch(ctx context.Context, hc *http.Client, url, origin string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+CheckpointPath(origin), nil)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", url, err)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, audit.MaxCheckpoint+MaxCosignature+1))
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("witness %s: %s: %s", url, resp.Status, snippet(body))
	}
	return body, nil
}
