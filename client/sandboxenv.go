package client

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"coily.dev/coily/descriptor"
)

// Environment variables of the filesystem transport.
const (
	// EnvSandboxRuntime, set to 1, says this process runs in a network-less
	// sandbox that reaches coily through a shared folder; set to 0, that it
	// does not (whatever the heuristics say).
	EnvSandboxRuntime = "SANDBOX_RUNTIME"
	// EnvMount names the shared folder (the directory holding .coily/).
	EnvMount = "COILY_MOUNT"
	// EnvKeyFile names the sandbox's key file.
	EnvKeyFile = "COILY_KEY_FILE"
)

// threeWordsRE is the form of the generated user names of a Cowork
// sandbox: three lower-case words joined by dashes (brave-quiet-otter).
var threeWordsRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z]+-[a-z]+-[a-z]+$`) })

// DetectSandbox reports whether this process runs in a network-less
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
func DetectSandbox(getenv func(string) string) bool {
	switch getenv(EnvSandboxRuntime) {
	case "1":
		return true
	case "0":
		return false
	}
	signals := 0
	for _, ok := range []bool{sessionHome(getenv("HOME")), threeWordsRE().MatchString(getenv("LOGNAME")), loopbackProxies(getenv)} {
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
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// FindMount returns the shared folder: COILY_MOUNT when set, else the
// nearest of cwd and its parents that holds .coily/requests. The folder
// returned is absolute and holds .coily/requests.
func FindMount(getenv func(string) string, cwd string) (string, error) {
	if m := getenv(EnvMount); m != "" {
		abs, err := filepath.Abs(m)
		if err != nil {
			return "", fmt.Errorf("client: %s: %w", EnvMount, err)
		}
		if !isDir(descriptor.Path(abs, descriptor.RequestsDir, "")) {
			return "", fmt.Errorf("client: %s=%s has no %s directory; set it to the shared folder coily's bridge serves",
				EnvMount, m, filepath.Join(descriptor.DirName, descriptor.RequestsDir))
		}
		return abs, nil
	}
	dir, err := filepath.Abs(cwd)
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	for {
		if isDir(descriptor.Path(dir, descriptor.RequestsDir, "")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("client: no %s directory in %s or any parent; set %s to the shared folder coily's bridge serves",
		filepath.Join(descriptor.DirName, descriptor.RequestsDir), cwd, EnvMount)
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// KeyPath returns the sandbox's key file: COILY_KEY_FILE when set, else
// $HOME/.coily/key. With neither set it fails, saying to set
// COILY_KEY_FILE.
func KeyPath(getenv func(string) string) (string, error) {
	if p := getenv(EnvKeyFile); p != "" {
		return p, nil
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".coily", "key"), nil
	}
	return "", errors.New("client: no HOME to find .coily/key in; set " + EnvKeyFile)
}
