package gitproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/approvals"
	"coily.dev/coily/descriptor"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// servePushRefs serves info/refs?service=git-receive-pack: upstream's
// refs, from the cache, refreshed now unless it was within pushFresh.
func (p *Proxy) servePushRefs(w http.ResponseWriter, r *http.Request, rq *request) {
	dir := p.cacheDir(rq.remote, rq.target.Repo)
	cache, release := p.caches.acquire(dir, rq.remote.Name)
	defer release()
	err := p.refreshPush(rq, cache, nil)
	if err != nil {
		p.record(rq, "git.push", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	req, err := backendRequest(r, ReceivePack, 0)
	if err != nil {
		writeRefusal(w, err)
		return
	}
	p.serveGit(w, req, dir, ReceivePack, true, configEnv(cacheConfig))
}

// pushFresh is how old a refresh of the cache may be for a push's
// advertisement and decision to use it without another: a push's POST
// comes just after its advertisement, and a push often just after a
// fetch. A ref upstream moved since is caught by the lease of the push
// upstream, and the agent is told to fetch and try again.
const pushFresh = 30 * time.Second

// refreshPush refreshes the cache for a push unless a refresh within
// pushFresh left it as upstream was (up is nil when not yet known).
func (p *Proxy) refreshPush(rq *request, e *cacheEntry, up *upstream) error {
	if p.caches.freshSince(e, rq.start.Add(-pushFresh)) && exists(filepath.Join(e.dir, "HEAD")) {
		return nil
	}
	if up == nil {
		var err error
		if up, err = p.upstream(rq.ctx, rq, false); err != nil {
			return err
		}
		defer up.close()
	}
	return p.refresh(rq.ctx, up, e)
}

// push is one git-receive-pack POST in flight.
type push struct {
	rq   *request
	up   *upstream // the remote's credential's; nil for a GitHub App's (pushUpstream mints it)
	dir  string    // the push's private directory
	repo string    // its bare repository
	refs map[string]string
	// pack holds the body's bytes after the command list, as git read
	// them: the agent's pack (forward.go).
	pack string
	// quarantine holds what git received of the push, once its hook ran.
	quarantine string
	// what happened, for the audit
	updates  []*update
	approval string
	answer   string
	// say shows the agent a line while the push is decided (the hook's).
	say func(string)
}

// servePush receives a push into a private repository and lets its hook
// decide (see the package comment); one audit record tells the outcome.
func (p *Proxy) servePush(w http.ResponseWriter, r *http.Request, rq *request) {
	releaseSlot, err := p.pushes.acquire(rq.caller.Principal)
	if err != nil {
		p.record(rq, "git.push", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	defer releaseSlot()
	cache, release := p.caches.acquire(p.cacheDir(rq.remote, rq.target.Repo), rq.remote.Name)
	defer release()
	ps, err := p.preparePush(rq, cache)
	if ps != nil {
		defer os.RemoveAll(ps.dir)
	}
	if err != nil {
		p.record(rq, "git.push", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	req, err := backendRequest(r, ReceivePack, p.cfg.MaxPushBytes)
	var pack *os.File
	if err == nil {
		pack, err = ps.keepPack()
	}
	if err == nil {
		defer pack.Close()
		err = checkBody(req, pack)
	}
	if err != nil {
		p.record(rq, "git.push", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	hook, err := openHook(ps.dir)
	if err != nil {
		err = refusal.Wrap(refusal.Internal, err, "the proxy could not prepare the push")
		p.record(rq, "git.push", err, nil, nil)
		writeRefusal(w, err)
		return
	}
	defer hook.close()
	ctx, cancel := context.WithCancel(rq.ctx)
	decided := make(chan error, 1)
	go func() { decided <- p.decide(ctx, ps, hook) }()
	// The connectivity check asks no git for the alternates' refs (the
	// cache's, and the repository's own behind the quarantine): the
	// repository's refs are the cache's, and the check reads them.
	p.serveGit(w, req, ps.repo, ReceivePack, false, configEnv(append(cacheConfig[:len(cacheConfig):len(cacheConfig)],
		[2]string{"receive.fsckObjects", "true"}, [2]string{"core.alternateRefsCommand", "true"},
		[2]string{"receive.maxInputSize", strconv.FormatInt(p.cfg.MaxPushBytes, 10)},
		[2]string{"receive.unpackLimit", "0"}, [2]string{"receive.autogc", "false"}, [2]string{"receive.denyDeletes", "false"},
		[2]string{"receive.denyNonFastForwards", "false"}, [2]string{"receive.advertisePushOptions", "false"},
		[2]string{"core.hooksPath", filepath.Join(ps.dir, "hooks")})))
	cancel()
	err = <-decided
	if err == nil {
		p.learn(rq.ctx, cache, ps)
	}
	details := map[string]string{"approval": ps.approval, "upstream": ps.answer}
	var lines []string
	for _, u := range ps.updates {
		lines = append(lines, u.summary())
	}
	p.record(rq, "git.push", err, details, map[string][]string{"updates": lines})
}

// checkBody checks the push's command list (checkCommands) before git
// reads the body, and copies what git reads after it to pack.
func checkBody(req *http.Request, pack io.Writer) error {
	body, err := checkCommands(req.Body, pack)
	if err != nil {
		return refusal.Wrap(refusal.BadRequest, err, "%s", err.Error())
	}
	req.Body = struct {
		io.Reader
		io.Closer
	}{body, req.Body}
	return nil
}

// keepPack makes the file the push's pack is copied to, in its private
// directory.
func (ps *push) keepPack() (*os.File, error) {
	ps.pack = filepath.Join(ps.dir, "pack")
	f, err := os.OpenFile(ps.pack, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "the proxy could not prepare the push")
	}
	return f, nil
}

// preparePush refreshes the cache, unless the push's own advertisement
// just did (pushFresh), and makes the push's private repository: objects
// borrowed from the cache, refs at upstream's values.
func (p *Proxy) preparePush(rq *request, e *cacheEntry) (*push, error) {
	cache := e.dir
	// A remote's credential serves the refresh and the push; a GitHub
	// App's token is minted for the refresh only when it runs
	// (refreshPush), and for the push once decided (pushUpstream).
	var up *upstream
	if rq.remote.GitHubApp == nil {
		var err error
		if up, err = p.upstream(rq.ctx, rq, false); err != nil {
			return nil, err
		}
	}
	if err := p.refreshPush(rq, e, up); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(filepath.Join(p.cfg.Dir, "push"), "p-")
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "the proxy could not prepare the push")
	}
	ps := &push{rq: rq, up: up, dir: dir, repo: filepath.Join(dir, "repo.git")}
	fail := func(err error) (*push, error) {
		return ps, refusal.Wrap(refusal.Internal, err, "the proxy could not prepare the push")
	}
	if err := makeBare(ps.repo, filepath.Join(cache, "objects")); err != nil {
		return fail(err)
	}
	refs, err := p.cacheRefs(rq.ctx, cache)
	if err != nil {
		return fail(err)
	}
	// The refs go in as a packed-refs file, one "OID REF" line each, in
	// order: one git fewer on every push than update-ref.
	ps.refs = refs
	var packed strings.Builder
	for _, ref := range slices.Sorted(maps.Keys(refs)) {
		fmt.Fprintf(&packed, "%s %s\n", refs[ref], ref)
	}
	if err := os.WriteFile(filepath.Join(ps.repo, "packed-refs"), []byte(packed.String()), 0o600); err != nil {
		return fail(err)
	}
	return ps, nil
}

// makeBare makes the empty bare repository a push is received into, as
// git init --bare --template= makes one, without a git process: HEAD,
// the configuration, refs and objects, which borrow from alternate.
func makeBare(repo, alternate string) error {
	for _, d := range []string{"refs/heads", "refs/tags", "objects/info", "objects/pack"} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o700); err != nil {
			return err
		}
	}
	for name, text := range map[string]string{
		"HEAD":                    "ref: refs/heads/main\n",
		"config":                  "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
		"objects/info/alternates": alternate + "\n",
	} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(text), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// decide waits for the hook, decides the push, pushes upstream when it
// may, and answers the hook. It returns the refusal, if any.
func (p *Proxy) decide(ctx context.Context, ps *push, hook *hookPipes) error {
	quarantine, lines, err := hook.read(ctx)
	if err != nil && !errors.As(err, new(*refusal.Error)) {
		// Git refused the pack before its hook ran (fsck, connectivity,
		// size), or the agent went away; a hook that runs later is
		// refused all the same.
		err = refusal.Wrap(refusal.BadRequest, err, "git did not accept the pushed objects")
	}
	if err == nil {
		ps.say = hook.say
		err = p.decideUpdates(ctx, ps, quarantine, lines)
	}
	if err != nil {
		re := refusal.As(err)
		hook.reply(false, []string{fmt.Sprintf("%s: %s", re.Code, re.Msg)})
		return err
	}
	hook.reply(true, []string{ps.answer})
	return nil
}

// decideUpdates checks and classifies the updates, applies the remote's
// push policy, waits for an approval when it asks for one, and pushes.
func (p *Proxy) decideUpdates(ctx context.Context, ps *push, quarantine string, lines []string) error {
	objects := filepath.Join(ps.repo, "objects")
	ups, err := parseUpdates(lines)
	if err != nil {
		return refusal.Wrap(refusal.BadRequest, err, "%s", err.Error())
	}
	ps.updates = ups
	switch {
	case quarantine == "" && !slices.ContainsFunc(ups, func(u *update) bool { return !zero(u.new) }):
		quarantine = objects // only deletes: git received no pack
	case filepath.Dir(quarantine) != objects || !strings.HasPrefix(filepath.Base(quarantine), "tmp_objdir-incoming-"):
		return refusal.New(refusal.Internal, "the hook named an unexpected quarantine")
	}
	for _, u := range ups {
		cur, ok := ps.refs[u.ref]
		if (!ok && !zero(u.old)) || (ok && cur != u.old) {
			return refusal.New(refusal.PolicyDeny, "%s: the push's old value %s is not upstream's current value; fetch and try again", u.ref, short(u.old))
		}
	}
	ps.quarantine = quarantine
	env := append(p.gitEnv(), "GIT_DIR="+ps.repo, "GIT_OBJECT_DIRECTORY="+quarantine, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+objects)
	if err := p.classify(ctx, env, ups); err != nil {
		return refusal.Wrap(refusal.BadRequest, err, "the proxy could not classify the push: %s", upstreamSays(err))
	}
	confirm := false
	for _, u := range ups {
		u.decision = ps.rq.remote.Push.Decide(u.ref, u.kind)
		if u.decision == policy.GitDeny {
			return refusal.New(refusal.PolicyDeny, "git remote %q does not allow a %s of %s", ps.rq.remote.Name, u.kind, u.ref)
		}
		confirm = confirm || u.decision == policy.GitConfirm
	}
	if confirm {
		if err := p.approve(ctx, ps); err != nil {
			return err
		}
	}
	if err := p.cfg.Stopped(ps.rq.caller.Principal); err != nil {
		return err
	}
	return p.pushUpstream(ctx, ps, env)
}

// approve waits for a human's approval of the push, which shows each
// update: ref, old → new, kind, commits added and dropped.
func (p *Proxy) approve(ctx context.Context, ps *push) error {
	rem := ps.rq.remote
	argv := []string{"git", "push", rem.URL(ps.rq.target.Repo)}
	var note []string
	for _, u := range ps.updates {
		argv = append(argv, u.summary())
		note = append(note, u.summary())
		for _, l := range u.log {
			note = append(note, "  "+l)
		}
	}
	ap := p.cfg.Approvals.Create(approvals.Request{ID: descriptor.NewID(), Requester: ps.rq.caller.Principal,
		Exec: &coilyv1.ExecRequest{Argv: argv, Note: strings.Join(note, "\n")},
		Rule: &policy.Rule{Name: "git:" + rem.Name, Confirm: true, ConfirmTimeout: rem.Push.ConfirmTimeout}}, rem.Push.ConfirmTimeout)
	ps.approval = ap.Snapshot().GetId()
	ps.say(fmt.Sprintf("coily: waiting for approval %[1]s (up to %[2]s): the console's Approvals, or coily approvals approve %[1]s",
		ps.approval, rem.Push.ConfirmTimeout))
	if p.cfg.Waiting != nil {
		p.cfg.Waiting(ap)
	}
	_, err := p.cfg.Approvals.Wait(ctx, ap)
	return err
}

// pushUpstream pushes the updates upstream: one ref over https as the
// agent's pack (forward), others from the quarantine by git push, atomic,
// each with a lease on its old value; upstream's answer is the push's.
func (p *Proxy) pushUpstream(ctx context.Context, ps *push, env []string) error {
	args := []string{"push", "--porcelain", "--no-verify", "--quiet"}
	if len(ps.updates) > 1 {
		args = append(args, "--atomic")
	}
	var specs []string
	for _, u := range ps.updates {
		old := u.old
		if zero(old) {
			old = ""
		}
		args = append(args, "--force-with-lease="+u.ref+":"+old)
		if zero(u.new) {
			specs = append(specs, ":"+u.ref)
		} else {
			specs = append(specs, u.new+":"+u.ref)
		}
	}
	up := ps.up
	if up == nil {
		// The App's token for the push: minted now, after any approval,
		// with contents: write, and revoked once upstream has answered.
		var err error
		if up, err = p.upstream(ctx, ps.rq, true); err != nil {
			return err
		}
		defer up.close()
	}
	if ps.forwardable(up) {
		n, why := p.sendLength(ctx, env, ps)
		if why == nil {
			return p.forward(ctx, ps, up, n)
		}
		p.log.Info("git proxy: a push goes by git push", "remote", ps.rq.remote.Name, "why", why)
	}
	args = append(append(args, "--", up.url), specs...)
	upEnv := append(up.env[:len(up.env):len(up.env)], env[len(p.gitEnv()):]...)
	out, err := p.runUpstream(ctx, up, upEnv, args...)
	if r := (*refusal.Error)(nil); errors.As(err, &r) {
		ps.answer = r.Msg
		return r
	}
	if err != nil {
		rejects := porcelainRejects(out)
		ps.answer = "upstream refused: " + upstreamSays(err) + rejects
		if strings.Contains(rejects, "(stale info)") {
			// The lease: upstream moved since the cache's refresh.
			ps.answer = "upstream refused: the push's old value is not upstream's current value; fetch and try again" + rejects
		}
		return refusal.Wrap(refusal.PolicyDeny, err, "%s", ps.answer)
	}
	ps.answer = "upstream accepted " + strconv.Itoa(len(ps.updates)) + " ref update(s)"
	return nil
}

// learn brings what upstream has just accepted into the cache, from the
// push's repository (where git moved the quarantine once the hook said
// yes), so that the next refresh has nothing to download: the pushed
// refs, and only the objects they reach, which upstream now holds. One
// git packs the objects the pushed values reach that the push's refs
// (the cache's, when the push began) do not, and that the cache lacks
// (--local: the push's repository borrows the cache's objects) into the
// cache; another sets the refs. A failure leaves that to the next
// refresh.
func (p *Proxy) learn(ctx context.Context, e *cacheEntry, ps *push) {
	var in, refs strings.Builder
	for _, u := range ps.updates {
		if !zero(u.new) {
			in.WriteString(u.new + "\n")
			refs.WriteString("update " + u.ref + " " + u.new + "\n")
		}
	}
	if in.Len() == 0 {
		return
	}
	in.WriteString("--not\n")
	for _, oid := range ps.refs {
		in.WriteString(oid + "\n")
	}
	e.refreshing.Lock()
	defer e.refreshing.Unlock()
	pack := filepath.Join(e.dir, "objects", "pack", "pack")
	if _, err := p.runInput(ctx, append(p.gitEnv(), "GIT_DIR="+ps.repo), strings.NewReader(in.String()),
		"pack-objects", "--revs", "--local", "--non-empty", "--quiet", pack); err != nil {
		p.log.Warn("git proxy: the cache did not take the pushed objects", "err", err)
		return
	}
	if _, err := p.runInput(ctx, append(p.gitEnv(), "GIT_DIR="+e.dir), strings.NewReader(refs.String()),
		append(configArgs(cacheConfig), "update-ref", "--stdin")...); err != nil {
		p.log.Warn("git proxy: the cache did not take the pushed refs", "err", err)
		return
	}
	p.caches.sized(e, dirSize(e.dir))
}

// porcelainRejects are the rejected lines of git push --porcelain.
func porcelainRejects(out []byte) string {
	var s []string
	for l := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(l, "!") {
			s = append(s, strings.TrimSpace(strings.TrimPrefix(l, "!")))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, "; ") + ")"
}
