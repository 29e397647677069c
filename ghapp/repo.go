package ghapp

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Repository names one repository: OWNER/NAME.
type Repository struct {
	Owner, Name string
}

// String is "OWNER/NAME".
func (r Repository) String() string { return r.Owner + "/" + r.Name }

// Equal compares two repositories as GitHub does: without regard to case.
func (r Repository) Equal(o Repository) bool {
	return strings.EqualFold(r.Owner, o.Owner) && strings.EqualFold(r.Name, o.Name)
}

// Bounds of GitHub's names: a login is at most 39 characters, a
// repository name at most 100.
const (
	maxOwner = 39
	maxName  = 100
)

// ParseRepository reads a repository as gh's --repo takes it: OWNER/NAME,
// or HOST/OWNER/NAME where HOST (with its port, if any) is host, the web
// host of the App's API (WebHost); the host is compared without regard to
// case. Anything else is refused: a URL, another host, a path of more
// parts, names outside GitHub's grammar (OWNER: letters, digits and
// single inner hyphens, at most 39; NAME: letters, digits, '.', '_', '-',
// at most 100, not "." or "..").
func ParseRepository(s, host string) (Repository, error) {
	if len(s) > len(host)+maxOwner+maxName+2 {
		return Repository{}, errors.New("repository is too long")
	}
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 2:
	case 3:
		if host == "" || !strings.EqualFold(parts[0], host) {
			return Repository{}, fmt.Errorf("repository %q: want OWNER/NAME, or HOST/OWNER/NAME on the App's host %s", s, host)
		}
		parts = parts[1:]
	default:
		return Repository{}, fmt.Errorf("repository %q: want OWNER/NAME or %s/OWNER/NAME", s, host)
	}
	r := Repository{Owner: parts[0], Name: parts[1]}
	if err := checkOwner(r.Owner); err != nil {
		return Repository{}, fmt.Errorf("repository %q: %w", s, err)
	}
	if err := checkName(r.Name); err != nil {
		return Repository{}, fmt.Errorf("repository %q: %w", s, err)
	}
	return r, nil
}

func checkOwner(o string) error {
	if o == "" || len(o) > maxOwner || o[0] == '-' || o[len(o)-1] == '-' || strings.Contains(o, "--") {
		return errors.New("owner must be 1 to 39 letters, digits or single inner hyphens")
	}
	for _, c := range []byte(o) {
		if !alnum(c) && c != '-' {
			return errors.New("owner must be 1 to 39 letters, digits or single inner hyphens")
		}
	}
	return nil
}

func checkName(n string) error {
	if n == "" || len(n) > maxName || n == "." || n == ".." {
		return errors.New("name must be 1 to 100 letters, digits, '.', '_' or '-' (not . or ..)")
	}
	for _, c := range []byte(n) {
		if !alnum(c) && c != '.' && c != '_' && c != '-' {
			return errors.New("name must be 1 to 100 letters, digits, '.', '_' or '-' (not . or ..)")
		}
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// ParseAPIURL checks the base URL of a GitHub API: https, a host, no
// user, query or fragment; a path such as /api/v3 (GitHub Enterprise
// Server) or none (api.github.com). The result has no trailing slash.
func ParseAPIURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("api_url %q is not a URL", s)
	case u.Scheme != "https":
		return nil, fmt.Errorf("api_url %q: want https://", s)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("api_url %q has no host", s)
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Errorf("api_url %q: no user, query or fragment", s)
	case strings.Contains(u.Path, "..") || strings.Contains(u.Path, "//") || u.RawPath != "":
		return nil, fmt.Errorf("api_url %q: path must be plain (such as /api/v3)", s)
	}
	if p := u.Port(); p != "" && !validPort(p) {
		return nil, fmt.Errorf("api_url %q: bad port", s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.Host = strings.ToLower(strings.TrimSuffix(u.Host, ":443")) // gh names hosts without https' port
	return u, nil
}

func validPort(p string) bool {
	n := 0
	for _, c := range []byte(p) {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
		if n > 65535 {
			return false
		}
	}
	return n > 0 && p[0] != '0'
}

// WebHost is the host gh names repositories by for the API at u:
// api.github.com serves github.com, api.X (without a path: GitHub
// Enterprise Cloud with data residency, X.ghe.com) serves X, and a GitHub
// Enterprise Server (https://HOST/api/v3) is its own host.
func WebHost(u *url.URL) string {
	if rest, ok := strings.CutPrefix(u.Host, "api."); ok && u.Path == "" {
		return rest
	}
	return u.Host
}
