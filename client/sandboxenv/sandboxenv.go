// Package sandboxenv says, from the environment alone, whether this
// process runs in a network-less sandbox that reaches coily through a
// shared folder. Both clients ask it: the general one (package client)
// and coily-exec, which must link next to nothing.
package sandboxenv

import (
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvRuntime, set to 1, says this process runs in a network-less sandbox
// that reaches coily through a shared folder; set to 0, that it does not
// (whatever the heuristics say).
const EnvRuntime = "SANDBOX_RUNTIME"

// Detect reports whether this process runs in a network-less
// sandbox (a Cowork VM) that reaches coily through a shared folder, from
// its environment alone: it neither touches the filesystem nor the
// network.
//
// SANDBOX_RUNTIME=1 says yes and SANDBOX_RUNTIME=0 says no. Otherwise the
// answer is yes only when at least two of these three signals hold:
//
//   - home: HOME is a directory under /sessions/ (Cowork keeps each
//     session's home there);
//   - user: LOGNAME is three lower-case words joined by dashes, like
//     "brave-quiet-otter" (Cowork's generated user names);
//   - proxy: HTTP_PROXY and HTTPS_PROXY (each, or its lower-case spelling
//     when the upper-case one is unset) are both http:// or https:// URLs
//     whose host is loopback (localhost, 127.0.0.0/8 or ::1) and that name
//     a port: the host's proxy forwarded into a VM that has no other way
//     out.
//
// One signal is not enough because each is common on its own: a
// corporate or debugging proxy on localhost (and coily's own "proxied"
// sandboxes) sets the proxy signal, and a dashed user name or a /sessions
// directory can be anyone's. A false yes sends `coily exec` to a shared
// folder that is not there instead of to the server it could reach, while
// a false no costs one SANDBOX_RUNTIME=1, so the rule errs towards no.
func Detect(getenv func(string) string) bool {
	switch getenv(EnvRuntime) {
	case "1":
		return true
	case "0":
		return false
	}
	signals := 0
	for _, ok := range []bool{sessionHome(getenv("HOME")), threeWords(getenv("LOGNAME")), loopbackProxies(getenv)} {
		if ok {
			signals++
		}
	}
	return signals >= 2
}

// sessionHome reports whether home is a directory under /sessions/.
func sessionHome(home string) bool {
	rest, ok := strings.CutPrefix(filepath.Clean(home), "/sessions/")
	return ok && rest != ""
}

// threeWords reports whether name is three lower-case words joined by
// dashes (brave-quiet-otter): the generated user names of a Cowork
// sandbox.
func threeWords(name string) bool {
	words := strings.Split(name, "-")
	if len(words) != 3 {
		return false
	}
	for _, w := range words {
		if w == "" || strings.ContainsFunc(w, func(r rune) bool { return r < 'a' || r > 'z' }) {
			return false
		}
	}
	return true
}

// loopbackProxies reports whether both HTTP_PROXY and HTTPS_PROXY point at
// a port on loopback.
func loopbackProxies(getenv func(string) string) bool {
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY"} {
		v := getenv(name)
		if v == "" {
			v = getenv(strings.ToLower(name))
		}
		if !loopbackProxy(v) {
			return false
		}
	}
	return true
}

func loopbackProxy(v string) bool {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback() // as net.ParseIP read it: no zone
}
