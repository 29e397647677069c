package audit

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/atomicfile"
)

// # Signed checkpoints
//
// A checkpoint commits to the tree of the log's first N records in the
// C2SP tlog-checkpoint format, as a signed note (golang.org/x/mod/sumdb/note,
// Ed25519):
//
//	coily/<host>
//	<N, decimal>
//	<root hash, standard base64>
//
//	— coily/<host> <base64 key hash and signature>
//
// The origin (first line) is the signing key's name, so a checkpoint opens
// only with the verifier key of the log it names. Whoever holds a
// checkpoint (a witness off the host) can later check that the log still
// holds exactly the records it commits to (VerifyCheckpoint), and any
// record's inclusion (Proof).

// CheckpointFile is where the server keeps the latest signed checkpoint,
// in the log's directory, for witnesses to read.
const CheckpointFile = "checkpoint"

// VerifierFile is the public verifier key in the log's directory (not a
// secret: an owner pins it, once, from a trusted view of the host).
const VerifierFile = "checkpoint.vkey"

// EventKey is the record of a new checkpoint key, made at a server's
// first start or when its state file (which keeps the key) was lost: its
// details name the verifier key ("verifier"), "new": "true", and the key
// the log's verifier file named before ("replaces"), if any. The next
// checkpoint, the first under the new key, covers it.
const EventKey = "audit.key"

// EventWitness is the record of a witness off the host that stopped
// taking the log's checkpoints (written once an outage, "outage"), that
// refused one as not extending what it holds ("refused": the log lost
// or changed records it saw), or that takes them again ("recovered"):
// details "witness" (its URL), "state" and "error".
const EventWitness = "audit.witness"

// MaxCheckpoint bounds a signed checkpoint's size when reading one.
const MaxCheckpoint = 16 << 10

// Checkpoint is the body of a checkpoint: the log it names and its tree.
type Checkpoint struct {
	Origin string
	Tree
}

// ErrBadCheckpoint is wrapped by every error reading a checkpoint that is
// malformed or whose signature does not verify.
var ErrBadCheckpoint = errors.New("audit: bad checkpoint")

// Format is the checkpoint's text, the part that is signed.
func (c Checkpoint) Format() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.N, base64.StdEncoding.EncodeToString(c.Hash[:]))
}

// ParseCheckpoint reads a checkpoint's text (Format): exactly three lines,
// an origin without spaces or '+', a decimal size without sign or leading
// zero, a 32-byte root in standard base64. Extension lines are refused:
// coily writes none.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	bad := func(why string) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: %s", ErrBadCheckpoint, why)
	}
	if len(text) > MaxCheckpoint {
		return bad("too long")
	}
	lines := strings.Split(string(text), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return bad("want three lines: origin, size, root hash")
	}
	origin, size, root := lines[0], lines[1], lines[2]
	if !validOrigin(origin) {
		return bad(fmt.Sprintf("origin %q is not a key name", origin))
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != size {
		return bad(fmt.Sprintf("size %q is not a decimal count", size))
	}
	h, err := base64.StdEncoding.Strict().DecodeString(root)
	if err != nil || len(h) != tlog.HashSize {
		return bad(fmt.Sprintf("root hash %q is not 32 bytes in base64", root))
	}
	c := Checkpoint{Origin: origin, Tree: Tree{N: n}}
	copy(c.Hash[:], h)
	return c, nil
}

// validOrigin is what note accepts as a key name: non-empty, printable,
// no space and no '+'.
func validOrigin(s string) bool {
	if s == "" || len(s) > 256 || strings.ContainsRune(s, '+') {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '\uFFFD' {
			return false
		}
	}
	return true
}

// GenerateSigner makes a new Ed25519 note key named origin: the private
// key (keep it secret) and the public verifier key (publish it).
func GenerateSigner(origin string) (skey, vkey string, err error) {
	if !validOrigin(origin) {
		return "", "", fmt.Errorf("audit: checkpoint key name %q: no spaces, no '+'", origin)
	}
	return note.GenerateKey(rand.Reader, origin)
}

// SignCheckpoint signs the checkpoint of t with the private key skey,
// whose name is the origin.
func SignCheckpoint(skey string, t Tree) ([]byte, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("audit: checkpoint key: %w", err)
	}
	msg, err := note.Sign(&note.Note{Text: string(Checkpoint{Origin: s.Name(), Tree: t}.Format())}, s)
	if err != nil {
		return nil, fmt.Errorf("audit: signing a checkpoint: %w", err)
	}
	return msg, nil
}

// OpenCheckpoint checks a signed checkpoint against the verifier key vkey
// and reads it. Its origin must be the key's name; other signatures (a
// witness's cosignature) are ignored. msg is untrusted.
func OpenCheckpoint(msg []byte, vkey string) (Checkpoint, error) {
	if len(msg) > MaxCheckpoint {
		return Checkpoint{}, fmt.Errorf("%w: longer than %d bytes", ErrBadCheckpoint, MaxCheckpoint)
	}
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit: verifier key: %w", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return Checkpoint{}, fmt.Errorf("%w: not signed by %s (signed by %s)", ErrBadCheckpoint, v.Name(), signers(unverified.Note))
		}
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	c, err := ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not the key's name %q", ErrBadCheckpoint, c.Origin, v.Name())
	}
	return c, nil
}

func signers(n *note.Note) string {
	var names []string
	for _, s := range n.UnverifiedSigs {
		names = append(names, fmt.Sprintf("%s (key hash %08x)", s.Name, s.Hash))
	}
	if len(names) == 0 {
		return "no one"
	}
	return strings.Join(names, ", ")
}

// WriteCheckpoint replaces the log's checkpoint file in dir with msg,
// atomically (a witness reading it never sees half of one).
func WriteCheckpoint(dir string, msg []byte) error { return writeAtomic(dir, CheckpointFile, msg) }

// WriteVerifier writes the verifier key beside the log, unless the file
// holds it already.
func WriteVerifier(dir, vkey string) error {
	if ReadVerifier(dir) == vkey {
		return nil
	}
	return writeAtomic(dir, VerifierFile, []byte(vkey+"\n"))
}

// ReadVerifier is the verifier key the log's directory holds, "" when none.
func ReadVerifier(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, VerifierFile))
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// writeAtomic replaces dir/name with data (mode 0600), whole or not at
// all.
func writeAtomic(dir, name string, data []byte) error {
	if err := atomicfile.Write(filepath.Join(dir, name), data, 0o600); err != nil {
		return fmt.Errorf("audit: %s: %w", name, err)
	}
	return nil
}
