package audit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A proof file shows that one record is in the tree a signed checkpoint
// commits to. Anyone holding the log's verifier key can check it
// (CheckProof, or any RFC 6962 verifier): the record's line, its leaf
// index (Seq-1), the inclusion proof's hashes, a blank line, then the
// signed checkpoint as the server wrote it:
//
//	coily audit proof
//	index 41
//	line <the line, standard base64>
//	hash <standard base64>          (one per proof hash, leaf to root)
//
//	<signed checkpoint>

const proofHeader = "coily audit proof"

// MaxProof bounds a proof file: a line of at most 16 MiB in base64, and
// the rest.
const MaxProof = maxLine/3*4 + 64<<10

// maxProofHashes bounds the hashes of an inclusion proof (a tree of 2^63
// leaves needs 63).
const maxProofHashes = 64

// Proof is a record's inclusion in a checkpoint's tree.
type Proof struct {
	Index      int64 // the record's leaf: Seq-1
	Line       []byte
	Hashes     tlog.RecordProof
	Checkpoint []byte // signed
}

// Format renders the proof file.
func (p Proof) Format() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nindex %d\nline %s\n", proofHeader, p.Index, base64.StdEncoding.EncodeToString(p.Line))
	for _, h := range p.Hashes {
		fmt.Fprintf(&b, "hash %s\n", base64.StdEncoding.EncodeToString(h[:]))
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// ParseProof reads a proof file (untrusted) without checking it.
func ParseProof(text []byte) (Proof, error) {
	bad := func(why string) (Proof, error) { return Proof{}, fmt.Errorf("%w: proof: %s", ErrBadCheckpoint, why) }
	if len(text) > MaxProof {
		return bad("too long")
	}
	head, cp, ok := bytes.Cut(text, []byte("\n\n"))
	if !ok || len(cp) == 0 {
		return bad("no checkpoint after a blank line")
	}
	lines := strings.Split(string(head), "\n")
	if len(lines) < 3 || lines[0] != proofHeader {
		return bad("does not begin with " + strconv.Quote(proofHeader) + ", index, line")
	}
	var p Proof
	idx, ok := strings.CutPrefix(lines[1], "index ")
	n, err := strconv.ParseInt(idx, 10, 64)
	if !ok || err != nil || n < 0 || strconv.FormatInt(n, 10) != idx {
		return bad(fmt.Sprintf("index %q", lines[1]))
	}
	p.Index = n
	b64, ok := strings.CutPrefix(lines[2], "line ")
	if p.Line, err = base64.StdEncoding.Strict().DecodeString(b64); !ok || err != nil || len(p.Line) == 0 {
		return bad("line is not base64")
	}
	if len(lines)-3 > maxProofHashes {
		return bad("too many hashes")
	}
	for _, l := range lines[3:] {
		b64, ok := strings.CutPrefix(l, "hash ")
		h, err := base64.StdEncoding.Strict().DecodeString(b64)
		if !ok || err != nil || len(h) != tlog.HashSize {
			return bad(fmt.Sprintf("%.80q is not a hash line", l))
		}
		p.Hashes = append(p.Hashes, tlog.Hash(h))
	}
	p.Checkpoint = cp
	return p, nil
}

// CheckProof checks a proof file against the verifier key: the
// checkpoint's signature, then the line's inclusion at its index in the
// checkpoint's tree, then that the line is a record of that Seq whose
// self-hash holds. It returns the record and the checkpoint.
func CheckProof(text []byte, vkey string) (Record, Checkpoint, error) {
	p, err := ParseProof(text)
	if err != nil {
		return Record{}, Checkpoint{}, err
	}
	c, err := OpenCheckpoint(p.Checkpoint, vkey)
	if err != nil {
		return Record{}, Checkpoint{}, err
	}
	if p.Index >= c.N {
		return Record{}, c, fmt.Errorf("%w: proof: record index %d is not in a tree of %d", ErrBadCheckpoint, p.Index, c.N)
	}
	if err := tlog.CheckRecord(p.Hashes, c.N, c.Hash, p.Index, tlog.RecordHash(p.Line)); err != nil {
		return Record{}, c, fmt.Errorf("%w: proof: the line is not leaf %d of the checkpoint's tree: %w", ErrBadCheckpoint, p.Index, err)
	}
	rec, _, err := parseLine(p.Line)
	if err != nil || rec.Seq != uint64(p.Index)+1 {
		return Record{}, c, fmt.Errorf("%w: proof: the line is not record %d: %v", ErrBadCheckpoint, p.Index+1, err)
	}
	return rec, c, nil
}

// Prove makes the proof that record seq of the log in dir is in the tree
// the signed checkpoint commits to (read, not checked: the signer's side),
// from O(log N) hashes of the hash file, and checks it before returning.
func Prove(dir string, seq uint64, signed []byte) (Proof, error) {
	c, err := readUnchecked(signed)
	if err != nil {
		return Proof{}, err
	}
	if seq == 0 || int64(seq) > c.N {
		return Proof{}, fmt.Errorf("audit: prove: record %d is not in the checkpoint's %d records: %w", seq, c.N, ErrNotFound)
	}
	line, err := lineAt(dir, seq)
	if err != nil {
		return Proof{}, fmt.Errorf("audit: prove: %w", err)
	}
	r, closer, err := TreeReader(dir)
	if err != nil {
		return Proof{}, err
	}
	defer closer.Close()
	p := Proof{Index: int64(seq) - 1, Line: line, Checkpoint: signed}
	if p.Hashes, err = tlog.ProveRecord(c.N, p.Index, r); err != nil {
		return Proof{}, fmt.Errorf("audit: prove: %w", err)
	}
	if err := tlog.CheckRecord(p.Hashes, c.N, c.Hash, p.Index, tlog.RecordHash(line)); err != nil {
		return Proof{}, fmt.Errorf("audit: prove: %w: %w", ErrTreeFile, err)
	}
	return p, nil
}

// readUnchecked reads a signed checkpoint's text without checking its
// signature.
func readUnchecked(signed []byte) (Checkpoint, error) {
	_, err := note.Open(signed, nil)
	var u *note.UnverifiedNoteError
	if !errors.As(err, &u) {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	return ParseCheckpoint([]byte(u.Note.Text))
}

// lineAt returns the line of record seq (without '\n'), checked on its
// own.
func lineAt(dir string, seq uint64) ([]byte, error) {
	var out []byte
	err := lineOf(dir, seq, func(b []byte) { out = bytes.Clone(b) })
	if err == nil && out == nil {
		err = fmt.Errorf("record %d: %w", seq, ErrNotFound)
	}
	return out, err
}

// ParseID reads an audit id ("A" and 12 digits) as its Seq.
func ParseID(id string) (uint64, error) {
	digits, ok := strings.CutPrefix(id, "A")
	n, err := strconv.ParseUint(digits, 10, 64)
	if !ok || err != nil || n == 0 || formatID(n) != id {
		return 0, fmt.Errorf("%w: %q is not an audit id (A and 12 digits)", ErrBadID, id)
	}
	return n, nil
}
