package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var goodHash = strings.Repeat("0123456789abcdef", 4)

// The recorded audit head survives a reopen; none recorded is ErrNotFound.
func TestAuditHeadRoundTrip(t *testing.T) {
	d, path := openTemp(t)
	if _, err := d.AuditHead(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fresh AuditHead: %v", err)
	}
	want := AuditHead{Seq: 42, Hash: goodHash, At: time.Date(2026, 10, 14, 12, 0, 0, 0, time.UTC)}
	if err := d.SetAuditHead(want); err != nil {
		t.Fatal(err)
	}
	d = reopen(t, d, path)
	got, err := d.AuditHead()
	if err != nil || got.Seq != want.Seq || got.Hash != want.Hash || !got.At.Equal(want.At) {
		t.Fatalf("AuditHead = %+v, %v; want %+v", got, err, want)
	}
}

// A head that does not read as one is ErrCorrupt, never a zero head (which
// would check nothing), and SetAuditHead refuses to write one.
func TestAuditHeadCorrupt(t *testing.T) {
	for name, raw := range auditHeadHostile {
		t.Run(name, func(t *testing.T) {
			d, _ := openTemp(t)
			putRaw(t, d, bucketState, keyAuditHead, []byte(raw))
			if h, err := d.AuditHead(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("AuditHead = %+v, %v; want ErrCorrupt", h, err)
			}
		})
	}
	d, _ := openTemp(t)
	for _, h := range []AuditHead{{}, {Seq: 1}, {Hash: goodHash}, {Seq: 1, Hash: strings.ToUpper(goodHash)}, {Seq: 1, Hash: goodHash[1:]}} {
		if err := d.SetAuditHead(h); !errors.Is(err, ErrCorrupt) {
			t.Errorf("SetAuditHead(%+v) = %v", h, err)
		}
	}
	if _, err := d.AuditHead(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused head was written: %v", err)
	}
}

var auditHeadHostile = map[string]string{
	"null":          `null`,
	"garbage":       `{"seq":`,
	"seq zero":      `{"seq":0,"hash":"` + goodHash + `"}`,
	"no hash":       `{"seq":3}`,
	"short hash":    `{"seq":3,"hash":"abc"}`,
	"capital hash":  `{"seq":3,"hash":"` + strings.ToUpper(goodHash) + `"}`,
	"negative seq":  `{"seq":-3,"hash":"` + goodHash + `"}`,
	"seq as string": `{"seq":"3","hash":"` + goodHash + `"}`,
	"a list":        `[3]`,
	"empty":         ``,
}

// FuzzAuditHead stores any bytes as the head: AuditHead reads a head that
// checks something, or fails; it never panics.
func FuzzAuditHead(f *testing.F) {
	for _, raw := range auditHeadHostile {
		f.Add([]byte(raw))
	}
	f.Add([]byte(`{"seq":7,"hash":"` + goodHash + `","at":"2026-10-14T12:00:00Z"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(dir, "coily.db")
		os.Remove(path)
		d, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		putRaw(t, d, bucketState, keyAuditHead, raw)
		h, err := d.AuditHead()
		if err == nil && (h.Seq == 0 || h.valid() != nil) {
			t.Fatalf("AuditHead read %q as %+v", raw, h)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("AuditHead(%q) = %v", raw, err)
		}
	})
}

// OpenReadOnly reads beside another reader, changes nothing, waits only
// so long for a writer, and never creates a file.
func TestOpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "coily.db")
	if _, err := OpenReadOnly(path, time.Second); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenReadOnly of a missing file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("OpenReadOnly created the file")
	}
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetAuditHead(AuditHead{Seq: 9, Hash: goodHash}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := OpenReadOnly(path, 100*time.Millisecond); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("OpenReadOnly beside a writer: %v after %s", err, time.Since(start))
	}
	w.Close()
	before, _ := os.ReadFile(path)
	r1, err := OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	defer r2.Close()
	if h, err := r2.AuditHead(); err != nil || h.Seq != 9 {
		t.Fatalf("AuditHead read only: %+v %v", h, err)
	}
	if err := r1.SetAuditHead(AuditHead{Seq: 10, Hash: goodHash}); err == nil {
		t.Fatal("a read-only state file took a write")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("reading changed the file")
	}
}
