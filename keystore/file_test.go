package keystore

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/keystore/credref"
)

// fileCases are ParseFile's table, and FuzzParseFile's seeds. A case with
// want == nil must fail on line wantLine (0: the whole file) for
// wantReason.
var fileCases = []struct {
	name       string
	in         string
	want       map[string]string
	wantLine   int
	wantReason string
}{
	{name: "empty", in: "", want: map[string]string{}},
	{name: "one", in: "github=ghp_SECRETvalue", want: map[string]string{"github": "ghp_SECRETvalue"}},
	{name: "lines", in: "# comment\n\n  \t# indented comment\ngithub=ghp_1\nnpm.token_2-x=npm_2\n\t \n",
		want: map[string]string{"github": "ghp_1", "npm.token_2-x": "npm_2"}},
	{name: "value keeps everything", in: "a=  spaced = and # not a comment \t\nb=c=d==\n",
		want: map[string]string{"a": "  spaced = and # not a comment \t", "b": "c=d=="}},
	{name: "crlf", in: "a=SECRET1\r\nb=SECRET2\r\n", want: map[string]string{"a": "SECRET1", "b": "SECRET2"}},
	{name: "utf-8 value", in: "a=pässwörd✓\n", want: map[string]string{"a": "pässwörd✓"}},
	{name: "bom", in: "\uFEFFa=SECRET1\n", want: map[string]string{"a": "SECRET1"}},
	{name: "no final newline", in: "a=1\nb=2", want: map[string]string{"a": "1", "b": "2"}},

	{name: "bare cr inside", in: "a=SECRET1\rb=SECRET2\n", wantLine: 1, wantReason: reasonControl},
	{name: "two crs", in: "a=SECRET1\r\r\n", wantLine: 1, wantReason: reasonControl},
	{name: "escape in value", in: "x=1\na=SEC\x1bRET\n", wantLine: 2, wantReason: reasonControl},
	{name: "nul", in: "a=SECRET1\nb=SEC\x00RET2\n", wantLine: 2, wantReason: reasonNUL},
	{name: "nul in comment", in: "# \x00\n", wantLine: 1, wantReason: reasonNUL},
	{name: "duplicate", in: "a=SECRET1\n# x\n\na=SECRET2\n", wantLine: 4, wantReason: reasonDuplicate},
	{name: "no equals", in: "a=1\nghp_SECRETLINE\n", wantLine: 2, wantReason: reasonNoEquals},
	{name: "empty name", in: "=SECRETVALUE\n", wantLine: 1, wantReason: reasonEmptyName},
	{name: "empty value", in: "a=\n", wantLine: 1, wantReason: reasonEmptyVal},
	{name: "empty value crlf", in: "a=\r\n", wantLine: 1, wantReason: reasonEmptyVal},
	{name: "space before name", in: " a=SECRETVALUE\n", wantLine: 1, wantReason: reasonBadName},
	{name: "space in name", in: "a b=SECRETVALUE\n", wantLine: 1, wantReason: reasonBadName},
	{name: "space before equals", in: "a =SECRETVALUE\n", wantLine: 1, wantReason: reasonBadName},
	{name: "slash in name", in: "a/b=SECRETVALUE\n", wantLine: 1, wantReason: reasonBadName},
	{name: "export", in: "export A=SECRETVALUE\n", wantLine: 1, wantReason: reasonBadName},
	{name: "non-ascii name", in: "pässword=SECRETVALUE\n", wantLine: 1, wantReason: reasonBadName},
	{name: "not utf-8 value", in: "a=1\nb=SECRET\xff\xfeVALUE\n", wantLine: 2, wantReason: reasonUTF8},
	{name: "not utf-8 name", in: "\xc3=SECRETVALUE\n", wantLine: 1, wantReason: reasonUTF8},
	{name: "huge", in: "a=" + strings.Repeat("S", MaxFileSize), wantLine: 0, wantReason: reasonTooLarge},
}

func TestParseFile(t *testing.T) {
	for _, tc := range fileCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFile([]byte(tc.in))
			if tc.want != nil {
				if err != nil {
					t.Fatalf("ParseFile: %v", err)
				}
				if !maps.Equal(got, tc.want) {
					t.Fatalf("ParseFile = %q, want %q", got, tc.want)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseFile = %q, %v; want a *ParseError", got, err)
			}
			if got != nil {
				t.Errorf("values returned with an error")
			}
			if pe.Line != tc.wantLine || pe.Reason != tc.wantReason {
				t.Errorf("error %q, want line %d: %s", err, tc.wantLine, tc.wantReason)
			}
			checkParseError(t, []byte(tc.in), err)
		})
	}
	// The largest file accepted.
	big := "a=" + strings.Repeat("S", MaxFileSize-3) + "\n"
	if v, err := ParseFile([]byte(big)); err != nil || len(v["a"]) != MaxFileSize-3 {
		t.Errorf("file of MaxFileSize bytes: %v", err)
	}
}

// reasons are every ParseError reason.
var reasons = []string{reasonTooLarge, reasonUTF8, reasonNUL, reasonNoEquals, reasonEmptyName,
	reasonBadName, reasonEmptyVal, reasonControl, reasonDuplicate}

