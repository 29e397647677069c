package gitproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
)

// A refresh of an https upstream first asks upstream for its heads and
// tags alone, as git fetch would (protocol v2's ls-refs, in one POST, by
// the pinned client of forward.go), and compares them with the cache's:
// when they are the same, git fetch would change nothing, and is not
// run. Any doubt (an error, an answer that does not read, an upstream
// that does not speak protocol v2, a difference) runs git fetch as
// before.

// maxLsRefs bounds the refs read of upstream's answer; past it, git
// fetch runs.
const maxLsRefs = 10000

// current reports whether the cache at dir holds exactly upstream's heads
// and tags, asking upstream once.
func (p *Proxy) current(ctx context.Context, up *upstream, dir string) bool {
	if up.tls == nil || !headResolves(dir) {
		return false
	}
	ours, err := p.cacheRefs(ctx, dir)
	if err != nil {
		return false
	}
	theirs, err := p.lsRefs(ctx, up)
	if err != nil {
		p.log.Debug("git proxy: ls-refs upstream", "err", err)
		return false
	}
	return maps.Equal(ours, theirs)
}

// cacheRefs are the heads and tags of the cache at dir, by value.
func (p *Proxy) cacheRefs(ctx context.Context, dir string) (map[string]string, error) {
	out, err := p.run(ctx, append(p.gitEnv(), "GIT_DIR="+dir), "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags")
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		oid, ref, ok := strings.Cut(l, " ")
		if ok && oidPattern.MatchString(oid) && !strings.ContainsAny(ref, " \t\r\n") {
			refs[ref] = oid
		}
	}
	return refs, nil
}

// lsRefs asks upstream for its heads and tags (ls-refs), SHA-1 ones.
func (p *Proxy) lsRefs(ctx context.Context, up *upstream) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.UpstreamTimeout)
	defer cancel()
	body := pkt("command=ls-refs\n") + pkt("agent=git/coily\n") + "0001" +
		pkt("ref-prefix refs/heads/\n") + pkt("ref-prefix refs/tags/\n") + "0000"
	var refs map[string]string
	err := up.post(ctx, "git-upload-pack", strings.NewReader(body), int64(len(body)), "version=2", func(r io.Reader) (err error) {
		refs, err = parseLsRefs(r)
		return err
	})
	return refs, err
}

// parseLsRefs reads an ls-refs answer: "OID REF" pkt-lines (attributes
// after are refused: none was asked for) up to a flush, and nothing
// after it. Each ref must be a plain head or tag, each OID SHA-1, no ref
// named twice, at most maxLsRefs.
func parseLsRefs(r io.Reader) (map[string]string, error) {
	r = io.LimitReader(r, maxGitOutput)
	refs := map[string]string{}
	for {
		line, flush, err := readPkt(r)
		switch {
		case err != nil:
			return nil, err
		case flush:
			if n, _ := r.Read(make([]byte, 1)); n != 0 {
				return nil, errors.New("data after the refs")
			}
			return refs, nil
		case len(refs) >= maxLsRefs:
			return nil, fmt.Errorf("more than %d refs", maxLsRefs)
		}
		oid, ref, _ := strings.Cut(string(bytes.TrimSuffix(line, []byte("\n"))), " ")
		if len(oid) != 40 || !oidPattern.MatchString(oid) || !validRef(ref) ||
			!strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
			return nil, fmt.Errorf("ref line %q", oneLine(string(line)))
		}
		if _, dup := refs[ref]; dup {
			return nil, fmt.Errorf("%s named twice", ref)
		}
		refs[ref] = oid
	}
}

// pkt is data as one pkt-line.
func pkt(data string) string { return fmt.Sprintf("%04x%s", len(data)+4, data) }
