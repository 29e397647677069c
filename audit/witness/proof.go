package witness

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

// refusal is a witness's answer refusing a checkpoint (403, 404, 409,
// 422): what it says, not yet believed.
type refusal struct {
	status int
	why    string
}

func (r *refusal) Error() string { return r.why }

// proven turns a refusal of the checkpoint cp into what the witness can
// prove: it reads the witness's latest checkpoint of cp's origin (GET
// /checkpoint/<origin>), which must be cosigned by the pinned witness
// key, and
//   - signed by the log's key: a larger tree (*AheadError), another root
//     of the same size, or a tree cp does not extend by the local
//     consistency proof (*InconsistentError);
//   - signed by another key, refused as not signed by the log's key (403,
//     404): the log's key was replaced (*ReplacedError).
//
// Anything else is an *UnprovenError: an outage.
func (c *Client) proven(ctx context.Context, cp audit.Checkpoint, r *refusal) error {
	unproven := func(err error) error { return &UnprovenError{URL: c.URL, Why: r.why, Err: err} }
	msg, err := Fetch(ctx, c.HTTP, c.URL, cp.Origin)
	if err != nil {
		return unproven(err)
	}
	if _, err := Cosigned(msg, c.Key); err != nil {
		return unproven(err)
	}
	if c.LogKey == "" {
		return unproven(errors.New("no log key to check the witness's checkpoint with"))
	}
	held, err := audit.OpenCheckpoint(msg, c.LogKey)
	if err != nil {
		if r.status == http.StatusForbidden || r.status == http.StatusNotFound {
			return replaced(c.URL, cp.Origin, msg, err)
		}
		return unproven(err)
	}
	sent, heldRoot := cp.Hash.String(), held.Hash.String()
	switch {
	case held.N > cp.N:
		c.size = held.N
		return &AheadError{URL: c.URL, Witness: held.N, Sent: cp.N, WitnessRoot: heldRoot, SentRoot: sent}
	case held.N == cp.N && held.Hash != cp.Hash:
		return &InconsistentError{URL: c.URL, Witness: held.N, Sent: cp.N, WitnessRoot: heldRoot, SentRoot: sent, Why: "a fork: the same size, another root"}
	case held.N == cp.N || held.N == 0:
		return unproven(fmt.Errorf("the witness's checkpoint of %d records does not contradict the log's", held.N))
	}
	p, err := c.Prove(cp.N, held.N)
	if err != nil {
		return unproven(fmt.Errorf("proving %d to %d from the local tree: %w", held.N, cp.N, err))
	}
	if err := tlog.CheckTree(p, cp.N, cp.Hash, held.N, held.Hash); err != nil {
		return &InconsistentError{URL: c.URL, Witness: held.N, Sent: cp.N, WitnessRoot: heldRoot, SentRoot: sent, Why: "the local tree does not extend it: " + err.Error()}
	}
	return unproven(fmt.Errorf("the log extends the witness's checkpoint of %d records", held.N))
}

// replaced is the proof a witness holds a checkpoint of origin it
// cosigned, signed by a key other than the log's.
func replaced(url, origin string, msg []byte, why error) error {
	n, err := note.Open(msg, note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if errors.As(err, &unverified) {
		n = unverified.Note
	} else if err != nil || n == nil {
		return &UnprovenError{URL: url, Why: "refused", Err: why}
	}
	c, err := audit.ParseCheckpoint([]byte(n.Text))
	if err != nil || c.Origin != origin {
		return &UnprovenError{URL: url, Why: "refused", Err: fmt.Errorf("the witness's checkpoint is not of %q: %v", origin, err)}
	}
	var signers string
	for _, s := range n.UnverifiedSigs {
		if signers != "" {
			signers += ", "
		}
		signers += fmt.Sprintf("%s (key hash %08x)", s.Name, s.Hash)
	}
	return &ReplacedError{URL: url, Witness: c.N, Root: c.Hash.String(), Signers: signers}
}
