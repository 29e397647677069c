package toolbin

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestRootHoldsTheModule(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !declares(string(b), Module) {
		t.Fatalf("%s/go.mod: %v %.80q", root, err, b)
	}
}

func TestFind(t *testing.T) {
	t.Setenv("TOOLBIN_TEST", "/somewhere/else")
	if got := Find("TOOLBIN_TEST", "nothing"); got != "/somewhere/else" {
		t.Errorf("with the variable set: %q", got)
	}
	t.Setenv("TOOLBIN_TEST", "")
	if got := Find("TOOLBIN_TEST", "no-such-program"); got != "" {
		t.Errorf("a program not built: %q", got)
	}
	if got := Find("TOOLBIN_TEST"); got != "" {
		t.Errorf("bin/ itself, a directory: %q", got)
	}
}

func TestDeclares(t *testing.T) {
	for _, tc := range []struct {
		gomod string
		want  bool
	}{
		{"module coily.dev/coily\n\ngo 1.26\n", true},
		{"// x\nmodule \"coily.dev/coily\"\n", true},
		{"module coily.dev/coily/integration/vault\n", false},
		{"require coily.dev/coily v0.0.0\n", false},
		{"// module coily.dev/coily\n", false},
		{"", false},
	} {
		if got := declares(tc.gomod, "coily.dev/coily"); got != tc.want {
			t.Errorf("declares(%q) = %v", tc.gomod, got)
		}
	}
}

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want three distinct ones", ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free again: %v", p, err)
		}
		ln.Close()
	}
}
