package sandbox

import (
	"maps"
	"os"
	"slices"
	"strings"
)

// GitAllowProtocol is the git transports a sandboxed command may use.
const GitAllowProtocol = "https:ssh:git:http"

// DefaultPath is the PATH every sandboxed command gets.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Environ is the environment of a sandboxed command, rebuilt from an
// allowlist (docs/sandbox.md): DefaultPath, HOME and TMPDIR set to home, this
// process's locale, time zone and terminal type (LANG, LC_*, TZ, TERM;
// LANG defaults to C.UTF-8), then passed, the variables the caller may
// pass (the policy checked their names). Nothing else of this process's
// environment passes, so no socket-bearing variable (SSH_AUTH_SOCK,
// DBUS_*, DOCKER_HOST, DISPLAY, WAYLAND_DISPLAY, XAUTHORITY, KUBECONFIG…)
// ever reaches a command.
func Environ(home string, passed map[string]string) []string {
	env := map[string]string{"LANG": "C.UTF-8"}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "LANG" || k == "TZ" || k == "TERM" || strings.HasPrefix(k, "LC_") {
			env[k] = v
		}
	}
	env["PATH"] = DefaultPath
	env["HOME"], env["TMPDIR"] = home, home
	// git (and every tool that runs it: npm, cargo, pip) may use only
	// network transports: a local repository would run its own hooks in
	// the command's sandbox, a remote helper (ext::, fd::, TRANSPORT::)
	// a program of the caller's choosing.
	env["GIT_ALLOW_PROTOCOL"] = GitAllowProtocol
	maps.Copy(env, passed)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
