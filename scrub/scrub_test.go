package scrub

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"testing"
)

// ---- helpers ----

// refForms lists the forms of v as the package documentation defines them,
// computed independently of formsOf.
func refForms(v string) []string {
	if len(v) < MinLen {
		return nil
	}
	b := []byte(v)
	fs := []string{
		v,
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b),
		strings.ToUpper(hex.EncodeToString(b)),
		base32.StdEncoding.EncodeToString(b),
		strings.ToLower(base32.StdEncoding.EncodeToString(b)),
		base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b),
		strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)),
	}
	if q := url.QueryEscape(v); q != v {
		fs = append(fs, q)
	}
	if p := url.PathEscape(v); p != v {
		fs = append(fs, p)
	}
	return fs
}

type refForm struct{ text, repl string }

// refRedact is a naive leftmost-longest redactor: at each position try every
// form of every secret and take the longest match (first secret wins ties).
func refRedact(secrets []Secret, in string) string {
	var fs []refForm
	for _, s := range secrets {
		name := s.Name
		if name == "" {
			name = "secret"
		}
		for _, f := range refForms(s.Value) {
			fs = append(fs, refForm{f, "[REDACTED:" + name + "]"})
		}
	}
	var out strings.Builder
	for i := 0; i < len(in); {
		best := -1
		for j, f := range fs {
			if strings.HasPrefix(in[i:], f.text) && (best < 0 || len(f.text) > len(fs[best].text)) {
				best = j
			}
		}
		if best < 0 {
			out.WriteByte(in[i])
			i++
			continue
		}
		out.WriteString(fs[best].repl)
		i += len(fs[best].text)
	}
	return out.String()
}

