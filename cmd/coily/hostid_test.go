package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The host id is made once and read back the same at every start (what
// lets a restart take over its own claim); a file that is not one id
// refuses the start instead of being replaced.
func TestHostID(t *testing.T) {
	dir := t.TempDir()
	id, err := hostID(dir)
	if err != nil || !validHostID(id) {
		t.Fatalf("new id %q, %v", id, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, hostIDFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("id file: %v %v", fi, err)
	}
	if again, err := hostID(dir); err != nil || again != id {
		t.Fatalf("read back %q, %v; want %q", again, err, id)
	}
	for name, content := range map[string]string{
		"empty":      "",
		"short":      "abc",
		"upper":      "0123456789ABCDEF0123456789ABCDEF",
		"not hex":    "0123456789abcdef0123456789abcdeg",
		"two ids":    "0123456789abcdef0123456789abcdef\n0123456789abcdef0123456789abcdef",
		"long":       string(make([]byte, 4096)),
		"path-ish":   "../../../../../../../../etc/passwd",
		"nul inside": "0123456789abcdef\x000123456789abcde",
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, hostIDFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if id, err := hostID(d); err == nil {
				t.Fatalf("hostile id file read as %q", id)
			}
		})
	}
}
