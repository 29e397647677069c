// Package scrub owns redaction of secret values from streamed output.
//
// coily injects credentials into the environment of the commands it runs and
// streams their stdout and stderr back to the agent. Before any byte of that
// output leaves the server it passes through a Writer built from a Set of the
// injected secrets, and every occurrence of a secret value, or of one of its
// standard encodings, is replaced by "[REDACTED:<NAME>]", where NAME is the
// environment variable the value was injected as ("secret" when the name is
// empty). Scrubbing is defence in depth: the policy that decides which
// commands may run is the real guard. Within its scope, however, scrubbing is
// exact.
//
// # Forms
//
// For each secret value v of at least MinLen bytes the Set redacts these forms:
//
//   - v itself;
//   - base64 of v: StdEncoding, RawStdEncoding, URLEncoding, RawURLEncoding;
//   - url.QueryEscape(v) and url.PathEscape(v), when they differ from v;
//   - hex of v, lower case and upper case;
//   - base32 of v (StdEncoding), padded and not, upper case and lower case.
//
// Forms with identical bytes are kept once, under the name of the first secret
// (in the order given to NewSet) that produced them. Values shorter than MinLen
// are not scrubbed at all: redacting every "abc" would mangle ordinary text
// and hide nothing of value. Empty values are ignored.
//
// # Invariants
//
//  1. Exactness. Matching is leftmost-longest: positions are scanned left to
//     right; at each position the longest form that matches there is replaced
//     and the scan continues after it; if none matches the byte is copied.
//     The output of a Writer, once flushed, is byte for byte Redact of the
//     concatenation of everything written to it, however the input was split
//     into Write calls. In particular a form straddling two (or more) Writes
//     is redacted exactly as if it had arrived in one.
//  2. No leak. No form appears in a run of output between two redaction
//     markers: every copied byte is a position at which no form matched, and a
//     form lying inside a run of copied bytes would have matched at its first
//     byte. (A form can only appear in the output if it overlaps the marker
//     text itself, e.g. a secret "[RED"; that reveals nothing.)
//  3. Bounded delay. After every Write, a Writer holds back at most MaxLen()-1
//     bytes of input: everything before them has been redacted and written
//     downstream. A byte is held back only while it could still be the start
//     of a form whose outcome depends on bytes not yet seen (see Writer.Write).
//  4. Flush ends the stream: it writes out the held-back bytes, redacted, and
//     any later Write fails with ErrFlushed.
//
// # What scrubbing cannot catch
//
// Scrubbing recognises only the forms listed above, each as a standalone,
// contiguous byte string. It does not catch, among other things:
//
//   - base64 (or any other encoding) of a larger string that contains the
//     secret: base64 works in 3-byte groups, so the secret's bytes are encoded
//     differently depending on their offset in the larger input (for example
//     "Authorization: Basic " + base64("user:" + token));
//   - encodings other than those listed (quoted-printable, JSON \u
//     escapes, HTML entities, mixed-case hex, percent-encoding of every
//     byte, ...), and arbitrary transforms: compression, encryption, hashing
//     (a hash is not the secret, but may confirm a guess), reversal, rot13;
//   - a secret split across separate commands or streams (half on stdout,
//     half on stderr, or one half per command), or output only in part (a
//     prefix or substring of the secret shorter than the whole);
//   - a secret printed character by character with separators or formatting
//     between the characters (spaces, newlines, ANSI escape sequences);
//   - values shorter than MinLen.
//
// # Names a command makes
//
// RedactText is for the short texts a command controls that are not its
// output: a host it asked its proxy for, a file name it made, an ssh
// extension name. There a secret also hides split into DNS labels or path
// components, spaced out, or with its case changed (host names are
// case-insensitive): after the exact forms, the text's letters and digits
// alone, their case folded, are compared with the forms folded alike, and
// the stretch of the text each folded form spans is redacted.
//
// # Concurrency
//
// A Set is immutable after NewSet and safe for concurrent use. A Writer is
// not: it must be used from one goroutine at a time (each stream, stdout and
// stderr, gets its own Writer), and it does no locking.
package scrub

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"slices"
	"strings"
)

// MinLen is the shortest secret value, in bytes, that is scrubbed. Shorter
// values are not redacted: they would match ordinary text.
const MinLen = 4

// ErrFlushed is returned by Write after the Writer has been flushed.
var ErrFlushed = errors.New("scrub: write after Flush")

// Secret is one value to redact, named by the environment variable it was
// injected as.
type Secret struct {
	Name  string // e.g. "GH_TOKEN"
	Value string
}

// form is one byte string to redact and its replacement.
type form struct {
	text        []byte
	replacement []byte
}

