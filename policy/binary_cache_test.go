package policy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestDigestCache checks that CheckBinary trusts the cached digest of an
// unchanged file, without reading it, and hashes again once the file
// changes.
func TestDigestCache(t *testing.T) {
	JudgeAsUID(t, NobodysUID) // the copy is the test's own, not root's
	bin := filepath.Join(t.TempDir(), "true")
	content, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, content, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := readerSHA256(bytes.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	r := &Rule{Name: "t", Binary: bin, Resolved: bin, SHA256: sum}
	if err := r.CheckBinary(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	id := identityOf(fi)
	if got, ok := digests.get(bin, id); !ok || got != sum {
		t.Fatalf("cache has %q, %v after a successful check; want %s", got, ok, sum)
	}

	// Plant another digest for the same unchanged file: a rule pinning it
	// passes, which shows the file was not read again.
	const planted = "1111111111111111111111111111111111111111111111111111111111111111"
	digests.put(bin, id, planted)
	other := &Rule{Name: "o", Binary: bin, Resolved: bin, SHA256: planted}
	if err := other.CheckBinary(); err != nil {
		t.Fatalf("CheckBinary() with a cached digest = %v; the cache was not used", err)
	}
	// The real pin no longer agrees with the cache, so it is hashed, found
	// right, and cached again.
	if err := r.CheckBinary(); err != nil {
		t.Fatalf("CheckBinary() = %v", err)
	}
	if got, _ := digests.get(bin, id); got != sum {
		t.Fatalf("cache has %q, want %s", got, sum)
	}

	// Changing the file changes its identity: the cache is not trusted.
	digests.put(bin, id, planted)
	if err := os.WriteFile(bin, append(content, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := other.CheckBinary(); !errors.Is(err, ErrDigest) {
		t.Fatalf("CheckBinary() after a change = %v, want ErrDigest", err)
	}
	fi, err = os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := digests.get(bin, identityOf(fi)); ok {
		t.Errorf("a mismatching digest was cached: %s", got)
	}
}

// TestIdentity checks that the file identity covers what changes when a
// file is replaced or rewritten.
func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("same"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat := func(p string) fileIdentity {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return identityOf(fi)
	}
	ia, ib := stat(a), stat(b)
	if ia == ib {
		t.Errorf("two files share identity %+v", ia)
	}
	if ia.ino == 0 {
		t.Errorf("identity has no inode: %+v", ia)
	}
	if stat(a) != ia {
		t.Error("identity of an unchanged file changed")
	}
	if err := os.Rename(b, a); err != nil {
		t.Fatal(err)
	}
	if stat(a) == ia {
		t.Error("identity survived replacing the file by rename")
	}
}
