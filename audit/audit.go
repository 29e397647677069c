// Package audit owns coily's append-only, hash-chained JSONL audit log.
//
// Every decision the trust point makes is written here before the request
// is answered; a failed audit write fails the request.
//
// # Layout
//
// The log is a directory of month files named YYYY-MM.jsonl (UTC month of
// the first record written to them), mode 0600, in a directory of mode 0700.
// Month file names sort lexically in chronological order, and the log only
// ever appends to the newest file: if the clock steps back across a month
// boundary, records keep going to the newest file rather than reopening an
// older one.
//
// # Line format
//
// Each line is one JSON object (a Record) followed by '\n'. The "hash"
// field is always the last field and is written as
//
//	body + `,"hash":"` + hex(SHA-256(body)) + `"}`
//
// where body is the JSON encoding of the record without its hash field and
// without the closing brace. The self-hash therefore covers every other
// field, including prev.
//
// # Invariants
//
//   - Seq is 1-based and increases by exactly one per line, across files.
//   - ID is "A" followed by Seq zero-padded to 12 digits (e.g.
//     "A000000000042"): unique, and sortable up to 10^12 records.
//   - Prev is the hex SHA-256 of the complete previous line (all bytes but
//     its '\n', so including its hash field), continuing across month
//     files; the first line ever has Prev = 64 zeros.
//   - Every line, including the last, ends with '\n'; a missing final
//     newline is a torn write and makes the log corrupt.
//
// Changing, removing, inserting or reordering a line is detected by Verify
// and reported as a *BrokenError naming the first bad line. Truncating the
// end of the log, or rewriting a whole suffix of it with recomputed hashes,
// cannot be detected from the log alone: a Head recorded elsewhere (the
// server keeps Log.Head in its state file, told by SetAnchor) can, with
// CheckHead; so can a signed checkpoint of the log's Merkle tree kept off
// the host, with VerifyCheckpoint (tree.go, checkpoint.go, proof.go).
//
// # Failure handling
//
// Open fails closed: if the newest record cannot be verified, it returns an
// error wrapping ErrCorrupt; a torn last line (a crash or a full disk during
// a write) is mended only by an explicit Repair, which cuts it and records
// that it did. Append fsyncs every line before returning. If a write or sync
// fails, Append returns ErrBroken and cuts the partial line off again; the
// next Append retries, so the log recovers by itself when the disk has room,
// and no record is ever chained to a line that may not be on disk.
//
// # Rotation
//
// A file is closed when it reaches Config.MaxFileSize and the next part of
// the month begins (YYYY-MM.0001.jsonl, …); a new month begins a new file.
// The chain continues across files; Verify checks them all in order.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// Record is one audited event. The Log fills ID, Seq, Time, Prev and Hash;
// callers fill the rest.
type Record struct {
	ID   string    `json:"id"`   // set by Log: "A" + 12-digit zero-padded Seq
	Seq  uint64    `json:"seq"`  // set by Log: 1-based, monotonic across all files
	Time time.Time `json:"time"` // set by Log from Config.Now, UTC
	Prev string    `json:"prev"` // set by Log: hex SHA-256 of the previous line
	// Host is the host that wrote the record (set by Log from
	// Config.Host): empty for one host, its name in a fleet whose records
	// are read together.
	Host      string `json:"host,omitempty"`
	Event     string `json:"event"`
	Method    string `json:"method,omitempty"` // gRPC full method name
	RequestID string `json:"request_id,omitempty"`
	// RelayID is a relayed request's descriptor id (the name of its
	// answer), apart from RequestID, which is always the server's own.
	RelayID    string            `json:"relay_id,omitempty"`
	Principal  string            `json:"principal,omitempty"`
	Transport  string            `json:"transport,omitempty"` // "local", "tailnet", "relay"
	Peer       string            `json:"peer,omitempty"`      // e.g. "uid=1000" or a node name
	Argv       []string          `json:"argv,omitempty"`
	Decision   string            `json:"decision,omitempty"` // "allow" | "refuse"
	Code       string            `json:"code,omitempty"`     // refusal code like "policy-deny"
	Reason     string            `json:"reason,omitempty"`
	Rule       string            `json:"rule,omitempty"`
	Sandbox    string            `json:"sandbox,omitempty"`
	ExitCode   *int              `json:"exit_code,omitempty"`
	Signal     int               `json:"signal,omitempty"`
	DurationMS float64           `json:"duration_ms,omitempty"`
	Killed     int               `json:"killed,omitempty"` // processes killed by a lockout
	Details    map[string]string `json:"details,omitempty"`
	// Lists are the details that are lists (the environment names a
	// request passed, the entries a command's scan quarantined…): each
	// item whole, never joined into one string, so that no item can forge
	// another by holding a separator.
	Lists map[string][]string `json:"lists,omitempty"`
	// Leases are the ids of the dynamic-secret leases a command's
	// credentials came with (never a value); at most MaxLeases.
	Leases []string `json:"leases,omitempty"`
	// Egress are the hosts a command's egress proxy was asked for,
	// aggregated per (host, port, decision); at most MaxEgressRows.
	Egress []EgressRow `json:"egress,omitempty"`
	// EgressRequests are the requests made on connections whose TLS the
	// proxy inspected, in order; at most MaxEgressRequests.
	EgressRequests []EgressRequest `json:"egress_requests,omitempty"`
	// CredentialsUsed are the credentials the run used, apart from the
	// rule's configuration (the lists "credentials", "git_credentials"
	// and "ssh_keys", the detail "github_app"): each variable a
	// credential was injected into, each password given to git's
	// credential helper, each ssh agent key that signed and how often,
	// each token minted. Names, references and counts, never
	// a value; at most MaxCredentialsUsed.
	CredentialsUsed []string `json:"credentials_used,omitempty"`
	Hash            string   `json:"hash"` // set by Log: self-hash; must stay the last field
}