// Set is the compiled set of forms for some secrets. Values shorter than
// MinLen bytes are not scrubbed; empty values are ignored. A Set is immutable
// and safe for concurrent use; a nil *Set redacts nothing.
type Set struct {
	// folded are the forms folded as RedactText compares names (foldName),
	// by replacement; only those at least minFolded long.
	folded  []form
	forms   []form     // longest first
	byFirst [256][]int // indexes into forms by first byte, longest first
	maxLen  int        // length of the longest form, 0 if none
}

// NewSet compiles the forms of secrets (see the package documentation).
func NewSet(secrets []Secret) *Set {
	s := &Set{}
	seen := make(map[string]bool)
	for _, sec := range secrets {
		if len(sec.Value) < MinLen {
			continue
		}
		name := sec.Name
		if name == "" {
			name = "secret"
		}
		replacement := []byte("[REDACTED:" + name + "]")
		for _, f := range formsOf(sec.Value) {
			if seen[f] {
				continue
			}
			seen[f] = true
			s.forms = append(s.forms, form{text: []byte(f), replacement: replacement})
			if ff := foldName(f); len(ff) >= minFolded && !seen["\x00"+ff] {
				seen["\x00"+ff] = true
				s.folded = append(s.folded, form{text: []byte(ff), replacement: replacement})
			}
		}
	}
	// Longest first. Equal-length forms never both match at one position
	// (they would be identical, and duplicates were dropped), so their
	// relative order does not matter; the stable sort keeps it deterministic.
	slices.SortStableFunc(s.forms, func(a, b form) int { return len(b.text) - len(a.text) })
	for i, f := range s.forms {
		s.byFirst[f.text[0]] = append(s.byFirst[f.text[0]], i)
		s.maxLen = max(s.maxLen, len(f.text))
	}
	return s
}

// formsOf lists the forms of v, possibly with duplicates.
func formsOf(v string) []string {
	b := []byte(v)
	h := hex.EncodeToString(b)
	fs := []string{
		v,
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
	}
	if q := url.QueryEscape(v); q != v {
		fs = append(fs, q)
	}
	if p := url.PathEscape(v); p != v {
		fs = append(fs, p)
	}
	b32 := base32.StdEncoding.EncodeToString(b)
	raw32 := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
	return append(fs, h, strings.ToUpper(h), b32, strings.ToLower(b32), raw32, strings.ToLower(raw32))
}

// minFolded is the shortest folded form RedactText looks for in names: a
// shorter one would match ordinary host and file names.
const minFolded = 8

// foldName folds a text as RedactText compares it: its ASCII letters, in
// lower case, and digits; nothing else.
func foldName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c, ok := foldByte(s[i]); ok {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// foldByte is c as foldName keeps it, and whether it keeps it.
func foldByte(c byte) (byte, bool) {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return c, true
	case c >= 'A' && c <= 'Z':
		return c + 'a' - 'A', true
	}
	return 0, false
}

