package gitproxy

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
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

// maxLog bounds the commits listed per update.
const maxLog = 10

// classify decides each update's kind with git, on the quarantined
// objects (env), and counts and lists the commits it adds and drops. A
// tag is made by a tag update; moving an existing tag is a force and
// deleting one a delete. A ref outside refs/tags/ must name a commit.
func (p *Proxy) classify(ctx context.Context, env []string, ups []*update) error {
	for _, u := range ups {
		if err := p.kind(ctx, env, u); err != nil {
			return err
		}
		if err := p.commits(ctx, env, u); err != nil {
			return err
		}
	}
	return nil
}

// kind decides u's kind (see classify).
func (p *Proxy) kind(ctx context.Context, env []string, u *update) error {
	tag := strings.HasPrefix(u.ref, "refs/tags/")
	if !tag && !zero(u.new) {
		out, err := p.run(ctx, env, "cat-file", "-t", u.new)
		if err != nil {
			return fmt.Errorf("%s: git cannot read %s: %w", u.ref, u.new, err)
		}
		if t := strings.TrimSpace(string(out)); t != "commit" {
			return fmt.Errorf("%s names a %s, not a commit", u.ref, oneLine(t))
		}
	}
	switch {
	case tag && zero(u.old):
		u.kind = policy.GitTag
	case zero(u.old):
		u.kind = policy.GitCreate
	case zero(u.new):
		u.kind = policy.GitDelete
	case tag:
		u.kind = policy.GitForce
	default:
		_, err := p.run(ctx, env, "merge-base", "--is-ancestor", u.old, u.new)
		var ee *exec.ExitError
		switch {
		case err == nil:
			u.kind = policy.GitFastForward
		case errors.As(err, &ee) && ee.ExitCode() == 1:
			u.kind = policy.GitForce
		default:
			return fmt.Errorf("%s: git cannot compare %s and %s: %w", u.ref, u.old, u.new, err)
		}
	}
	return nil
}

// commits counts and lists the commits u adds (reachable from the new
// value, not from upstream's refs) and drops (reachable from the old
// value, not from the new).
func (p *Proxy) commits(ctx context.Context, env []string, u *update) error {
	if !zero(u.new) {
		added, log, err := p.revs(ctx, env, u.new, "--not", "--all")
		if err != nil {
			return err
		}
		u.added, u.log = added, log
	}
	if u.kind == policy.GitForce { // a fast-forward drops nothing
		out, err := p.run(ctx, env, "rev-list", "--count", u.old, "--not", u.new)
		if err != nil {
			return err
		}
		u.dropped, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	return nil
}

// revs counts the commits of a range and lists the first maxLog.
func (p *Proxy) revs(ctx context.Context, env []string, rng ...string) (int, []string, error) {
	out, err := p.run(ctx, env, append([]string{"rev-list", "--count"}, rng...)...)
	if err != nil {
		return 0, nil, err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	out, err = p.run(ctx, env, append([]string{"log", "--no-decorate", "--format=%h %an: %s", "-n", strconv.Itoa(maxLog)}, rng...)...)
	if err != nil {
		return 0, nil, err
	}
	var log []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			log = append(log, oneLine(l))
		}
	}
	return n, log, nil
}

// summary is one update in a line: the ref, old → new, the kind, the
// commits added and dropped, and the decision.
func (u *update) summary() string {
	return fmt.Sprintf("%s %s..%s %s +%d -%d %s", u.ref, short(u.old), short(u.new), u.kind, u.added, u.dropped, u.decision)
}

func short(oid string) string { return oid[:min(len(oid), 12)] }
