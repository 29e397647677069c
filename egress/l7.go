package egress

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"coily.dev/coily/cmdtext"
	"coily.dev/coily/scrub"
)

// HTTPRule lets requests of one method (or any: "*") whose path matches
// Pattern through to an inspected host. Pattern is a path of segments:
// "*" matches one segment, a last "**" any number (none included), any
// other segment itself.
type HTTPRule struct {
	Method  string
	Pattern string
}

// ParseHTTPRule reads "METHOD /path/pattern" (METHOD upper-case letters
// or "*"). Hostile input is refused: a path not starting with "/",
// "." or ".." segments, empty inner segments, "**" before the end,
// partial wildcards ("a*"), percent signs, control bytes, spaces.
func ParseHTTPRule(s string) (HTTPRule, error) {
	method, pattern, ok := strings.Cut(s, " ")
	if !ok {
		return HTTPRule{}, fmt.Errorf("egress: http rule %q: want \"METHOD /path\"", s)
	}
	if method != "*" {
		if method == "" || len(method) > 16 || strings.Trim(method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return HTTPRule{}, fmt.Errorf("egress: http rule %q: method must be upper-case letters or *", s)
		}
	}
	if err := checkPattern(pattern); err != nil {
		return HTTPRule{}, fmt.Errorf("egress: http rule %q: %w", s, err)
	}
	return HTTPRule{Method: method, Pattern: pattern}, nil
}

func checkPattern(p string) error {
	if !strings.HasPrefix(p, "/") || len(p) > 1024 {
		return errors.New("path must start with / (at most 1024 bytes)")
	}
	if p == "/" {
		return nil
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "" && i == len(segs)-1: // trailing slash
		case seg == "":
			return errors.New("empty path segment")
		case seg == "." || seg == "..":
			return errors.New("dot segments are not allowed")
		case seg == "**" && i != len(segs)-1:
			return errors.New("** may only be the last segment")
		case seg != "*" && seg != "**" && strings.ContainsAny(seg, "*%?#"):
			return errors.New("a wildcard is a whole segment (* or **); no %, ? or #")
		}
		for _, b := range []byte(seg) {
			if b <= ' ' || b >= 0x7f {
				return errors.New("control bytes, spaces and non-ASCII are not allowed")
			}
		}
	}
	return nil
}

// Allows reports whether the rule lets method and path (the request's
// escaped path, query stripped) through.
func (r HTTPRule) Allows(method, path string) bool {
	if r.Method != "*" && r.Method != method {
		return false
	}
	return matchPath(r.Pattern, path)
}

func matchPath(pattern, path string) bool {
	if !strings.HasPrefix(path, "/") {
		return false
	}
	ps := strings.Split(pattern[1:], "/")
	xs := strings.Split(path[1:], "/")
	for i, p := range ps {
		if p == "**" {
			for _, x := range xs[i:] { // no dot segment hides behind **
				if x == "." || x == ".." {
					return false
				}
			}
			return true
		}
		if i >= len(xs) {
			return false
		}
		switch x := xs[i]; {
		case x == "." || x == "..":
			return false
		case p == "*" && x == "":
			return false
		case p != "*" && p != x:
			return false
		}
	}
	return len(ps) == len(xs)
}

// RequestRow is one request on an inspected connection: what was asked
// (the path without its query, and the query's hash), what was decided,
// and what came of it.
type RequestRow struct {
	Time      time.Time    `json:"time"`
	Host      cmdtext.Text `json:"host"`
	Port      int          `json:"port"`
	Method    cmdtext.Text `json:"method"`
	Path      cmdtext.Text `json:"path"`
	Query     string       `json:"query,omitempty"` // QueryHash of the raw query; "" without one
	Decision  Decision     `json:"decision"`
	Reason    string       `json:"reason,omitempty"`
	Status    int          `json:"status"`
	BytesUp   int64        `json:"bytes_up"`
	BytesDown int64        `json:"bytes_down"`
	Injected  bool         `json:"injected,omitempty"`
	Proto     string       `json:"proto"`
}

// MaxRequestRows bounds the request rows one proxy keeps; later ones are
// only counted (Proxy.RequestsDropped).
const MaxRequestRows = 256

type requestRow struct {
	RequestRow
	host, method, path string
}

type requestRows struct {
	mu      sync.Mutex
	rows    []requestRow
	done    []bool // rows[i] is finished
	dropped int
}

// reserve keeps the next row's place, in the order requests arrive (an
// HTTP/2 response that ends late keeps its place before the requests
// after it); fill it with set. -1: over MaxRequestRows, only counted.
func (r *requestRows) reserve() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rows) >= MaxRequestRows {
		r.dropped++
		return -1
	}
	r.rows = append(r.rows, requestRow{})
	r.done = append(r.done, false)
	return len(r.rows) - 1
}

// set finishes the row reserved at i.
func (r *requestRows) set(i int, row requestRow) {
	if i < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows[i], r.done[i] = row, true
}

// add appends a finished row.
func (r *requestRows) add(row requestRow) { r.set(r.reserve(), row) }

func (r *requestRows) list(secrets *scrub.Set) ([]RequestRow, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RequestRow, 0, len(r.rows))
	for i, e := range r.rows {
		if !r.done[i] { // a request still being answered
			continue
		}
		q := e.RequestRow
		q.Host = cmdtext.New(secrets, e.host)
		q.Method = cmdtext.New(secrets, e.method)
		q.Path = cmdtext.New(secrets, e.path)
		out = append(out, q)
	}
	return out, r.dropped
}

// QueryHash is how a request row names its query without its text:
// "sha256:" and the first 128 bits, in hex, of the SHA-256 of the raw
// query as the client sent it (after the "?", escapes as sent). An owner
// correlates rows with the same query, or checks a query they suspect
// (printf %s 'QUERY' | sha256sum), without the record holding a token
// or a search the query carried; a query short enough to guess is found
// by guessing, as its path would be. "" for no query.
func QueryHash(raw string) string {
	if raw == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(raw))
	return "sha256:" + hex.EncodeToString(sum[:16])
}
