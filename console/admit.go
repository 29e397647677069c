package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/httpserve"
)

// Every route of the console is one of the server's actions
// (access.WebAction), and its handler runs only for a request the server
// has admitted for that action: the caller identified (WhoIs) and
// authorized, a refusal audited. Nothing of a request's body is read
// before that. The guard takes the body away from every request (what
// reads r.Body reads an error, withheldBody), and admit reads it, bounded,
// only once the request is admitted, and hands it to the handler
// (request). A refused request is answered without its body being read,
// and its connection is closed (httpserve.HangUp).

// request is an admitted request: its body is read, and its handler
// reads it only from here.
type request struct {
	*http.Request
	body []byte // a POST's (at most maxBody bytes); nil for other methods
}

// text is the body's one field (decodeBody).
func (r *request) text(field string) (string, error) {
	return decodeBody(r.Header.Get("Content-Type"), r.body, field)
}

// handler serves an admitted request.
type handler func(w http.ResponseWriter, r *request)

// handle registers h for pattern, as the action a.
func (c *Console) handle(mux *http.ServeMux, pattern string, a access.WebAction, h handler) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { c.admit(w, r, a, h) })
}

// admit serves r to h once the server admits it for a, with its body.
// The request read, its answer has the write timeout from then on. (The
// read deadline, the server's ReadTimeout, net/http lifts itself once a
// request is read: an event stream is not cut short by it.)
func (c *Console) admit(w http.ResponseWriter, r *http.Request, a access.WebAction, h handler) {
	if err := c.cfg.Server.WebAdmit(r, a); err != nil {
		httpserve.HangUp(w)
		answerError(w, r, 0, err)
		return
	}
	raw, _ := r.Context().Value(bodyKey{}).(io.ReadCloser)
	body, err := readBody(w, r, raw)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(c.limits.WriteTimeout)) // a recorder has none
	if err != nil {
		httpserve.HangUp(w)
		answerError(w, r, http.StatusBadRequest, err)
		return
	}
	h(w, &request{Request: r, body: body})
}

// bodyKey carries a request's body, withheld by the guard, to admit.
type bodyKey struct{}

// withhold returns r with its body taken away until admit reads it.
func withhold(r *http.Request) *http.Request {
	body := r.Body
	r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
	r.Body = withheldBody{}
	return r
}

// errWithheld is what reading a request's body before admit reads.
var errWithheld = errors.New("console: a request's body is read only after its caller is admitted")

// withheldBody is a request's body until its caller is admitted.
type withheldBody struct{}

func (withheldBody) Read([]byte) (int, error) { return 0, errWithheld }
func (withheldBody) Close() error             { return nil }

// answerError answers a refusal: JSON for the API, plain text for pages.
// status 0 is the refusal code's.
func answerError(w http.ResponseWriter, r *http.Request, status int, err error) {
	switch {
	case isAPI(r.URL.Path):
		writeError(w, status, err)
	case status == 0:
		pageError(w, err)
	default:
		pageErrorStatus(w, status, err)
	}
}