// EgressRow is one (host, port, decision) of a command's egress: how many
// connections, how many bytes each way, for how long.
type EgressRow struct {
	Host       string    `json:"host"`
	Port       int       `json:"port"`
	Decision   string    `json:"decision"` // allow | deny | observe-deny
	Reason     string    `json:"reason,omitempty"`
	Conns      int       `json:"connections"`
	Failures   int       `json:"failures,omitempty"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
	First      time.Time `json:"first"`
	Last       time.Time `json:"last"`
}

// EgressRequest is one request on an inspected connection: its method
// and path (query stripped), what the proxy decided and why, the status
// the command got, the body bytes each way, and whether a credential was
// injected into it.
type EgressRequest struct {
	Time      time.Time `json:"time"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Query     string    `json:"query,omitempty"` // egress.QueryHash: the query's hash, never its text
	Decision  string    `json:"decision"`
	Reason    string    `json:"reason,omitempty"`
	Status    int       `json:"status"`
	BytesUp   int64     `json:"bytes_up"`
	BytesDown int64     `json:"bytes_down"`
	Injected  bool      `json:"injected,omitempty"`
	Proto     string    `json:"proto,omitempty"`
}

// MaxEgressRequests bounds the request rows one record carries; the rest
// are counted in Details["egress_requests_cut"].
const MaxEgressRequests = 64

// MaxLeases bounds the lease ids one record carries; the rest are
// counted in Details["leases_cut"].
const MaxLeases = 32

// MaxCredentialsUsed bounds the credentials one record says a run used;
// the rest are counted in Details["credentials_used_cut"].
const MaxCredentialsUsed = 64

// MaxEgressRows bounds the rows one record carries; the rest are counted
// in Details["egress_cut"].
const MaxEgressRows = 64

// Config configures Open.
type Config struct {
	Dir string           // <state-dir>/audit; created 0700 if missing
	Now func() time.Time // nil means time.Now
	// MaxFileSize closes a file once it holds this many bytes and begins
	// the next; 0 means DefaultMaxFileSize.
	MaxFileSize int64
	// Host names the host in every record it writes (Record.Host): set
	// in a fleet, whose hosts' records are read together; empty for one
	// host. Empty, the log goes on naming the host its last record named
	// (coily audit repair on a fleet's host).
	Host string
	// Checkpoint, when set, returns the details of the checkpoint record
	// that begins every new file (the server's stop state).
	Checkpoint func() map[string]string
	// noTree opens the log without its Merkle tree: only for the
	// benchmark that measures what the tree costs.
	noTree bool
}

// Report summarises a successful (or partial) Verify.
type Report struct {
	Files int    // month files found
	Lines int    // lines verified
	Last  string // chain head: hex SHA-256 of the last line, 64 zeros if empty
}

// BrokenError reports the first line of the log that fails verification.
// It wraps ErrCorrupt.
type BrokenError struct {
	File string // path of the month file
	Line int    // 1-based line number within File
	Why  string
	// Torn is set for a last line without its newline: a write cut short
	// by a crash or a full disk, which Repair can cut off.
	Torn bool
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("audit: %s:%d: %s", e.File, e.Line, e.Why)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true for every *BrokenError.
func (e *BrokenError) Unwrap() error { return ErrCorrupt }

var (
	// ErrNotFound is returned by Find and FindRequest when nothing matches.
	ErrNotFound = errors.New("audit: record not found")
	// ErrCorrupt is wrapped by every error reporting a damaged log.
	ErrCorrupt = errors.New("audit: log is corrupt")
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("audit: log is closed")
	// ErrBroken is returned by Append when a write or sync failed (a full
	// disk): the request must not go on; the next Append retries.
	ErrBroken = errors.New("audit: write failed")
)

const (
	// maxLine bounds one line (without its '\n') when reading.
	maxLine    = 16 << 20
	hashPrefix = `,"hash":"`
	hashHexLen = sha256.Size * 2
	// suffixLen is len(`,"hash":"` + 64 hex + `"}`).
	suffixLen = len(hashPrefix) + hashHexLen + len(`"}`)
	fileExt   = ".jsonl"
	monthFmt  = "2006-01"
)

// zeroHash is the Prev of the first line ever written.
var zeroHash = string(bytes.Repeat([]byte{'0'}, hashHexLen))

// formatID returns the record ID for seq.
func formatID(seq uint64) string { return fmt.Sprintf("A%012d", seq) }

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// encodeLine renders r (whose Hash must be empty) as a complete log line,
// including the trailing '\n', and returns it with its self-hash.
func encodeLine(r Record) (line []byte, selfHash string, err error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, "", err
	}
	const emptyHash = `,"hash":""}` + "\n"
	body, ok := bytes.CutSuffix(buf.Bytes(), []byte(emptyHash))
	if !ok {
		return nil, "", errors.New("encoded record does not end with an empty hash field")
	}
	selfHash = hashHex(body)
	line = make([]byte, 0, len(body)+suffixLen+1)
	line = append(line, body...)
	line = append(line, hashPrefix...)
	line = append(line, selfHash...)
	line = append(line, "\"}\n"...)
	return line, selfHash, nil
}

