package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"coily.dev/coily/refusal"
)

// maxBody bounds a POST body: one short text field.
const maxBody = 4 << 10

// readBody reads an admitted request's body (admit.go): a POST's, at most
// maxBody bytes, within the server's ReadTimeout; any other request must
// have none. A body refused here is not read any further.
func readBody(w http.ResponseWriter, r *http.Request, raw io.ReadCloser) ([]byte, error) {
	if r.Method != http.MethodPost {
		if r.ContentLength != 0 {
			return nil, refusal.New(refusal.BadRequest, "this request takes no body")
		}
		return nil, nil
	}
	if r.ContentLength > maxBody {
		return nil, refusal.New(refusal.BadRequest, "request body over %d bytes", maxBody)
	}
	if raw == nil {
		return nil, nil
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, raw, maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, refusal.New(refusal.BadRequest, "request body over %d bytes", maxBody)
	case err != nil:
		return nil, refusal.Wrap(refusal.BadRequest, err, "could not read the request body")
	}
	return data, nil
}

// decodeBody parses a POST's optional body: nothing at all (a bare POST,
// as ntfy's http action sends), or a JSON object with at most the one
// field the action takes ("note" for a decision, "reason" for the
// others), a string. A body of another type, another field, a second
// value or anything malformed is refused with bad-request: a field a
// newer page sent and this server ignored would be lost silently. The
// text itself is checked by the server (its limits and characters).
func decodeBody(contentType string, data []byte, field string) (string, error) {
	if len(data) > maxBody {
		return "", refusal.New(refusal.BadRequest, "request body over %d bytes", maxBody)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return "", nil // a bare POST: whatever it says its type is
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return "", refusal.New(refusal.BadRequest, "a request body must be application/json")
	}
	for k, v := range params {
		if k != "charset" || (v != "utf-8" && v != "UTF-8") {
			return "", refusal.New(refusal.BadRequest, "a request body must be application/json in UTF-8")
		}
	}
	text, err := decodeObject(data, field)
	if err != nil {
		return "", err
	}
	return text, nil
}

// decodeObject reads one JSON object holding at most one key, field, once,
// whose value is a string (or null), and nothing after it.
func decodeObject(data []byte, field string) (string, error) {
	notObject := refusal.New(refusal.BadRequest, "a request body must be one JSON object")
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", notObject
	}
	var text string
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", notObject
		}
		if key, _ := tok.(string); key != field || seen {
			return "", refusal.New(refusal.BadRequest, "this action takes only %q in its body, once", field)
		}
		seen = true
		var v *string
		if err := dec.Decode(&v); err != nil {
			return "", refusal.New(refusal.BadRequest, "%q must be a string", field)
		}
		if v != nil {
			text = *v
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", notObject
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", notObject
	}
	return text, nil
}