// checkParseError checks that err is a ParseError whose message is the
// line number and a fixed reason, and holds no value of the input.
func checkParseError(t *testing.T, in []byte, err error) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ParseError", err, err)
	}
	if !slices.Contains(reasons, pe.Reason) {
		t.Fatalf("unknown reason %q", pe.Reason)
	}
	lines := bytes.Count(in, []byte("\n")) + 1
	if pe.Line < 0 || pe.Line > lines || pe.Line == 0 && pe.Reason != reasonTooLarge {
		t.Fatalf("line %d of %d", pe.Line, lines)
	}
	msg := err.Error()
	want := pe.Reason
	if pe.Line > 0 {
		want = "line " + strconv.Itoa(pe.Line) + ": " + pe.Reason
	}
	if msg != want {
		t.Fatalf("message %q, want %q", msg, want)
	}
	// The message being that fixed text is what keeps values out of it.
	// Stated directly too: whatever follows an '=' on a line looks like a
	// value, and none of it (4 bytes or more) may appear in the message,
	// unless some fixed message happens to contain it (a value "line").
	for line := range bytes.Lines(in) {
		_, v, ok := bytes.Cut(line, []byte("="))
		v = bytes.TrimRight(v, "\r\n")
		if !ok || len(v) < 4 || !strings.Contains(msg, string(v)) {
			continue
		}
		if !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains("line "+strconv.Itoa(pe.Line)+": "+r, string(v)) }) {
			t.Fatalf("message %q contains the value %q", msg, v)
		}
	}
}

func FuzzParseFile(f *testing.F) {
	for _, tc := range fileCases {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ParseFile(in)
		if err != nil {
			checkParseError(t, in, err)
			return
		}
		// Every name valid, every value non-empty and one line; written
		// back out, the file parses to the same.
		var out bytes.Buffer
		for _, name := range slices.Sorted(maps.Keys(got)) {
			v := got[name]
			if !credref.ValidName([]byte(name)) {
				t.Fatalf("invalid name %q accepted", name)
			}
			if v == "" || strings.ContainsAny(v, "\x00\r\n") {
				t.Fatalf("value %q accepted", v)
			}
			out.WriteString(name + "=" + v + "\n")
		}
		again, err := ParseFile(out.Bytes())
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if !maps.Equal(got, again) {
			t.Fatalf("round trip: %q, then %q", got, again)
		}
	})
}

// writeCredFile writes a credentials file with mode perm and returns its
// path.
func writeCredFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // not subject to the umask
		t.Fatal(err)
	}
	return path
}

const fileCanary = "CANARY-file-secret-31337"

func fileRef(name string) Ref { return Ref{Backend: BackendFile, Path: name} }

func TestFileFetch(t *testing.T) {
	ctx := context.Background()
	for _, perm := range []os.FileMode{0o600, 0o400} {
		path := writeCredFile(t, "# dev\ngithub="+fileCanary+"\nnpm=other\n", perm)
		f := NewFile(path)
		if v, err := f.Fetch(ctx, fileRef("github")); err != nil || v != fileCanary {
			t.Fatalf("mode %04o: Fetch = %q, %v", perm, v, err)
		}
		_, err := f.Fetch(ctx, fileRef("gitlab"))
		kcExpect(t, err, fileRef("gitlab"), ErrNotFound)
		kcNoLeak(t, err, fileCanary)
	}

	// Re-read on every fetch.
	path := writeCredFile(t, "github=one1\n", 0o600)
	f := NewFile(path)
	if v, err := f.Fetch(ctx, fileRef("github")); err != nil || v != "one1" {
		t.Fatalf("Fetch = %q, %v", v, err)
	}
	if err := os.WriteFile(path, []byte("github=two2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := f.Fetch(ctx, fileRef("github")); err != nil || v != "two2" {
		t.Fatalf("Fetch after a change = %q, %v", v, err)
	}

	// A missing file is not found, and says which.
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := NewFile(missing).Fetch(ctx, fileRef("github"))
	kcExpect(t, err, fileRef("github"), ErrNotFound)
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the file", err)
	}
	_, err = NewFile("").Fetch(ctx, fileRef("github"))
	kcExpect(t, err, fileRef("github"), ErrNotFound)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := NewFile(path).Fetch(cctx, fileRef("github")); !errors.Is(err, context.Canceled) {
		t.Errorf("Fetch with a canceled context: %v", err)
	}
}

func TestFileRefused(t *testing.T) {
	ctx := context.Background()
	ref := fileRef("github")
	content := "github=" + fileCanary + "\n"
	refused := func(t *testing.T, path string, want error, says ...string) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := NewFile(path).Fetch(ctx, ref)
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Fetch blocked")
		}
		kcExpect(t, err, ref, want)
		kcNoLeak(t, err, fileCanary)
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	}

	for _, perm := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o606, 0o610, 0o601, 0o700 | 0o020} {
		path := writeCredFile(t, content, perm)
		t.Run("mode "+strconv.FormatUint(uint64(perm), 8), func(t *testing.T) {
			refused(t, path, ErrDenied, "chmod 600 "+path)
		})
	}

	t.Run("symlink", func(t *testing.T) {
		target := writeCredFile(t, content, 0o600)
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		refused(t, link, ErrDenied, "symbolic link")
	})

	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		refused(t, fifo, ErrDenied, "not a regular file")
	})

	t.Run("directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "dir")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, ErrDenied, "not a regular file")
	})

	t.Run("too large", func(t *testing.T) {
		path := writeCredFile(t, content+"x="+strings.Repeat("v", MaxFileSize)+"\n", 0o600)
		refused(t, path, ErrDenied, "larger than")
	})

	t.Run("malformed", func(t *testing.T) {
		path := writeCredFile(t, content+"github "+fileCanary+"\n", 0o600)
		refused(t, path, ErrUnreachable, path, "line 2")
		var pe *ParseError
		_, err := NewFile(path).Fetch(ctx, ref)
		if !errors.As(err, &pe) || pe.Line != 2 {
			t.Errorf("error %v does not carry the ParseError", err)
		}
	})

	t.Run("other owner", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a file away")
		}
		path := writeCredFile(t, content, 0o600)
		if err := os.Chown(path, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		refused(t, path, ErrDenied, "owned by uid 4242")
	})
}
