package audit

import (
	"errors"
	"fmt"
	"slices"
)

// MaxLookupID bounds the id Lookup takes: an audit id has 13 bytes, a
// request, relay or approval id 36.
const MaxLookupID = 128

// ErrBadID is wrapped by Lookup's refusal of an id no record can carry.
var ErrBadID = errors.New("audit: not an audit, request or approval id")

// CheckID refuses an id that no audit, request, relay or approval id can
// be: empty, longer than MaxLookupID, or with a byte other than an ASCII
// letter, digit, '-', '_' or '.' (no control, glob or path character
// reaches a search or a message unquoted).
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: it is empty", ErrBadID)
	case len(id) > MaxLookupID:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadID, len(id), MaxLookupID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !idByte(c) {
			return fmt.Errorf("%w: byte %d is %+q (ids are letters, digits, '-', '_' and '.')", ErrBadID, i+1, string(rune(c)))
		}
	}
	return nil
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// Lookup returns the records an id names, oldest first: for an audit id,
// that record; for a request id, every record of the request (those of a
// relayed request whose descriptor had that id when none is the server's
// own, as FindRequest); for an approval id, every record of the request
// that asked for it and every record naming it (the decisions, refused
// ones included). An id CheckID refuses is an error wrapping ErrBadID;
// one that names nothing, an error wrapping ErrNotFound.
func Lookup(dir, id string) ([]Record, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	switch r, err := Find(dir, id); {
	case err == nil:
		return []Record{r}, nil
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	recs, err := FindRequest(dir, id)
	if !errors.Is(err, ErrNotFound) {
		return recs, err
	}
	return findApproval(dir, id)
}

// findApproval returns the records of the requests whose records name the
// approval id, and the records naming it, oldest first.
func findApproval(dir, id string) ([]Record, error) {
	var requests []string
	err := scan(dir, func(r Record) error {
		if r.Details["approval_id"] == id && r.RequestID != "" && !slices.Contains(requests, r.RequestID) {
			requests = append(requests, r.RequestID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Record
	err = scan(dir, func(r Record) error {
		if r.Details["approval_id"] == id || (r.RequestID != "" && slices.Contains(requests, r.RequestID)) {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("audit: %q is no audit, request or approval id in the log: %w", id, ErrNotFound)
	}
	return out, nil
}
