package gitproxy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"coily.dev/coily/policy"
)

// update is one ref update of a push, as git's hook handed it over.
type update struct {
	old, new, ref string
	kind          policy.GitKind
	decision      policy.GitDecision
	added         int // commits the update adds (bounded count)
	dropped       int // commits it drops
	log           []string
}

var (
	oidPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
	// refPattern is a ref name a push may name: refs/… of git's plainest
	// characters; check-ref-format's other rules are checked by validRef.
	refPattern = regexp.MustCompile(`^refs/[A-Za-z0-9._/+@-]{1,250}$`)
)

// validRef reports whether ref is a plain ref name under refs/.
func validRef(ref string) bool {
	if !refPattern.MatchString(ref) || strings.Contains(ref, "..") || strings.Contains(ref, "//") ||
		strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") || strings.HasSuffix(ref, ".lock") ||
		strings.Contains(ref, "/.") || strings.Contains(ref, "@{") {
		return false
	}
	return true
}

// parseUpdates reads the hook's update lines, "OLD NEW REF" each: the
// whole list is refused if one line cannot be read (a zero old and new
// value is none), or names a ref twice.
func parseUpdates(lines []string) ([]*update, error) {
	var out []*update
	seen := map[string]bool{}
	for _, l := range lines {
		f := strings.Split(l, " ")
		if len(f) != 3 || !oidPattern.MatchString(f[0]) || !oidPattern.MatchString(f[1]) || len(f[0]) != len(f[1]) ||
			zero(f[0]) && zero(f[1]) || !validRef(f[2]) {
			return nil, fmt.Errorf("ref update %q cannot be read", oneLine(l))
		}
		if seen[f[2]] {
			return nil, fmt.Errorf("ref %s is updated twice", f[2])
		}
		seen[f[2]] = true
		out = append(out, &update{old: f[0], new: f[1], ref: f[2]})
	}
	if len(out) == 0 {
		return nil, errors.New("no ref update")
	}
	return out, nil
}

func zero(oid string) bool { return strings.Trim(oid, "0") == "" }

// summary is one update in a line: the ref, old → new, the kind, the
// commits added and dropped, and the decision.
func (u *update) summary() string {
	return fmt.Sprintf("%s %s..%s %s +%d -%d %s", u.ref, short(u.old), short(u.new), u.kind, u.added, u.dropped, u.decision)
}

func short(oid string) string { return oid[:min(len(oid), 12)] }
