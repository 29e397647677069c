package sandbox

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"testing"
)

func TestRegistryRefusesUnknownBackends(t *testing.T) {
	r := DefaultRegistry()
	for _, name := range []string{"bwrap", "sandbox-exec", "", "NATIVE"} {
		if _, err := r.Lookup(name); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Lookup(%q) = %v, want ErrUnavailable", name, err)
		}
	}
	s, err := r.Lookup("native")
	if err != nil || s.Name() != "native" || s.Confined() {
		t.Fatalf("native: %v %v", s, err)
	}
}

func TestNativeAppliesEnvAndDir(t *testing.T) {
	cmd := exec.Command("/bin/true")
	p := Profile{Env: []string{"PATH=/bin"}, Dir: t.TempDir()}
	if err := (Native{}).Wrap(context.Background(), cmd, p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cmd.Env, p.Env) || cmd.Dir != p.Dir || cmd.Path != "/bin/true" {
		t.Fatalf("cmd %+v", cmd)
	}
}
