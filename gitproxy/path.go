package gitproxy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Service is one of git's two smart HTTP services.
type Service string

// The services.
const (
	UploadPack  Service = "git-upload-pack"
	ReceivePack Service = "git-receive-pack"
)

// Target is what one request's path asks for.
type Target struct {
	// Host is the upstream's DNS name in lower case, Port its https port.
	Host string
	Port int
	// Repo is the repository path, as the request named it (with or
	// without ".git"), without slashes at either end.
	Repo    string
	Service Service
	// Refs is true for the ref advertisement (GET info/refs?service=…),
	// false for the service's POST.
	Refs bool
}

// Bounds of a request's path.
const (
	maxPath     = 1024
	maxSegments = 16
)

var (
	hostLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// repoSegment is what one segment of a repository path may hold.
	repoSegment = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
)

// ParsePath reads a request's escaped path and query, as the client sent
// them (r.URL.EscapedPath(), r.URL.RawQuery), and the method:
// /git/<host>[:<port>]/<repo…>/info/refs?service=<svc> (GET) or
// /git/<host>[:<port>]/<repo…>/<svc> (POST). Anything else is an error:
// an escape of any kind (%2f, %2e), a backslash, a "." or ".." segment,
// an empty segment, a host that is no DNS name, another service.
func ParsePath(method, escapedPath, rawQuery string) (Target, error) {
	var t Target
	if len(escapedPath) > maxPath {
		return t, fmt.Errorf("path longer than %d bytes", maxPath)
	}
	if strings.ContainsAny(escapedPath, "%\\") {
		return t, fmt.Errorf("path holds an escape or a backslash")
	}
	rest, ok := strings.CutPrefix(escapedPath, "/git/")
	if !ok {
		return t, fmt.Errorf("not a /git/ path")
	}
	segs := strings.Split(rest, "/")
	if len(segs) < 3 || len(segs) > maxSegments {
		return t, fmt.Errorf("want /git/HOST/REPOSITORY/info/refs or /git/HOST/REPOSITORY/SERVICE")
	}
	host, port, err := parseHost(segs[0])
	if err != nil {
		return t, err
	}
	t.Host, t.Port = host, port
	var repo []string
	switch {
	case method == "GET" && len(segs) >= 4 && segs[len(segs)-2] == "info" && segs[len(segs)-1] == "refs":
		t.Refs, repo = true, segs[1:len(segs)-2]
		svc, err := serviceQuery(rawQuery)
		if err != nil {
			return t, err
		}
		t.Service = svc
	case method == "POST" && (segs[len(segs)-1] == string(UploadPack) || segs[len(segs)-1] == string(ReceivePack)):
		if rawQuery != "" {
			return t, fmt.Errorf("a service POST takes no query")
		}
		t.Service, repo = Service(segs[len(segs)-1]), segs[1:len(segs)-1]
	default:
		return t, fmt.Errorf("only GET info/refs?service=git-upload-pack|git-receive-pack and POST git-upload-pack|git-receive-pack are served")
	}
	if len(repo) == 0 {
		return t, fmt.Errorf("no repository path")
	}
	for _, s := range repo {
		if !repoSegment.MatchString(s) || s == "." || s == ".." || strings.Trim(s, ".") == "" {
			return t, fmt.Errorf("repository path segment %q is not a plain name", s)
		}
	}
	t.Repo = strings.Join(repo, "/")
	return t, nil
}

// serviceQuery reads info/refs' query: exactly service=<svc>.
func serviceQuery(q string) (Service, error) {
	v, ok := strings.CutPrefix(q, "service=")
	if !ok || (v != string(UploadPack) && v != string(ReceivePack)) {
		return "", fmt.Errorf("info/refs needs ?service=git-upload-pack or ?service=git-receive-pack")
	}
	return Service(v), nil
}

// parseHost reads host[:port]: a lower-case DNS name (no IP literal) and
// a port, 443 when none.
func parseHost(s string) (string, int, error) {
	host, p, hasPort := strings.Cut(s, ":")
	port := 443
	if hasPort {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return "", 0, fmt.Errorf("host %q: bad port", s)
		}
		port = n
	}
	if host == "" || len(host) > 253 {
		return "", 0, fmt.Errorf("host %q is not a DNS name", s)
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if !hostLabel.MatchString(l) {
			return "", 0, fmt.Errorf("host %q is not a lower-case DNS name", s)
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", 0, fmt.Errorf("host %q: IP literals are not upstreams", s)
	}
	return host, port, nil
}
