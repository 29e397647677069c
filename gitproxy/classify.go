package gitproxy

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"coily.dev/coily/policy"
)

// maxLog bounds the commits listed per update.
const maxLog = 10

// classify decides each update's kind with git, on the quarantined
// objects (env), and counts and lists the commits it adds and drops. A
// tag is made by a tag update; moving an existing tag is a force and
// deleting one a delete. A ref outside refs/tags/ must name a commit.
// One git reads the types of every update's new value; then each update
// costs a git for its added commits and, when it moves a branch, one for
// its dropped commits, which also tells a fast-forward (none dropped)
// from a force.
func (p *Proxy) classify(ctx context.Context, env []string, ups []*update) error {
	if err := p.checkCommits(ctx, env, ups); err != nil {
		return err
	}
	for _, u := range ups {
		if err := p.kind(ctx, env, u); err != nil {
			return err
		}
		if err := p.added(ctx, env, u); err != nil {
			return err
		}
	}
	return nil
}

// checkCommits checks that every update of a ref outside refs/tags/ to a
// new value names a commit, with one git cat-file for all of them.
func (p *Proxy) checkCommits(ctx context.Context, env []string, ups []*update) error {
	var check []*update
	var in bytes.Buffer
	for _, u := range ups {
		if !strings.HasPrefix(u.ref, "refs/tags/") && !zero(u.new) {
			check = append(check, u)
			in.WriteString(u.new + "\n")
		}
	}
	if len(check) == 0 {
		return nil
	}
	out, err := p.runInput(ctx, env, &in, "cat-file", "--batch-check=%(objecttype)")
	if err != nil {
		return fmt.Errorf("git cannot read the pushed objects: %w", err)
	}
	types := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(types) != len(check) {
		return fmt.Errorf("git read %d of %d pushed objects", len(types), len(check))
	}
	for i, u := range check {
		if t := types[i]; t != "commit" {
			return fmt.Errorf("%s names a %s, not a commit", u.ref, oneLine(strings.TrimPrefix(t, u.new+" ")))
		}
	}
	return nil
}

// kind decides u's kind (see classify). A branch moved is a fast-forward
// when it drops no commit: its old value, as a commit, is reachable from
// its new one.
func (p *Proxy) kind(ctx context.Context, env []string, u *update) error {
	tag := strings.HasPrefix(u.ref, "refs/tags/")
	switch {
	case tag && zero(u.old):
		u.kind = policy.GitTag
	case zero(u.old):
		u.kind = policy.GitCreate
	case zero(u.new):
		u.kind = policy.GitDelete
	case tag:
		// Moving a tag is a force; its dropped commits are counted.
		n, err := p.count(ctx, env, u.old, "--not", u.new)
		if err != nil {
			return err
		}
		u.kind, u.dropped = policy.GitForce, n
	default:
		// old^{commit} fails on an old value that is no commit (a
		// tree, a blob): such a branch is not compared.
		n, err := p.count(ctx, env, u.old+"^{commit}", "--not", u.new)
		if err != nil {
			return fmt.Errorf("%s: git cannot compare %s and %s: %w", u.ref, u.old, u.new, err)
		}
		u.kind, u.dropped = policy.GitFastForward, n
		if n > 0 {
			u.kind = policy.GitForce
		}
	}
	return nil
}

// added counts and lists the commits u adds: reachable from its new
// value, not from upstream's refs. One git lists the first maxLog+1;
// only past maxLog does a second count them all.
func (p *Proxy) added(ctx context.Context, env []string, u *update) error {
	if zero(u.new) {
		return nil
	}
	rng := []string{u.new, "--not", "--all"}
	out, err := p.run(ctx, env, append([]string{"log", "-z", "--no-decorate", "--format=%h %an: %s", "-n", strconv.Itoa(maxLog + 1)}, rng...)...)
	if err != nil {
		return err
	}
	var log []string
	for l := range strings.SplitSeq(string(out), "\x00") {
		if l != "" {
			log = append(log, oneLine(l))
		}
	}
	u.added = len(log)
	if len(log) <= maxLog && len(out) < maxGitOutput {
		u.log = log
		return nil
	}
	u.log = log[:min(len(log), maxLog)]
	u.added, err = p.count(ctx, env, rng...)
	return err
}

// count counts the commits of a range.
func (p *Proxy) count(ctx context.Context, env []string, rng ...string) (int, error) {
	out, err := p.run(ctx, env, append([]string{"rev-list", "--count"}, rng...)...)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("git counted %q commits", oneLine(string(out)))
	}
	return n, nil
}
