// Package witness is a witness of the audit log's signed checkpoints
// (package audit, "Signed checkpoints") off the trust point, and the
// client that pushes checkpoints to one, speaking C2SP tlog-witness
// (https://c2sp.org/tlog-witness) with C2SP tlog-cosignature
// cosignature/v1 (Ed25519) signatures.
//
// A witness is configured with the logs it witnesses (origin -> the log's
// verifier key). For each it keeps the latest checkpoint it cosigned, in a
// state file it replaces atomically (fsync of the file and its directory)
// before it answers, and it cosigns a new checkpoint only when a
// consistency proof shows that the new tree extends that one: it never
// cosigns a smaller tree, or one that rewrote what it saw.
//
// The protocol's one call:
//
//	POST <prefix>/add-checkpoint
//	old <size the client believes the witness holds>
//	<consistency proof hash, base64, one a line, at most 63>
//	<empty line>
//	<signed checkpoint>
//
// answered 200 with the witness's cosignature line(s); 400 for a
// malformed body or old > size; 403 when no signature of the log's key
// verifies; 404 for a log it does not witness; 409 Conflict with
// Content-Type text/x.tlog.size and body "<size>\n" when old is not the
// size it holds (the client proves again from that size); 409 without
// that type for a checkpoint of the size it holds with another root (a
// fork); 422 for a consistency proof that does not verify.
//
// coily's addition to the protocol, for `coily audit verify
// --checkpoint URL`:
//
//	GET <prefix>/checkpoint/<origin, path-escaped>
//
// answers the latest checkpoint the witness cosigned for that log, with
// the log's signature and the witness's cosignature (a signed note), or
// 404 when it holds none.
package witness

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

const (
	// MaxProofLines bounds a consistency proof: two hashes a level of a
	// tree of up to 2^63 leaves, less one (the spec's bound).
	MaxProofLines = 63
	// MaxBody bounds an add-checkpoint request: the old line, a full
	// proof (45 bytes a line) and a checkpoint.
	MaxBody = 64 + MaxProofLines*45 + audit.MaxCheckpoint
	// MaxCosignature bounds a cosignature response.
	MaxCosignature = 4 << 10
	// SizeType is the Content-Type of a 409's body: the size the witness
	// holds.
	SizeType = "text/x.tlog.size"
	// maxSizeBody bounds a 409's body: 19 digits and a newline.
	maxSizeBody = 20
)

// ErrMalformed is wrapped by every error parsing a message from the
// other side.
var ErrMalformed = errors.New("witness: malformed")

// AddRequest is an add-checkpoint request.
type AddRequest struct {
	Old        int64          // the size the client believes the witness holds
	Proof      tlog.TreeProof // from Old to the checkpoint's size
	Checkpoint []byte         // the signed checkpoint (a note)
}

// Format is the request's body.
func (r AddRequest) Format() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", r.Old)
	for _, h := range r.Proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(r.Checkpoint)
	return b.Bytes()
}

// ParseAddRequest reads an add-checkpoint body (untrusted): "old N", at
// most MaxProofLines lines of 32 bytes in canonical base64, an empty
// line, and the checkpoint, which it does not open (the caller checks its
// signature). The body is at most MaxBody bytes.
func ParseAddRequest(body []byte) (AddRequest, error) {
	bad := func(format string, args ...any) (AddRequest, error) {
		return AddRequest{}, fmt.Errorf("%w request: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(body) > MaxBody {
		return bad("longer than %d bytes", MaxBody)
	}
	head, cp, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return bad("no empty line before the checkpoint")
	}
	lines := strings.Split(string(head), "\n")
	sz, ok := strings.CutPrefix(lines[0], "old ")
	if !ok {
		return bad("the first line is not \"old <size>\"")
	}
	old, err := parseSize(sz)
	if err != nil {
		return bad("old size: %v", err)
	}
	if len(lines)-1 > MaxProofLines {
		return bad("%d proof lines, more than %d", len(lines)-1, MaxProofLines)
	}
	r := AddRequest{Old: old, Checkpoint: cp}
	for i, l := range lines[1:] {
		h, err := base64.StdEncoding.Strict().DecodeString(l)
		if err != nil || len(h) != tlog.HashSize || base64.StdEncoding.EncodeToString(h) != l {
			return bad("proof line %d is not a hash in base64", i+1)
		}
		r.Proof = append(r.Proof, tlog.Hash(h))
	}
	if len(cp) == 0 {
		return bad("no checkpoint")
	}
	return r, nil
}

// ParseSize reads a 409's text/x.tlog.size body (untrusted): a decimal
// size and a newline.
func ParseSize(body []byte) (int64, error) {
	if len(body) > maxSizeBody {
		return 0, fmt.Errorf("%w size: longer than %d bytes", ErrMalformed, maxSizeBody)
	}
	s, ok := strings.CutSuffix(string(body), "\n")
	if !ok {
		return 0, fmt.Errorf("%w size: no newline", ErrMalformed)
	}
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%w size: %w", ErrMalformed, err)
	}
	return n, nil
}

// parseSize reads a canonical decimal size: no sign, no leading zero, at
// most int64.
func parseSize(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%q is not a decimal size", s)
	}
	return n, nil
}

// splitNote splits a signed note into its text (ending in '\n') and its
// signature lines.
func splitNote(msg []byte) (text, sigs []byte, ok bool) {
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 {
		return nil, nil, false
	}
	return msg[:i+1], msg[i+2:], true
}

// origin is the first line of a checkpoint note: the log it names
// (unchecked).
func origin(msg []byte) string {
	line, _, _ := bytes.Cut(msg, []byte("\n"))
	return string(line)
}
