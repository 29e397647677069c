package descriptor

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Limits on a git exchange (docs/protocol.md §4.5). Bodies travel inside
// the files, base64-encoded: a request's within MaxSize; an answer's well
// within MaxResponseSize, bounded by what the server holds while it sends
// one (the body about five times over: its buffer, base64, the file, the
// gRPC message) times the requests a bridge relays at once per folder (8):
// about 400 MiB at most for one sandbox. The request's record keeps an
// answer whole only up to 1 MiB (package relay).
const (
	MaxGitBody         = 1 << 20 // bytes of a request's body, decoded
	MaxGitAnswerBody   = 8 << 20 // bytes of an answer's body, decoded
	MaxGitPathBytes    = 4096    // bytes of the path
	MaxGitQueryBytes   = 256     // bytes of the query
	MaxGitHeaderValues = 1024    // bytes of one header's value
)

// GitRequestHeaders are the only headers a git exchange may carry, and
// GitAnswerHeaders the only ones its answer may: what git's smart HTTP
// needs, nothing that authenticates or redirects.
var (
	GitRequestHeaders = []string{"Accept", "Content-Encoding", "Content-Type", "Git-Protocol"}
	GitAnswerHeaders  = []string{"Cache-Control", "Content-Encoding", "Content-Type", "Expires", "Pragma"}
)

// GitExchange is one smart HTTP request of git's for the git proxy,
// carried by a request descriptor instead of argv.
type GitExchange struct {
	Method string            // GET or POST
	Path   string            // /git/<host>/<repository>/<endpoint>, as sent (escaped)
	Query  string            // the raw query, "" for none
	Header map[string]string // names from GitRequestHeaders only
	Body   []byte            // a POST's body; nil for a GET
}

// GitAnswer is the git proxy's answer to a GitExchange, carried by a
// response whose outcome is OutcomeHTTP.
type GitAnswer struct {
	Status int
	Header map[string]string // names from GitAnswerHeaders only
	Body   []byte
}

// git decodes a request's "git" member.
func (d *decoder) git(v *value) (*GitExchange, error) {
	if v.kind != kindObject {
		return nil, d.fail("git", v, "must be a mapping, not %s", kindName(v.kind))
	}
	g := &GitExchange{}
	for _, m := range v.members {
		field := memberPath("git", m.key)
		var err error
		switch m.key {
		case "method":
			g.Method, err = d.str(field, m.val)
			if err == nil && g.Method != "GET" && g.Method != "POST" {
				err = d.fail(field, m.val, "must be GET or POST")
			}
		case "path":
			g.Path, err = d.httpText(field, m.val, MaxGitPathBytes, "?#")
			if err == nil && !strings.HasPrefix(g.Path, "/git/") {
				err = d.fail(field, m.val, "must start with /git/")
			}
		case "query":
			g.Query, err = d.httpText(field, m.val, MaxGitQueryBytes, "#")
		case "headers":
			g.Header, err = d.headers(field, m.val, GitRequestHeaders)
		case "body_base64":
			g.Body, err = d.base64(field, m.val, MaxGitBody)
		default:
			err = unknown(d, m)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, f := range []string{"method", "path"} {
		if v.get(f) == nil {
			return nil, d.missing("git." + f)
		}
	}
	if g.Method == "GET" && v.get("body_base64") != nil {
		return nil, d.fail("git.body_base64", v.get("body_base64"), "not allowed with GET")
	}
	return g, nil
}

// httpText is a string of at most max bytes of printable ASCII without a
// space or any byte of refused: what may stand in a request line.
func (d *decoder) httpText(field string, v *value, max int, refused string) (string, error) {
	s, err := d.str(field, v)
	if err != nil {
		return "", err
	}
	if len(s) > max {
		return "", d.fail(field, v, "longer than %d bytes", max)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(refused, c) >= 0 {
			return "", d.fail(field, v, "must be printable ASCII without spaces or any of %q", refused)
		}
	}
	return s, nil
}

// headers decodes a mapping of header names (each one of allowed, spelt
// as there) to values of printable ASCII and spaces.
func (d *decoder) headers(field string, v *value, allowed []string) (map[string]string, error) {
	if v.kind != kindObject {
		return nil, d.fail(field, v, "must be a mapping of strings, not %s", kindName(v.kind))
	}
	h := make(map[string]string, len(v.members))
	for _, m := range v.members {
		if !slices.Contains(allowed, m.key) {
			return nil, d.src.errAt(field, m.keyPos, "header %s is not carried (only %s)", quote(m.key), strings.Join(allowed, ", "))
		}
		mf := memberPath(field, m.key)
		s, err := d.str(mf, m.val)
		if err != nil {
			return nil, err
		}
		if len(s) > MaxGitHeaderValues {
			return nil, d.fail(mf, m.val, "longer than %d bytes", MaxGitHeaderValues)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < ' ' || c >= 0x7f {
				return nil, d.fail(mf, m.val, "must be printable ASCII")
			}
		}
		h[m.key] = s
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// gitObject is g as a request's "git" member.
func gitObject(g *GitExchange) (map[string]any, error) {
	if len(g.Body) > MaxGitBody {
		return nil, &Error{Code: CodeBadRequest, Field: "git.body_base64", Msg: fmt.Sprintf("decodes to more than %d bytes", MaxGitBody)}
	}
	obj := map[string]any{"method": g.Method, "path": g.Path}
	if g.Query != "" {
		obj["query"] = g.Query
	}
	if len(g.Header) > 0 {
		obj["headers"] = headerMap(g.Header)
	}
	if g.Body != nil {
		obj["body_base64"] = base64.StdEncoding.EncodeToString(g.Body)
	}
	return obj, nil
}

func headerMap(h map[string]string) map[string]any {
	out := make(map[string]any, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out[k] = h[k]
	}
	return out
}

// httpOnly are the members only an OutcomeHTTP response has.
var httpOnly = map[string]bool{"status": true, "headers": true, "body_base64": true}

// answerObject adds a's members to a response's object.
func answerObject(obj map[string]any, a *GitAnswer) {
	obj["status"] = int64(a.Status)
	if len(a.Header) > 0 {
		obj["headers"] = headerMap(a.Header)
	}
	obj["body_base64"] = base64.StdEncoding.EncodeToString(a.Body)
}

// answerField decodes one of an OutcomeHTTP response's own members into
// a.
func (d *decoder) answerField(m member, a *GitAnswer) error {
	var err error
	switch m.key {
	case "status":
		var n int64
		n, err = d.integer("status", m.val, 100, 599)
		a.Status = int(n)
	case "headers":
		a.Header, err = d.headers("headers", m.val, GitAnswerHeaders)
	case "body_base64":
		a.Body, err = d.base64("body_base64", m.val, MaxGitAnswerBody)
	}
	return err
}
