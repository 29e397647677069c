package sandbox

import (
	"strings"
	"testing"
)

// sandbox check names the sysctl in a host's way and its fix.
func TestUsernsCause(t *testing.T) {
	for _, tc := range []struct {
		proc map[string]string
		want string
	}{
		{map[string]string{"/proc/sys/user/max_user_namespaces": "0"}, "user.max_user_namespaces=15000"},
		{map[string]string{"/proc/sys/kernel/unprivileged_userns_clone": "0"}, "kernel.unprivileged_userns_clone=1"},
		{map[string]string{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}, "deploy/apparmor/coily"},
		{map[string]string{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "0", "/proc/sys/kernel/unprivileged_userns_clone": "1"}, UsernsHint},
		{nil, UsernsHint},
	} {
		got := usernsCauseFrom(func(p string) string { return tc.proc[p] })
		if !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want %q", tc.proc, got, tc.want)
		}
	}
}
