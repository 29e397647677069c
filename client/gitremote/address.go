package gitremote

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Repo is a repository as the git proxy names it: the upstream host (with
// a port when not the default) and the repository's path there.
type Repo struct {
	Host string // "github.com", "git.example.com:8443"
	Path string // "alice/app.git": segments joined by "/", no leading or trailing slash
}

// ProxyPath is the repository's path on the git proxy: /git/HOST/PATH.
func (r Repo) ProxyPath() string { return "/git/" + r.Host + "/" + r.Path }

// Limits of an address, far above any real repository's.
const (
	maxAddress = 1024
	maxSegment = 255
)

// ParseAddress reads what git hands the helper after "coily::":
// /git/HOST[:PORT]/PATH. Anything else is refused, so that the address
// cannot name another place than one repository on the proxy: an
// absolute URL (another host, another scheme), a second "::", user
// information, a query or fragment, a percent sign (an encoded separator
// or dot), a backslash, an empty, "." or ".." segment, a character
// outside letters, digits and "._~+-".
func ParseAddress(addr string) (Repo, error) {
	switch {
	case len(addr) > maxAddress:
		return Repo{}, fmt.Errorf("address longer than %d bytes", maxAddress)
	case strings.Contains(addr, "::"):
		return Repo{}, errors.New(`a second "::": want coily::/git/HOST/OWNER/REPO`)
	case strings.Contains(addr, "://") || !strings.HasPrefix(addr, "/"):
		return Repo{}, errors.New("not a path on the proxy: want coily::/git/HOST/OWNER/REPO (coily git setup writes it)")
	case !strings.HasPrefix(addr, "/git/"):
		return Repo{}, errors.New("not under /git/: want coily::/git/HOST/OWNER/REPO")
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(addr, "/git/"), "/")
	host, path, ok := strings.Cut(rest, "/")
	if !ok || path == "" {
		return Repo{}, errors.New("no repository path after the host: want coily::/git/HOST/OWNER/REPO")
	}
	if err := CheckHost(host); err != nil {
		return Repo{}, err
	}
	for _, seg := range strings.Split(path, "/") {
		if err := checkSegment(seg); err != nil {
			return Repo{}, err
		}
	}
	return Repo{Host: host, Path: path}, nil
}

// CheckHost accepts a host as the proxy's paths name it: a DNS name or
// IPv4 address in lower case, its labels of letters, digits and inner
// hyphens, and an optional port from 1 to 65535. Upper case is refused
// rather than folded: the proxy's policy matches hosts as written.
func CheckHost(hostport string) error {
	host, port, hasPort := strings.Cut(hostport, ":")
	if hasPort {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 || port[0] == '0' {
			return fmt.Errorf("host %q: bad port: want a number from 1 to 65535", hostport)
		}
	}
	if host == "" || len(host) > 253 {
		return fmt.Errorf("host %q: want a host name such as github.com", hostport)
	}
	for _, label := range strings.Split(host, ".") {
		if !hostLabel(label) {
			return fmt.Errorf("host %q: want a host name in lower case, such as github.com", hostport)
		}
	}
	return nil
}

func hostLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func checkSegment(seg string) error {
	switch {
	case seg == "":
		return errors.New(`an empty path segment ("//")`)
	case seg == "." || seg == "..":
		return fmt.Errorf("a %q path segment", seg)
	case len(seg) > maxSegment:
		return fmt.Errorf("a path segment longer than %d bytes", maxSegment)
	}
	for i := 0; i < len(seg); i++ {
		if !pathByte(seg[i]) {
			return fmt.Errorf("path segment %q: %s not allowed (letters, digits and ._~+- only)", seg, describe(seg[i]))
		}
	}
	return nil
}

func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._~+-", c) >= 0
}

// describe names a refused byte without printing it raw.
func describe(c byte) string {
	if c > ' ' && c < 0x7f {
		return fmt.Sprintf("%q", string(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
