package policy

import (
	"bytes"
	"encoding/json"
)

// SameAs reports whether o says exactly what r says: everything but where
// it stands in the file (Line) and whether its binary is installed now
// (Absent). Rules that cannot be compared are not the same.
func (r *Rule) SameAs(o *Rule) bool {
	if r == nil || o == nil {
		return r == o
	}
	a, err := ruleJSON(*r)
	if err != nil {
		return false
	}
	b, err := ruleJSON(*o)
	return err == nil && bytes.Equal(a, b)
}

func ruleJSON(r Rule) ([]byte, error) {
	r.Line, r.Absent = 0, nil
	return json.Marshal(r)
}