// RedactText redacts a short text a command controls (see "Names a
// command makes"): the exact forms first; then, comparing the text's
// letters and digits alone with the case folded, every stretch of the
// text from the first to the last character of a secret's folded form,
// whatever separates them.
func (s *Set) RedactText(str string) string {
	str = s.RedactString(str)
	if s == nil || len(s.folded) == 0 {
		return str
	}
	folded := make([]byte, 0, len(str))
	at := make([]int, 0, len(str)) // folded[i] is str[at[i]]
	for i := 0; i < len(str); i++ {
		if c, ok := foldByte(str[i]); ok {
			folded, at = append(folded, c), append(at, i)
		}
	}
	type span struct {
		from, to    int // str[from:to]
		replacement []byte
	}
	var spans []span
	for _, ff := range s.folded {
		for from := 0; ; {
			k := bytes.Index(folded[from:], ff.text)
			if k < 0 {
				break
			}
			k += from
			spans = append(spans, span{at[k], at[k+len(ff.text)-1] + 1, ff.replacement})
			from = k + 1
		}
	}
	if len(spans) == 0 {
		return str
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	var b strings.Builder
	last := 0
	for i := 0; i < len(spans); {
		from, to, repl := spans[i].from, spans[i].to, spans[i].replacement
		for i++; i < len(spans) && spans[i].from < to; i++ { // overlapping: one redaction
			to = max(to, spans[i].to)
		}
		b.WriteString(str[last:from])
		b.Write(repl)
		last = to
	}
	b.WriteString(str[last:])
	return b.String()
}

// MaxLen is the length of the longest form: a Writer holds back at most
// MaxLen()-1 bytes. It is 0 for a Set with no forms.
func (s *Set) MaxLen() int {
	if s == nil {
		return 0
	}
	return s.maxLen
}

// Redact returns b with every form redacted. It does not modify b; the result
// is always a new slice.
func (s *Set) Redact(b []byte) []byte {
	out, _ := s.scan(make([]byte, 0, len(b)), b, true)
	return out
}

// RedactString is Redact for strings.
func (s *Set) RedactString(str string) string {
	return string(s.Redact([]byte(str)))
}

// scan appends the redaction of buf to dst and returns it with the number of
// bytes of buf consumed.
//
// With atEOF, buf is the whole rest of the stream and all of it is consumed.
// Otherwise more bytes may follow buf, and scan stops at the first position
// whose outcome could still change with them: a position p where some form f
// starting with buf[p] is longer than the len(buf)-p bytes available and
// buf[p:] is a prefix of f. Because len(f) <= MaxLen, this can only happen
// when len(buf)-p < MaxLen, so at most MaxLen-1 bytes are left unconsumed.
//
// Every decision scan makes is one the scan of the whole stream would make:
// at a decided position p, each form either fits in buf (and buf[p:] decides
// whether it matches) or is already ruled out by a mismatch within buf, so
// the longest match at p does not depend on later bytes. Scanning the stream
// in pieces therefore visits the same positions and makes the same
// replacements as scanning it at once.
func (s *Set) scan(dst, buf []byte, atEOF bool) ([]byte, int) {
	if s == nil || len(s.forms) == 0 {
		return append(dst, buf...), len(buf)
	}
	lit := 0 // start of the pending run of literal bytes buf[lit:i]
	i := 0
	for i < len(buf) {
		cands := s.byFirst[buf[i]]
		if len(cands) == 0 {
			i++
			continue
		}
		rest := buf[i:]
		matched := -1
		undecided := false
		for _, fi := range cands {
			f := s.forms[fi].text
			if len(f) > len(rest) {
				if !atEOF && bytes.HasPrefix(f, rest) {
					undecided = true
					break
				}
				continue
			}
			if bytes.Equal(rest[:len(f)], f) {
				matched = fi
				break
			}
		}
		if undecided {
			break
		}
		if matched < 0 {
			i++
			continue
		}
		dst = append(dst, buf[lit:i]...)
		dst = append(dst, s.forms[matched].replacement...)
		i += len(s.forms[matched].text)
		lit = i
	}
	dst = append(dst, buf[lit:i]...)
	return dst, i
}

// Writer redacts as it writes to an underlying io.Writer. Each stream
// (stdout, stderr) has its own Writer. A Writer is for use from one goroutine
// at a time; it does no locking.
type Writer struct {
	set     *Set
	w       io.Writer
	pending []byte // input not yet decided; len(pending) <= MaxLen()-1 between calls
	out     []byte // scratch for redacted output
	flushed bool
	err     error // sticky error from w
}

// NewWriter returns a Writer that redacts the forms of s from everything
// written to it and passes the result on to w.
func (s *Set) NewWriter(w io.Writer) *Writer {
	return &Writer{set: s, w: w}
}

// Write redacts p and writes it on. It never passes on a byte that could
// still be the start of a form: it holds back at most MaxLen()-1 bytes at the
// end of what it has seen, and everything before them is redacted and written
// (in at most one call to the underlying writer). It returns len(p) on
// success. After an error from the underlying writer, or after Flush, Write
// fails.
func (w *Writer) Write(p []byte) (int, error) {
	if w.flushed {
		return 0, ErrFlushed
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var buf []byte
	if len(w.pending) == 0 {
		buf = p // scan p in place; only its undecided tail is copied below
	} else {
		w.pending = append(w.pending, p...)
		buf = w.pending
	}
	var n int
	w.out, n = w.set.scan(w.out[:0], buf, false)
	// Keep the undecided tail (at most MaxLen()-1 bytes, see scan). copy
	// handles the overlap when buf is w.pending.
	w.pending = append(w.pending[:0], buf[n:]...)
	if err := w.emit(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush redacts and writes the held-back bytes and ends the stream: later
// calls to Write return ErrFlushed. Call it when the stream ends. Flush on a
// flushed Writer does nothing and returns nil.
func (w *Writer) Flush() error {
	if w.flushed {
		return nil
	}
	w.flushed = true
	if w.err != nil {
		return w.err
	}
	w.out, _ = w.set.scan(w.out[:0], w.pending, true)
	w.pending = w.pending[:0]
	return w.emit()
}

// emit writes w.out to the underlying writer.
func (w *Writer) emit() error {
	if len(w.out) == 0 {
		return nil
	}
	n, err := w.w.Write(w.out)
	if err == nil && n < len(w.out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}