// ParseLine checks one line (without its '\n') on its own, as Verify
// does: strict JSON of a Record (no unknown field, nothing after it), its
// "hash" the last field and the SHA-256 of the rest, its ID that of its
// Seq. It returns the record and the hex SHA-256 of the whole line (what
// the next record's Prev holds). It never reads its chain: Prev and Seq
// against the line before are the caller's to check. The errors wrap
// ErrCorrupt.
func ParseLine(b []byte) (Record, string, error) {
	r, h, err := parseLine(b)
	if err != nil {
		return Record{}, "", fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, h, nil
}

// parseLine checks one line (without its '\n') on its own: strict JSON,
// hash suffix format, self-hash and ID. It returns the record and the hex
// SHA-256 of the whole line, which the next line's Prev must equal.
// Chain checks (Prev, Seq) need context and are left to the caller.
func parseLine(b []byte) (Record, string, error) {
	var r Record
	// Strict: unknown or duplicate members, invalid UTF-8 and data after
	// the object are refused (go-json-experiment/json, what becomes
	// encoding/json/v2: one pass, where encoding/json's Decoder scans a
	// line twice and allocates more; most of Verify's cost).
	if err := jsonv2.Unmarshal(b, &r, jsonv2.RejectUnknownMembers(true)); err != nil {
		return Record{}, "", fmt.Errorf("unparsable: %w", err)
	}
	if len(b) < suffixLen+1 || b[0] != '{' {
		return Record{}, "", errors.New(`malformed line: not a JSON object ending in "hash"`)
	}
	body, suffix := b[:len(b)-suffixLen], b[len(b)-suffixLen:]
	want, ok := bytes.CutPrefix(suffix, []byte(hashPrefix))
	if !ok || !bytes.HasSuffix(want, []byte(`"}`)) {
		return Record{}, "", errors.New(`malformed line: "hash" is not the last field`)
	}
	want = want[:hashHexLen]
	if !isLowerHex(want) {
		return Record{}, "", errors.New("malformed line: hash is not 64 lowercase hex digits")
	}
	// One pass of SHA-256 gives both the body's hash (Sum leaves the
	// state as it was) and the whole line's.
	h := sha256.New()
	h.Write(body)
	var sum [sha256.Size]byte
	if hex.EncodeToString(h.Sum(sum[:0])) != string(want) || r.Hash != string(want) {
		return Record{}, "", errors.New("hash mismatch: line was modified")
	}
	if r.Seq == 0 || r.ID != formatID(r.Seq) {
		return Record{}, "", fmt.Errorf("id %q does not match seq %d", r.ID, r.Seq)
	}
	h.Write(suffix)
	return r, hex.EncodeToString(h.Sum(sum[:0])), nil
}

func isLowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// logFile is one file of the log: YYYY-MM.jsonl (part 0), then, when it
// grows past the size limit, YYYY-MM.0001.jsonl and on. Files sort by
// month, then part.
type logFile struct {
	name  string
	month string
	part  int
}

func (f logFile) fileName() string {
	if f.part == 0 {
		return f.month + fileExt
	}
	return fmt.Sprintf("%s.%04d%s", f.month, f.part, fileExt)
}

// logFiles returns the log's files in dir, oldest first. Other entries are
// ignored.
func logFiles(dir string) ([]logFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var out []logFile
	for _, e := range entries {
		if f, ok := parseFileName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b logFile) int {
		if c := strings.Compare(a.month, b.month); c != 0 {
			return c
		}
		return a.part - b.part
	})
	return out, nil
}

// parseFileName reads YYYY-MM.jsonl or YYYY-MM.NNNN.jsonl.
func parseFileName(name string) (logFile, bool) {
	base, ok := strings.CutSuffix(name, fileExt)
	if !ok {
		return logFile{}, false
	}
	month, partText, hasPart := strings.Cut(base, ".")
	if _, err := time.Parse(monthFmt, month); err != nil || len(month) != len(monthFmt) {
		return logFile{}, false
	}
	f := logFile{name: name, month: month}
	if hasPart {
		if len(partText) != 4 {
			return logFile{}, false
		}
		n, err := strconv.Atoi(partText)
		if err != nil || n <= 0 || partText[0] == '+' || partText[0] == '-' {
			return logFile{}, false
		}
		f.part = n
	}
	return f, true
}