// writeChunks writes in through a Writer of s, split at the given cut points
// (ascending offsets into in), flushes, and returns what reached downstream.
func writeChunks(t testing.TB, s *Set, in []byte, cuts ...int) []byte {
	t.Helper()
	var out bytes.Buffer
	w := s.NewWriter(&out)
	prev := 0
	for _, c := range append(cuts, len(in)) {
		n, err := w.Write(in[prev:c])
		if err != nil || n != c-prev {
			t.Fatalf("Write(%d bytes) = %d, %v", c-prev, n, err)
		}
		prev = c
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return out.Bytes()
}

// markers lists the replacement strings of s.
func markers(s *Set) []string {
	seen := map[string]bool{}
	var ms []string
	for _, f := range s.forms {
		if m := string(f.replacement); !seen[m] {
			seen[m] = true
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	return ms
}

// literalRuns splits out at the redaction markers of s.
func literalRuns(s *Set, out string) []string {
	ms := markers(s)
	var runs []string
	start := 0
	for i := 0; i < len(out); {
		hit := ""
		for _, m := range ms {
			if strings.HasPrefix(out[i:], m) {
				hit = m
				break
			}
		}
		if hit == "" {
			i++
			continue
		}
		runs = append(runs, out[start:i])
		i += len(hit)
		start = i
	}
	return append(runs, out[start:])
}

// overlapsMarker reports whether an occurrence of f in the output could
// overlap the marker m: f inside m, m inside f, or a suffix of one being a
// prefix of the other.
func overlapsMarker(f, m string) bool {
	if strings.Contains(f, m) || strings.Contains(m, f) {
		return true
	}
	for k := 1; k < len(f) && k < len(m); k++ {
		if strings.HasSuffix(f, m[:k]) || strings.HasPrefix(f, m[len(m)-k:]) {
			return true
		}
	}
	return false
}

// assertNoLeak checks invariant 2: no form of s appears in a literal run of
// out, nor anywhere in out unless it could overlap a marker.
func assertNoLeak(t testing.TB, s *Set, out string) {
	t.Helper()
	runs := literalRuns(s, out)
	ms := markers(s)
	for _, f := range s.forms {
		ft := string(f.text)
		for _, r := range runs {
			if strings.Contains(r, ft) {
				t.Fatalf("form %q leaked in literal run %q of output %q", ft, r, out)
			}
		}
		overlaps := false
		for _, m := range ms {
			overlaps = overlaps || overlapsMarker(ft, m)
		}
		if !overlaps && strings.Contains(out, ft) {
			t.Fatalf("form %q leaked in output %q", ft, out)
		}
	}
}

// ---- construction ----

func TestNewSetForms(t *testing.T) {
	s := NewSet([]Secret{
		{Name: "A", Value: "p@ss w/rd+?&=é"},
		{Name: "B", Value: "p@ss w/rd+?&=é"}, // duplicate: all forms belong to A
		{Name: "SHORT", Value: "abc"},
		{Name: "EMPTY", Value: ""},
		{Name: "DIGITS", Value: "1111"}, // hex lower == hex upper
	})
	got := map[string]string{}
	for _, f := range s.forms {
		if _, dup := got[string(f.text)]; dup {
			t.Errorf("duplicate form %q", f.text)
		}
		got[string(f.text)] = string(f.replacement)
	}
	want := map[string]string{}
	for _, sec := range []Secret{{"A", "p@ss w/rd+?&=é"}, {"DIGITS", "1111"}} {
		for _, f := range refForms(sec.Value) {
			want[f] = "[REDACTED:" + sec.Name + "]"
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d forms, want %d: %q", len(got), len(want), got)
	}
	for f, r := range want {
		if got[f] != r {
			t.Errorf("form %q: replacement %q, want %q", f, got[f], r)
		}
	}
	// Sorted longest first, index consistent, MaxLen right.
	maxLen := 0
	for i, f := range s.forms {
		if i > 0 && len(f.text) > len(s.forms[i-1].text) {
			t.Errorf("forms not sorted longest first at %d", i)
		}
		maxLen = max(maxLen, len(f.text))
	}
	if s.MaxLen() != maxLen {
		t.Errorf("MaxLen = %d, want %d", s.MaxLen(), maxLen)
	}
	// PathEscape and QueryEscape differ for this value ("+", " ").
	q, p := url.QueryEscape("p@ss w/rd+?&=é"), url.PathEscape("p@ss w/rd+?&=é")
	if q == p || got[q] == "" || got[p] == "" {
		t.Errorf("url forms missing: %q %q", q, p)
	}
}

func TestEmptyAndNilSet(t *testing.T) {
	for _, s := range []*Set{nil, NewSet(nil), NewSet([]Secret{{"X", "abc"}, {"Y", ""}})} {
		if s.MaxLen() != 0 {
			t.Errorf("MaxLen = %d, want 0", s.MaxLen())
		}
		in := "anything abc at all\x00\xff"
		if got := s.RedactString(in); got != in {
			t.Errorf("RedactString = %q", got)
		}
		if got := string(writeChunks(t, s, []byte(in), 3, 7)); got != in {
			t.Errorf("Writer = %q", got)
		}
	}
}

// ---- Redact table ----

type redactCase struct {
	name    string
	secrets []Secret
	in      string
	want    string
}

func redactCases() []redactCase {
	gh := Secret{"GH_TOKEN", "ghp_abc123XYZ"}
	pw := Secret{"PW", "p@ss w/rd+?&=é"}
	meta := Secret{"META", ".*+?[](){}|^$\\\x00\xff"}
	uni := Secret{"UNI", "pässwörd🔑"}
	cases := []redactCase{
		{"whole value", []Secret{gh}, "token=ghp_abc123XYZ\n", "token=[REDACTED:GH_TOKEN]\n"},
		{"at start", []Secret{gh}, "ghp_abc123XYZ rest", "[REDACTED:GH_TOKEN] rest"},
		{"at end", []Secret{gh}, "end ghp_abc123XYZ", "end [REDACTED:GH_TOKEN]"},
		{"alone", []Secret{gh}, "ghp_abc123XYZ", "[REDACTED:GH_TOKEN]"},
		{"repeated", []Secret{gh}, "a ghp_abc123XYZ b ghp_abc123XYZ c", "a [REDACTED:GH_TOKEN] b [REDACTED:GH_TOKEN] c"},
		{"adjacent", []Secret{gh}, "ghp_abc123XYZghp_abc123XYZ", "[REDACTED:GH_TOKEN][REDACTED:GH_TOKEN]"},
		{"two secrets", []Secret{gh, {"AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG"}},
			"gh=ghp_abc123XYZ aws=wJalrXUtnFEMI/K7MDENG", "gh=[REDACTED:GH_TOKEN] aws=[REDACTED:AWS_SECRET_ACCESS_KEY]"},
		{"prefix secret, longer wins", []Secret{{"SHORT", "abcd"}, {"LONG", "abcdef"}}, "xabcdefy abcdxy", "x[REDACTED:LONG]y [REDACTED:SHORT]xy"},
		{"prefix secret, order irrelevant", []Secret{{"LONG", "abcdef"}, {"SHORT", "abcd"}}, "abcdeabcdef", "[REDACTED:SHORT]e[REDACTED:LONG]"},
		{"overlapping secrets, leftmost wins", []Secret{{"A", "abcd"}, {"B", "cdef"}}, "abcdef", "[REDACTED:A]ef"},
		{"self-overlap", []Secret{{"A", "abab"}}, "abababab", "[REDACTED:A][REDACTED:A]"},
		{"near miss then hit", []Secret{{"A", "abcd"}}, "abcabcd", "abc[REDACTED:A]"},
		{"shorter than MinLen ignored", []Secret{{"S", "abc"}}, "abc abc", "abc abc"},
		{"empty value ignored", []Secret{{"E", ""}}, "text", "text"},
		{"empty name", []Secret{{"", "hunter22"}}, "pw hunter22", "pw [REDACTED:secret]"},
		{"duplicate value, first name", []Secret{{"FIRST", "hunter22"}, {"SECOND", "hunter22"}}, "hunter22", "[REDACTED:FIRST]"},
		{"regex metacharacters and 0x00 0xff", []Secret{meta}, "<" + meta.Value + ">", "<[REDACTED:META]>"},
		{"unicode", []Secret{uni}, "«pässwörd🔑»", "«[REDACTED:UNI]»"},
		{"no match", []Secret{gh}, "ghp_abc123XY ghp_abc123xyz", "ghp_abc123XY ghp_abc123xyz"},
		{"empty input", []Secret{gh}, "", ""},
	}
	// Each encoded form of pw, meta, uni and gh, standalone and embedded.
	for _, sec := range []Secret{gh, pw, meta, uni} {
		b := []byte(sec.Value)
		for _, enc := range []struct{ name, text string }{
			{"std", base64.StdEncoding.EncodeToString(b)},
			{"rawstd", base64.RawStdEncoding.EncodeToString(b)},
			{"url", base64.URLEncoding.EncodeToString(b)},
			{"rawurl", base64.RawURLEncoding.EncodeToString(b)},
			{"query", url.QueryEscape(sec.Value)},
			{"path", url.PathEscape(sec.Value)},
			{"hex", hex.EncodeToString(b)},
			{"HEX", strings.ToUpper(hex.EncodeToString(b))},
		} {
			cases = append(cases,
				redactCase{sec.Name + " " + enc.name, []Secret{sec}, "<" + enc.text + ">", "<[REDACTED:" + sec.Name + "]>"},
				redactCase{sec.Name + " " + enc.name + " alone", []Secret{sec}, enc.text, "[REDACTED:" + sec.Name + "]"},
			)
		}
	}
	return cases
}

func TestRedact(t *testing.T) {
	for _, c := range redactCases() {
		t.Run(c.name, func(t *testing.T) {
			s := NewSet(c.secrets)
			got := s.RedactString(c.in)
			if got != c.want {
				t.Fatalf("RedactString(%q) = %q, want %q", c.in, got, c.want)
			}
			if ref := refRedact(c.secrets, c.in); ref != c.want {
				t.Fatalf("reference redactor disagrees with table: %q", ref)
			}
			in := []byte(c.in)
			if got := s.Redact(in); string(got) != c.want || string(in) != c.in {
				t.Fatalf("Redact = %q (input now %q)", got, in)
			}
			assertNoLeak(t, s, got)
			// Every split into two and three chunks.
			for i := 0; i <= len(in); i++ {
				if got := string(writeChunks(t, s, in, i)); got != c.want {
					t.Fatalf("split at %d: %q, want %q", i, got, c.want)
				}
				for j := i; j <= len(in); j++ {
					if got := string(writeChunks(t, s, in, i, j)); got != c.want {
						t.Fatalf("split at %d,%d: %q, want %q", i, j, got, c.want)
					}
				}
			}
		})
	}
}

// ---- straddling ----

func TestStraddle(t *testing.T) {
	secrets := []Secret{
		{"GH_TOKEN", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"},
		{"GH_PREFIX", "ghp_16C7e42F"}, // a prefix of GH_TOKEN
		{"PW", "p@ss w/rd+?&=\x00\xff"},
	}
	s := NewSet(secrets)
	for _, sec := range secrets {
		for _, f := range refForms(sec.Value) {
			in := []byte("prefix" + f + "suffix")
			want := s.Redact(in)
			if string(want) != refRedact(secrets, string(in)) {
				t.Fatalf("Redact(%q) = %q, reference %q", in, want, refRedact(secrets, string(in)))
			}
			if bytes.Contains(want, []byte(f)) {
				t.Fatalf("Redact(%q) = %q still contains the form", in, want)
			}
			for i := 0; i <= len(in); i++ {
				got := writeChunks(t, s, in, i)
				if !bytes.Equal(got, want) {
					t.Fatalf("form %q split at %d: %q, want %q", f, i, got, want)
				}
				for j := i; j <= len(in); j++ {
					got := writeChunks(t, s, in, i, j)
					if !bytes.Equal(got, want) {
						t.Fatalf("form %q split at %d,%d: %q, want %q", f, i, j, got, want)
					}
					assertNoLeak(t, s, string(got))
				}
			}
		}
	}
}

// ---- delay bound ----

// countingWriter counts and keeps what it is given.
type countingWriter struct {
	n   int
	buf bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	return c.buf.Write(p)
}

// TestDelayBound checks invariant 3 after every Write, for random chunkings:
// the Writer holds back at most MaxLen()-1 bytes, and what has gone
// downstream is exactly the redaction of the rest (so at least
// len(input)-(MaxLen()-1) input bytes have been passed on, redacted).
func TestDelayBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	secrets := []Secret{
		{"GH_TOKEN", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"},
		{"GH_PREFIX", "ghp_16C7"},
		{"AWS", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
	}
	s := NewSet(secrets)
	for iter := 0; iter < 300; iter++ {
		in := randomText(rng, secrets, 400)
		full := s.Redact(in)
		var cw countingWriter
		w := s.NewWriter(&cw)
		total := 0
		for total < len(in) {
			n := min(len(in)-total, 1+rng.IntN(40))
			if _, err := w.Write(in[total : total+n]); err != nil {
				t.Fatal(err)
			}
			total += n
			// Internal view: the held-back tail is bounded and everything
			// before it is downstream, redacted.
			if len(w.pending) > s.MaxLen()-1 {
				t.Fatalf("holding back %d bytes, MaxLen %d", len(w.pending), s.MaxLen())
			}
			if !bytes.Equal(w.pending, in[total-len(w.pending):total]) {
				t.Fatalf("pending is not the input tail")
			}
			// Black-box view: downstream is the redaction of all but at most
			// MaxLen()-1 trailing input bytes.
			ok := false
			for k := 0; k < s.MaxLen() && k <= total; k++ {
				if r := s.Redact(in[:total-k]); len(r) == cw.n && bytes.Equal(r, cw.buf.Bytes()) {
					ok = true
					break
				}
			}
			if !ok {
				t.Fatalf("after %d input bytes, downstream (%d bytes) is not the redaction of >= %d of them",
					total, cw.n, total-(s.MaxLen()-1))
			}
			if !bytes.HasPrefix(full, cw.buf.Bytes()) {
				t.Fatalf("downstream is not a prefix of the full redaction")
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(cw.buf.Bytes(), full) {
			t.Fatalf("Writer = %q, Redact = %q", cw.buf.Bytes(), full)
		}
	}
}

// TestDelayTight shows the bound is reached and that bytes which cannot start
// a form are not held back at all.
func TestDelayTight(t *testing.T) {
	s := NewSet([]Secret{{"K", "abcdefgh"}})
	maxLen := s.MaxLen() // hex form: 16
	if maxLen != 16 {
		t.Fatalf("MaxLen = %d, want 16", maxLen)
	}
	hexForm := hex.EncodeToString([]byte("abcdefgh"))
	var out bytes.Buffer
	w := s.NewWriter(&out)
	w.Write([]byte("zzz " + hexForm[:maxLen-1]))
	if got := out.String(); got != "zzz " {
		t.Fatalf("downstream %q, want %q (MaxLen-1 bytes held)", got, "zzz ")
	}
	w.Write([]byte("0")) // not the last hex digit: the whole tail is decided
	want := "zzz " + hexForm[:maxLen-1] + "0"
	if got := out.String(); got != want {
		t.Fatalf("downstream %q, want %q", got, want)
	}
	out.Reset()
	w.Write([]byte("no candidates here: zzz"))
	if got := out.String(); got != "no candidates here: zzz" {
		t.Fatalf("downstream %q: bytes that cannot start a form were held", got)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// ---- property test ----

// randomText builds up to about n bytes of random text mixing random bytes
// (from a small alphabet, so near-misses are common, and from all 256), whole
// forms and prefixes of forms of the secrets.
func randomText(rng *rand.Rand, secrets []Secret, n int) []byte {
	var forms []string
	for _, s := range secrets {
		forms = append(forms, refForms(s.Value)...)
	}
	const alphabet = "abcdefgh0123456789ABCDEF+/=_-%"
	var b []byte
	for len(b) < n {
		switch rng.IntN(6) {
		case 0, 1:
			for k := rng.IntN(20); k > 0; k-- {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			}
		case 2:
			for k := rng.IntN(10); k > 0; k-- {
				b = append(b, byte(rng.IntN(256)))
			}
		case 3, 4:
			if len(forms) > 0 {
				b = append(b, forms[rng.IntN(len(forms))]...)
			}
		case 5:
			if len(forms) > 0 {
				f := forms[rng.IntN(len(forms))]
				b = append(b, f[:rng.IntN(len(f))]...)
			}
		}
	}
	return b
}

func randomBytes(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return string(b)
}

func TestProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240601, 7))
	for iter := 0; iter < 500; iter++ {
		var secrets []Secret
		for k := 1 + rng.IntN(4); k > 0; k-- {
			v := randomBytes(rng, 4+rng.IntN(61))
			if rng.IntN(4) == 0 && len(secrets) > 0 {
				// Sometimes a prefix or extension of an earlier secret.
				prev := secrets[rng.IntN(len(secrets))].Value
				if rng.IntN(2) == 0 && len(prev) > 4 {
					v = prev[:4+rng.IntN(len(prev)-4)]
				} else {
					v = prev + v[:rng.IntN(min(8, len(v)))]
				}
			}
			secrets = append(secrets, Secret{Name: fmt.Sprintf("S%d", len(secrets)), Value: v})
		}
		s := NewSet(secrets)
		in := randomText(rng, secrets, 1+rng.IntN(2000))
		want := s.Redact(in)
		if ref := refRedact(secrets, string(in)); string(want) != ref {
			t.Fatalf("iter %d: Redact disagrees with reference\n got %q\nwant %q", iter, want, ref)
		}
		var cuts []int
		for c := rng.IntN(50) + 1; c < len(in); c += rng.IntN(50) + 1 {
			cuts = append(cuts, c)
		}
		got := writeChunks(t, s, in, cuts...)
		if !bytes.Equal(got, want) {
			t.Fatalf("iter %d: Writer output differs from Redact\n got %q\nwant %q", iter, got, want)
		}
		assertNoLeak(t, s, string(got))
	}
}

// ---- Writer lifecycle ----

func TestFlush(t *testing.T) {
	s := NewSet([]Secret{{"K", "hunter22"}})
	var out bytes.Buffer
	w := s.NewWriter(&out)
	if err := w.Flush(); err != nil || out.Len() != 0 {
		t.Fatalf("Flush on empty: %v, wrote %q", err, out.String())
	}
	if n, err := w.Write([]byte("x")); n != 0 || !errors.Is(err, ErrFlushed) {
		t.Fatalf("Write after Flush = %d, %v; want 0, ErrFlushed", n, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("second Flush: %v", err)
	}

	out.Reset()
	w = s.NewWriter(&out)
	if n, err := w.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) = %d, %v", n, err)
	}
	w.Write([]byte("pw: hunt"))
	w.Write([]byte("er2"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "pw: hunter2" {
		t.Fatalf("got %q", got)
	}
}

// TestWriteDoesNotRetain checks that the Writer copies what it holds back.
func TestWriteDoesNotRetain(t *testing.T) {
	s := NewSet([]Secret{{"K", "hunter22"}})
	var out bytes.Buffer
	w := s.NewWriter(&out)
	p := []byte("say hunter2")
	w.Write(p)
	copy(p, "XXXXXXXXXXX")
	w.Write([]byte("2!"))
	w.Flush()
	if got := out.String(); got != "say [REDACTED:K]!" {
		t.Fatalf("got %q", got)
	}
}

type failWriter struct {
	n   int // bytes to accept per call
	err error
}

func (f *failWriter) Write(p []byte) (int, error) { return min(f.n, len(p)), f.err }

func TestDownstreamErrors(t *testing.T) {
	s := NewSet([]Secret{{"K", "hunter22"}})
	boom := errors.New("boom")
	w := s.NewWriter(&failWriter{err: boom})
	if n, err := w.Write([]byte("hello")); n != 0 || !errors.Is(err, boom) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if _, err := w.Write([]byte("again")); !errors.Is(err, boom) {
		t.Fatalf("error not sticky: %v", err)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v", err)
	}

	w = s.NewWriter(&failWriter{n: 2})
	if _, err := w.Write([]byte("hello")); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("short write: %v", err)
	}
}

// ---- fuzz ----

func FuzzWriter(f *testing.F) {
	for _, c := range redactCases() {
		secret := ""
		if len(c.secrets) > 0 {
			secret = c.secrets[0].Value
		}
		f.Add([]byte(c.in), secret, uint8(len(c.in)/2))
	}
	f.Add([]byte("prefix68696464656e2073656372657420suffix"), "hidden secret", uint8(13))
	f.Fuzz(func(t *testing.T, data []byte, secret string, cut uint8) {
		secrets := []Secret{{Name: "FUZZ", Value: secret}}
		s := NewSet(secrets)
		want := s.Redact(data)
		c := int(cut) % (len(data) + 1)
		got := writeChunks(t, s, data, c)
		if !bytes.Equal(got, want) {
			t.Fatalf("split at %d: Writer %q, Redact %q", c, got, want)
		}
		step := int(cut)%17 + 1
		var cuts []int
		for i := step; i < len(data); i += step {
			cuts = append(cuts, i)
		}
		if got := writeChunks(t, s, data, cuts...); !bytes.Equal(got, want) {
			t.Fatalf("chunks of %d: Writer %q, Redact %q", step, got, want)
		}
		if len(secret) >= MinLen {
			assertNoLeak(t, s, string(got))
			if !overlapsMarker(secret, "[REDACTED:FUZZ]") && bytes.Contains(got, []byte(secret)) {
				t.Fatalf("output %q contains the secret", got)
			}
		}
	})
}

// ---- benchmark ----

func BenchmarkWriter(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	secrets := []Secret{
		{"GH_TOKEN", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"},
		{"AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
		{"DB_PASSWORD", "correct horse battery staple"},
	}
	s := NewSet(secrets)
	words := strings.Fields("the quick brown fox jumps over lazy dog commit 4f9a2c1 " +
		"Author: <dev@example.com> Date: 2024-06-01 {\"id\": 12345, \"url\": \"https://api.github.com/repos/x/y\"}")
	var text []byte
	for len(text) < 1<<20 {
		if rng.IntN(500) == 0 {
			fs := refForms(secrets[rng.IntN(len(secrets))].Value)
			text = append(text, fs[rng.IntN(len(fs))]...)
		} else {
			text = append(text, words[rng.IntN(len(words))]...)
		}
		text = append(text, " \n"[rng.IntN(2)])
	}
	text = text[:1<<20]
	const chunk = 32 << 10
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		w := s.NewWriter(io.Discard)
		for i := 0; i < len(text); i += chunk {
			w.Write(text[i:min(i+chunk, len(text))])
		}
		w.Flush()
	}
}

// Names a command makes carry a secret split into DNS labels or path
// components, spaced out, case changed, in hex or base32: RedactText takes
// the stretch holding it out, whatever separates its characters.
func TestRedactText(t *testing.T) {
	const tok = "ghp_Secret0123456789abcdefXYZ"
	s := NewSet([]Secret{{Name: "GH_TOKEN", Value: tok}})
	b := []byte(tok)
	hexTok := hex.EncodeToString(b)
	b32 := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
	half := len(tok) / 2
	for _, c := range []struct{ in, want string }{
		{"plain.example.com", "plain.example.com"},
		{tok + ".evil.test", "[REDACTED:GH_TOKEN].evil.test"},
		{strings.ToLower(tok) + ".evil.test", "[REDACTED:GH_TOKEN].evil.test"},
		{"ghp-secret.0123456789.abcdefxyz.evil.test:443", "[REDACTED:GH_TOKEN].evil.test:443"},
		{hexTok[:40] + "." + hexTok[40:] + ".evil.test", "[REDACTED:GH_TOKEN].evil.test"},
		{b32[:30] + "." + b32[30:] + ".evil.test", "[REDACTED:GH_TOKEN].evil.test"},
		{"egress to " + strings.ToUpper(tok) + ".x refused", "egress to [REDACTED:GH_TOKEN].x refused"},
		{"a file named dir/" + tok[:10] + "-" + tok[10:], "a file named dir/[REDACTED:GH_TOKEN]"},
		{"src/" + tok[:half] + "/" + tok[half:] + "/.envrc", "src/[REDACTED:GH_TOKEN]/.envrc"},
		{tok[:half] + " " + tok[half:], "[REDACTED:GH_TOKEN]"},
		{tok[:half] + "+" + tok[half:] + "=", "[REDACTED:GH_TOKEN]="},
		{"~" + tok[:half] + "~" + tok[half:] + "~", "~[REDACTED:GH_TOKEN]~"},
		{".env." + tok[:half] + ":" + tok[half:], ".env.[REDACTED:GH_TOKEN]"},
		{"a,b " + tok[:half] + "," + tok[half:] + " c", "a,b [REDACTED:GH_TOKEN] c"},
		{"short.secr.et", "short.secr.et"},
	} {
		if got := s.RedactText(c.in); got != c.want {
			t.Errorf("RedactText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	var nilSet *Set
	if got := nilSet.RedactText("x." + tok); got != "x."+tok {
		t.Errorf("nil set: %q", got)
	}
}

func FuzzRedactText(f *testing.F) {
	const tok = "ghp_Secret0123456789abcdefXYZ"
	s := NewSet([]Secret{{Name: "T", Value: tok}})
	for _, seed := range []string{"", "a.b", tok, strings.ToUpper(tok) + ".x", "ghp-secret.0123456789.abcdefxyz", "ghp_Secret01234 56789abcdefXYZ"} {
		f.Add(seed)
	}
	folded := foldName(tok)
	f.Fuzz(func(t *testing.T, in string) {
		out := s.RedactText(in)
		if strings.Contains(out, tok) || strings.Contains(foldName(out), folded) {
			t.Fatalf("RedactText(%q) = %q keeps the secret", in, out)
		}
	})
}
