package sandbox

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := DefaultRegistry()
	for _, name := range []string{"", "NATIVE", "docker", "bwrap2"} {
		if _, err := r.Lookup(name); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Lookup(%q) = %v, want ErrUnavailable", name, err)
		}
	}
	for name, confined := range map[string]bool{"native": false, "bwrap": true, "sandbox-exec": true} {
		s, err := r.Lookup(name)
		if err != nil || s.Name() != name || s.Confined() != confined {
			t.Fatalf("%s: %v %v", name, s, err)
		}
	}
}

func TestNativeAppliesEnvAndDir(t *testing.T) {
	cmd := exec.Command("/bin/true")
	p := Profile{Env: []string{"PATH=/bin"}, Dir: t.TempDir()}
	conf, err := (Native{}).Wrap(context.Background(), cmd, p)
	if err != nil || conf != nil {
		t.Fatal(conf, err)
	}
	if !slices.Equal(cmd.Env, p.Env) || cmd.Dir != p.Dir || cmd.Path != "/bin/true" {
		t.Fatalf("cmd %+v", cmd)
	}
}
