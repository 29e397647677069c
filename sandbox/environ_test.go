package sandbox

import (
	"slices"
	"strings"
	"testing"
)

func TestEnviron(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/bus")
	t.Setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
	t.Setenv("PATH", "/home/u/bin:/usr/bin")
	t.Setenv("LC_ALL", "de_DE.UTF-8")
	t.Setenv("TZ", "UTC")
	env := Environ("/h", map[string]string{"GH_PROMPT_DISABLED": "1"})
	for _, want := range []string{"PATH=" + DefaultPath, "HOME=/h", "TMPDIR=/h", "LC_ALL=de_DE.UTF-8", "TZ=UTC",
		"GH_PROMPT_DISABLED=1"} {
		if !slices.Contains(env, want) {
			t.Errorf("missing %s in %v", want, env)
		}
	}
	for _, kv := range env {
		for _, never := range []string{"SSH_AUTH_SOCK", "DBUS_", "DOCKER_HOST", "/home/u/bin"} {
			if strings.Contains(kv, never) {
				t.Errorf("%s passed: %s", never, kv)
			}
		}
	}
	if !slices.IsSorted(env) {
		t.Errorf("not sorted: %v", env)
	}
}
