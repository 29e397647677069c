package cabundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/internal/standin"
)

func TestPool(t *testing.T) {
	ca := standin.TLS(t) // a real CA certificate, in a file of its own
	pool, err := Pool(ca.CertFile)
	if err != nil || !pool.Equal(ca.Pool) {
		t.Fatalf("Pool(a CA) = %v, %v; want a pool holding exactly it", pool, err)
	}
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ name, path, err string }{
		{"not DER inside", write("bad-der.pem", testCA), "no usable certificate"},
		{"key", write("key.pem", testKey), `type "PRIVATE KEY"`},
		{"missing", filepath.Join(dir, "nope.pem"), "no such file"},
	} {
		if _, err := Pool(c.path); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: Pool = %v, want an error with %q", c.name, err, c.err)
		}
	}
}
