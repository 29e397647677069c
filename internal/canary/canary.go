// Package canary checks, in tests, that secrets leave no trace: not in
// any process's argv while a command runs (/proc/*/cmdline), not in the
// text a test collected (responses, outputs, server logs, the audit log),
// not in any file under the directories a run leaves behind (the
// workspace, the server's state and scratch directories).
//
// A secret is looked for in the forms it could leak in: as is, in base64
// (standard and URL alphabets, padded or not), in hex (either case), in a
// URL's query (escaped), in
// base32 (either case, padded or not), and, for a PEM key, each line of
// its body; and, as a name a command made would carry it, split by '.',
// '-' or '_' and in any case (the text and the forms folded: lower case,
// those separators dropped). Failures name the secret and the place, never
// the value.
package canary

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// minLen is the shortest value worth looking for: shorter ones match by
// chance.
const minLen = 8

// Canary holds the secrets of one test.
type Canary struct {
	t       testing.TB
	mu      sync.Mutex
	secrets []secret
}

type secret struct {
	name   string
	forms  [][]byte
	folded [][]byte // forms folded (fold), those at least minLen long
}

// New returns a canary for t.
func New(t testing.TB) *Canary { return &Canary{t: t} }

// Add looks for value, under name, from now on. A value shorter than 8
// bytes fails the test: it is no canary.
func (c *Canary) Add(name string, value []byte) {
	c.t.Helper()
	if len(value) < minLen {
		c.t.Fatalf("canary: %s is %d bytes: too short to look for", name, len(value))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := secret{name: name, forms: forms(value)}
	for _, f := range s.forms {
		if ff := fold(f); len(ff) >= minLen {
			s.folded = append(s.folded, ff)
		}
	}
	c.secrets = append(c.secrets, s)
}

// AddString is Add of a string.
func (c *Canary) AddString(name, value string) {
	c.t.Helper()
	c.Add(name, []byte(value))
}

// forms are the byte strings value could leak as.
func forms(v []byte) [][]byte {
	out := [][]byte{v}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		out = append(out, []byte(enc.EncodeToString(v)))
	}
	h := hex.EncodeToString(v)
	out = append(out, []byte(h), []byte(strings.ToUpper(h)), []byte(url.QueryEscape(string(v))))
	for _, enc := range []*base32.Encoding{base32.StdEncoding, base32.StdEncoding.WithPadding(base32.NoPadding)} {
		b := enc.EncodeToString(v)
		out = append(out, []byte(b), []byte(strings.ToLower(b)))
	}
	if bytes.Contains(v, []byte("-----BEGIN ")) {
		for _, line := range bytes.Split(v, []byte("\n")) {
			line = bytes.TrimSpace(line)
			if len(line) >= 20 && !bytes.HasPrefix(line, []byte("-----")) {
				out = append(out, line)
			}
		}
	}
	slices.SortFunc(out, func(a, b []byte) int { return bytes.Compare(a, b) })
	return slices.CompactFunc(out, bytes.Equal)
}

// fold lowers the case of b and drops '.', '-' and '_': a secret spelled
// into a host name's labels, or with its case changed, folds to its form.
func fold(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		switch {
		case c == '.' || c == '-' || c == '_':
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, c)
		}
	}
	return out
}

// found names the secret data holds a form of, "" when none.
func (c *Canary) found(data []byte) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var folded []byte
	for _, s := range c.secrets {
		for _, f := range s.forms {
			if bytes.Contains(data, f) {
				return s.name
			}
		}
		if folded == nil {
			folded = fold(data)
		}
		for _, f := range s.folded {
			if bytes.Contains(folded, f) {
				return s.name + " (in a name: split or with its case changed)"
			}
		}
	}
	return ""
}

// CheckText fails the test when any of texts holds a secret; where says
// what they are (the gRPC responses, the server's log, …).
func (c *Canary) CheckText(where string, texts ...string) {
	c.t.Helper()
	for i, s := range texts {
		if name := c.found([]byte(s)); name != "" {
			c.t.Errorf("canary: %s (text %d of %d) holds %s", where, i+1, len(texts), name)
		}
	}
}

// CheckFiles fails the test when a regular file under any of roots holds
// a secret. A root that does not exist is fine (nothing was left there).
func (c *Canary) CheckFiles(roots ...string) {
	c.t.Helper()
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				c.t.Errorf("canary: %s: %v", path, err)
				return nil
			}
			if !d.Type().IsRegular() {
				return nil // a socket, a link: nothing of its own to read
			}
			data, err := os.ReadFile(path)
			if err != nil {
				c.t.Errorf("canary: read %s: %v", path, err)
				return nil
			}
			if name := c.found(data); name != "" {
				c.t.Errorf("canary: file %s holds %s", path, name)
			}
			return nil
		})
		if err != nil {
			c.t.Errorf("canary: walk %s: %v", root, err)
		}
	}
}

// ArgvWatch samples the command lines of every process of the host
// while a run goes on.
type ArgvWatch struct {
	c     *Canary
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	seen  map[string]bool // each distinct command line, NULs kept
	scans int
}

// WatchArgv starts sampling /proc/*/cmdline (every few milliseconds, a
// sample, not a synchronisation) until Stop.
func (c *Canary) WatchArgv() *ArgvWatch {
	w := &ArgvWatch{c: c, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	go w.run()
	return w
}

func (w *ArgvWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(3 * time.Millisecond)
	defer tick.Stop()
	for {
		w.scan()
		select {
		case <-w.stop:
			w.scan()
			return
		case <-tick.C:
		}
	}
}

func (w *ArgvWatch) scan() {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	lines := make([]string, 0, len(paths))
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil && len(data) > 0 {
			lines = append(lines, string(data))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range lines {
		w.seen[l] = true
	}
	w.scans++
}

// Stop ends the sampling and fails the test when a command line seen held
// a secret (any secret added by now: one minted during the run counts).
// saw reports whether some command line seen held each of markers (its
// words joined by NUL, as in /proc): a test asserts that the sampling
// overlapped the run.
func (w *ArgvWatch) Stop(markers ...string) {
	w.c.t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.scans < 2 {
		w.c.t.Errorf("canary: argv sampled %d times", w.scans)
	}
	for l := range w.seen {
		if name := w.c.found([]byte(l)); name != "" {
			argv0, _, _ := strings.Cut(l, "\x00")
			w.c.t.Errorf("canary: the command line of a process (%s) held %s", argv0, name)
		}
	}
	for _, m := range markers {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(w.seen)), func(l string) bool { return strings.Contains(l, m) }) {
			w.c.t.Errorf("canary: no command line seen held %q: the sampling missed the run", strings.ReplaceAll(m, "\x00", " "))
		}
	}
}
