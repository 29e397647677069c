package gitcred

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxRequest bounds what the helper reads from git.
const MaxRequest = 64 << 10

// Request is the part of git's credential request the helper looks at.
type Request struct {
	Protocol string
	// Host is lower case; Port is DefaultPort when the request names none.
	Host string
	Port int
	// Username is the user name git already has ("" when none).
	Username string
}

// ErrRequest reports a request the helper does not answer.
var ErrRequest = errors.New("git credential request refused")

// ParseRequest reads git's request: "key=value" lines up to a blank line
// or the end, at most MaxRequest bytes. It refuses a NUL, a line without
// "=", an empty key, a key given twice (but keys ending in "[]", which git
// repeats), a url (git gives helpers its parts, never a url), and a
// request without protocol or host or whose host is not a DNS name with
// an optional port. Other keys are ignored.
func ParseRequest(r io.Reader) (Request, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxRequest+1))
	switch {
	case err != nil:
		return Request{}, fmt.Errorf("%w: read: %v", ErrRequest, err)
	case len(data) > MaxRequest:
		return Request{}, fmt.Errorf("%w: longer than %d bytes", ErrRequest, MaxRequest)
	case bytes.IndexByte(data, 0) >= 0:
		return Request{}, fmt.Errorf("%w: it holds a NUL", ErrRequest)
	}
	seen := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			break
		}
		key, value, ok := strings.Cut(line, "=")
		switch {
		case !ok || key == "":
			return Request{}, fmt.Errorf("%w: a line is not key=value", ErrRequest)
		case key == "url":
			return Request{}, fmt.Errorf("%w: it carries a url", ErrRequest)
		case strings.HasSuffix(key, "[]"):
			continue
		}
		if _, dup := seen[key]; dup {
			return Request{}, fmt.Errorf("%w: key %.64q given twice", ErrRequest, key)
		}
		seen[key] = value
	}
	req := Request{Protocol: seen["protocol"], Username: seen["username"]}
	if req.Protocol == "" {
		return Request{}, fmt.Errorf("%w: no protocol", ErrRequest)
	}
	rawHost, ok := seen["host"]
	if !ok {
		return Request{}, fmt.Errorf("%w: no host", ErrRequest)
	}
	if req.Host, req.Port, err = splitAddress(rawHost, true); err != nil {
		return Request{}, fmt.Errorf("%w: host %.64q: %v", ErrRequest, rawHost, err)
	}
	return req, nil
}

// Match returns the credential for req: protocol https, the same host (in
// lower case) and port, and the same user name if req names one.
func Match(req Request, creds []Credential) (Credential, error) {
	if req.Protocol != "https" {
		return Credential{}, fmt.Errorf("%w: protocol %.16q: only https gets a credential", ErrRequest, req.Protocol)
	}
	var addrs []string
	for _, c := range creds {
		if c.Host != req.Host || c.Port != req.Port {
			addrs = append(addrs, c.Address())
			continue
		}
		if req.Username != "" && req.Username != c.Username {
			return Credential{}, fmt.Errorf("%w: user name %.64q is not the one configured for %s", ErrRequest, req.Username, c.Address())
		}
		return c, nil
	}
	return Credential{}, fmt.Errorf("%w: no credential for %s:%d (this rule has credentials for: %s)",
		ErrRequest, req.Host, req.Port, strings.Join(addrs, ", "))
}

// Serve answers one helper invocation: for "get", the user name and
// password of the matching credential, or nothing (with the reason as the
// error) when none matches; "store", "erase" and anything else are
// ignored (their input is drained, up to MaxRequest bytes).
func Serve(op string, in io.Reader, out io.Writer, creds []Credential) error {
	if op != "get" {
		_, _ = io.Copy(io.Discard, io.LimitReader(in, MaxRequest))
		return nil
	}
	req, err := ParseRequest(in)
	if err != nil {
		return err
	}
	c, err := Match(req, creds)
	if err != nil {
		return err
	}
	if !validValue(c.Username) || !validValue(c.Password) {
		return fmt.Errorf("%w: the credential for %s is not usable (empty, or a newline or NUL in it)", ErrRequest, c.Address())
	}
	_, err = io.WriteString(out, "username="+c.Username+"\npassword="+c.Password+"\n")
	return err
}
