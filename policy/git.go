package policy

import (
	"fmt"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/keystore/credref"
)

// GitKind is the kind of one ref update a push makes, as git decides it
// on the objects received (package gitproxy).
type GitKind string

// The kinds of ref update. A new ref under refs/tags/ is a tag; otherwise
// a zero old value creates, a zero new value deletes, an existing tag
// moved is forced, and an update is a fast-forward when the old commit is
// an ancestor of the new one, else forced.
const (
	GitCreate      GitKind = "create"
	GitFastForward GitKind = "fast_forward"
	GitForce       GitKind = "force"
	GitDelete      GitKind = "delete"
	GitTag         GitKind = "tag"
)

// GitKinds lists every kind, in a stable order.
var GitKinds = []GitKind{GitCreate, GitFastForward, GitForce, GitDelete, GitTag}

// GitDecision is what a remote's push policy says of one kind of update.
type GitDecision string

// The decisions; a kind the policy does not name is denied.
const (
	GitAllow   GitDecision = "allow"
	GitConfirm GitDecision = "confirm"
	GitDeny    GitDecision = "deny"
)

// Bounds of the git section.
const (
	// MaxGitRemotes bounds the remotes of a policy.
	MaxGitRemotes = 256
	// MaxGitRefPatterns bounds one remote's ref patterns.
	MaxGitRefPatterns = 64
	// maxGitPath bounds a remote's path pattern, in bytes.
	maxGitPath = 512
)

// Git is the policy's `git:` section: the upstream repositories the git
// proxy (package gitproxy) serves, who may use them, with which
// credential, and what a push may do to their refs.
type Git struct {
	Remotes []*GitRemote
}

// GitRemote is one entry of `git.remotes`: one upstream repository, or a
// pattern of them on one host.
type GitRemote struct {
	// Name names the remote in the audit and in approvals.
	Name string
	// Host is the upstream's DNS name in lower case, Port its https or
	// ssh port (443 or 22 when the URL names none).
	Host string
	Port int
	// Path is the repository path pattern without its leading slash and
	// without a trailing ".git" ("alice/*"): each "/"-separated segment a
	// pattern of path.Match, matching one segment.
	Path string
	// Roles are the roles whose holders may use the remote.
	Roles []string
	// Credential is the token sent upstream as HTTP basic auth
	// (x-access-token:<token>); zero for none (and for an ssh remote).
	Credential credref.Ref
	// SSH is how an ssh remote (ssh://USER@HOST/PATH) is reached; nil
	// for an https one.
	SSH *GitSSH
	// GitHubApp, instead of Credential, mints the token sent upstream
	// per request; nil for none.
	GitHubApp *GitApp
	// CAFile is a PEM bundle trusted for the upstream instead of the
	// system's; "" for the system's.
	CAFile string
	// AllowCIDRs are the non-public addresses the upstream may resolve
	// to (a private git server); a public address needs none.
	AllowCIDRs []netip.Prefix
	// Fetch says whether holders may fetch (true unless `fetch: false`).
	Fetch bool
	// Push is what a push may do; nil refuses every push.
	Push *GitPush
	// Line is where the remote starts in the policy file.
	Line int
}

// GitSSH is what reaching an ssh remote takes: the user, the private key
// git's ssh gets through an agent (never a file), and the host keys
// pinned for the remote's host.
type GitSSH struct {
	User string
	// Key is the credential reference of the private key.
	Key credref.Ref
	// KnownHosts are the remote's `known_hosts`: at least one, each
	// naming the remote's host (SSHHost).
	KnownHosts []KnownHost
}

// SSHHost is the remote's host as known_hosts names it.
func (r *GitRemote) SSHHost() SSHHost { return SSHHost{Host: r.Host, Port: r.Port} }

// GitPush is a remote's `push:` block.
type GitPush struct {
	// Refs are the patterns (path.Match, "*" within one segment) of the
	// refs a push may update.
	Refs []string
	// Kinds maps each kind of update to its decision; absent is deny.
	Kinds map[GitKind]GitDecision
	// ConfirmTimeout bounds the wait for an approval.
	ConfirmTimeout time.Duration
}

// URL is the upstream URL of the repository repo (a path the remote's
// pattern matches), as the request named it.
func (r *GitRemote) URL(repo string) string {
	if r.SSH != nil {
		host := r.Host
		if r.Port != 22 {
			host += ":" + strconv.Itoa(r.Port)
		}
		return "ssh://" + r.SSH.User + "@" + host + "/" + repo
	}
	host := r.Host
	if r.Port != 443 {
		host += ":" + strconv.Itoa(r.Port)
	}
	return "https://" + host + "/" + repo
}

// Matches reports whether the remote serves repo on host:port; repo is a
// clean path without a leading slash, with or without ".git".
func (r *GitRemote) Matches(host string, port int, repo string) bool {
	return host == r.Host && r.servesPort(port) && matchRepo(r.Path, repo)
}

// servesPort reports whether a request naming port names the remote's.
// A request's path without a port names 443; for an ssh remote on port
// 22 it names the remote too, as `coily git setup` rewrites git@HOST:
// to /git/HOST/.
func (r *GitRemote) servesPort(port int) bool {
	return port == r.Port || r.SSH != nil && r.Port == 22 && port == 443
}

// matchRepo matches a repository path, ".git" trimmed, against pattern; a
// path that trimming leaves without a name (".git" alone) matches none.
func matchRepo(pattern, repo string) bool {
	repo = strings.TrimSuffix(repo, ".git")
	if repo == "" || strings.HasSuffix(repo, "/") {
		return false
	}
	ok, err := path.Match(pattern, repo)
	return err == nil && ok
}

// Decide is the push policy's decision on one update of ref of kind k:
// deny when ref matches no pattern or the kind is not named.
func (p *GitPush) Decide(ref string, k GitKind) GitDecision {
	if p == nil || !slices.ContainsFunc(p.Refs, func(pat string) bool { ok, err := path.Match(pat, ref); return err == nil && ok }) {
		return GitDeny
	}
	if d, ok := p.Kinds[k]; ok {
		return d
	}
	return GitDeny
}

// GitRemote returns the first remote, in file order, that serves repo on
// host:port, or nil. It is nil too when, case aside, another remote comes
// first: GitHub and most hosts serve "alice/Secret" as "alice/secret", and
// a request must not reach a repository under a broader remote than the
// one that names it.
func (p *Policy) GitRemote(host string, port int, repo string) *GitRemote {
	if p.git == nil {
		return nil
	}
	exact := p.firstRemote(func(r *GitRemote) bool { return r.Matches(host, port, repo) })
	folded := p.firstRemote(func(r *GitRemote) bool { return r.matchesFolded(host, port, repo) })
	if exact != folded {
		return nil
	}
	return exact
}

func (p *Policy) firstRemote(match func(*GitRemote) bool) *GitRemote {
	for _, r := range p.git.Remotes {
		if match(r) {
			return r
		}
	}
	return nil
}

// matchesFolded is Matches with the path and the pattern in lower case
// (a pattern holds no character class, so folding it changes no glob).
func (r *GitRemote) matchesFolded(host string, port int, repo string) bool {
	return host == r.Host && r.servesPort(port) && matchRepo(strings.ToLower(r.Path), strings.ToLower(repo))
}

// GitRemotes returns the policy's remotes, in file order.
func (p *Policy) GitRemotes() []*GitRemote {
	if p.git == nil {
		return nil
	}
	return p.git.Remotes
}

// MayUseRemote reports whether the subject holds one of the remote's
// roles.
func (p *Policy) MayUseRemote(s Subject, r *GitRemote) bool {
	roles := p.Roles(s)
	return slices.ContainsFunc(r.Roles, func(role string) bool { return slices.Contains(roles, role) })
}

type gitFile struct {
	Remotes []gitRemoteFile `yaml:"remotes"`
}

type gitRemoteFile struct {
	Name       string       `yaml:"name"`
	URL        string       `yaml:"url"`
	Roles      []string     `yaml:"roles"`
	Credential string       `yaml:"credential"`
	CAFile     string       `yaml:"ca_file"`
	SSHKey     string       `yaml:"ssh_key"`
	KnownHosts []string     `yaml:"known_hosts"`
	AllowCIDRs []string     `yaml:"allow_cidrs"`
	GitHubApp  *gitAppFile  `yaml:"github_app"`
	Fetch      *bool        `yaml:"fetch"`
	Push       *gitPushFile `yaml:"push"`
}

type gitPushFile struct {
	Refs           []string `yaml:"refs"`
	Create         string   `yaml:"create"`
	FastForward    string   `yaml:"fast_forward"`
	Force          string   `yaml:"force"`
	Delete         string   `yaml:"delete"`
	Tag            string   `yaml:"tag"`
	ConfirmTimeout string   `yaml:"confirm_timeout"`
}

// gitSegment is what one segment of a remote's path pattern may hold:
// the characters of GitHub's owner and repository names, and the glob's.
var gitSegment = regexp.MustCompile(`^[A-Za-z0-9._*?-]{1,100}$`)

// gitRefPattern is what a ref pattern may hold: git's ref name
// characters, without the ones git refuses, and the glob's.
var gitRefPattern = regexp.MustCompile(`^refs/[A-Za-z0-9._/*?+@-]{1,250}$`)

// git reads the `git:` section. It runs after roles, whose names it
// checks.
func (b *builder) git(p *Policy, f *gitFile) {
	if f == nil {
		return
	}
	if len(f.Remotes) == 0 {
		b.failAt(b.at("git"), "git: remotes must list at least one remote")
		return
	}
	if len(f.Remotes) > MaxGitRemotes {
		b.failAt(b.at("git", "remotes"), "git: more than %d remotes", MaxGitRemotes)
		return
	}
	p.git = &Git{}
	for i := range f.Remotes {
		at := func(path ...any) []any { return append([]any{"git", "remotes", i}, path...) }
		r := b.gitRemote(p, &f.Remotes[i], at)
		if b.err != nil {
			return
		}
		if slices.ContainsFunc(p.git.Remotes, func(o *GitRemote) bool { return o.Name == r.Name }) {
			b.failAt(b.at(at("name")...), "git remote %q is named twice", r.Name)
			return
		}
		p.git.Remotes = append(p.git.Remotes, r)
	}
}

func (b *builder) gitRemote(p *Policy, f *gitRemoteFile, at func(...any) []any) *GitRemote {
	r := &GitRemote{Name: f.Name, Fetch: f.Fetch == nil || *f.Fetch, Line: b.at(at()...).Line}
	if !namePattern.MatchString(f.Name) {
		b.failAt(b.at(at("name")...), "git remote name %q must match %s", f.Name, namePattern)
		return r
	}
	if err := r.parseURL(f.URL); err != nil {
		b.failAt(b.at(at("url")...), "git remote %q: url: %v", r.Name, err)
		return r
	}
	if len(f.Roles) == 0 {
		b.failAt(b.at(at()...), "git remote %q: roles must name who may use it", r.Name)
	}
	for j, role := range f.Roles {
		if _, ok := p.roles[role]; !ok && role != OperatorRole {
			b.failAt(b.at(at("roles", j)...), "git remote %q: no role named %q", r.Name, role)
		}
		r.Roles = append(r.Roles, role)
	}
	if f.Credential != "" {
		ref, err := credref.Parse(f.Credential)
		if err != nil {
			b.failAt(b.at(at("credential")...), "git remote %q: credential: %v", r.Name, err)
		}
		r.Credential = ref
	}
	b.gitSSH(r, f, at)
	if f.GitHubApp != nil {
		r.GitHubApp = b.gitApp(r, f, at)
	}
	if f.CAFile != "" && (!filepath.IsAbs(f.CAFile) || filepath.Clean(f.CAFile) != f.CAFile) {
		b.failAt(b.at(at("ca_file")...), "git remote %q: ca_file must be a clean absolute path, got %q", r.Name, f.CAFile)
	}
	r.CAFile = f.CAFile
	for j, s := range f.AllowCIDRs {
		c, err := parseCIDR(s)
		if err == nil && !c.AnyPort() {
			err = fmt.Errorf("%q: a git remote's allow_cidrs take no port (its url names the one it dials)", s)
		}
		if err != nil {
			b.failAt(b.at(at("allow_cidrs", j)...), "git remote %q: allow_cidrs: %v", r.Name, err)
		}
		r.AllowCIDRs = append(r.AllowCIDRs, c.Prefix)
	}
	if f.Push != nil {
		r.Push = b.gitPush(r.Name, f.Push, func(path ...any) []any { return at(append([]any{"push"}, path...)...) })
	}
	return r
}

// parseURL reads a remote's url: https://HOST[:PORT]/PATH-PATTERN or
// ssh://USER@HOST[:PORT]/PATH-PATTERN. The scp-like form (git@HOST:PATH)
// is not read: one form is enough, and it has no port.
func (r *GitRemote) parseURL(s string) error {
	if rest, ok := strings.CutPrefix(s, "ssh://"); ok {
		return r.parseSSHURL(s, rest)
	}
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		if strings.Contains(s, "@") && !strings.Contains(s, "://") {
			return fmt.Errorf("%s: write an ssh remote as ssh://USER@HOST[:PORT]/PATH (the scp-like form is not read)", QuoteShort(s))
		}
		return fmt.Errorf("%q: the proxy reaches upstreams over https (https://HOST/OWNER/REPO) or ssh (ssh://git@HOST/OWNER/REPO) only", s)
	}
	hostport, repo, ok := strings.Cut(rest, "/")
	if !ok || repo == "" {
		return fmt.Errorf("%q: name a repository path after the host", s)
	}
	if strings.ContainsAny(hostport, "@*") {
		return fmt.Errorf("%q: one exact host, without user or wildcard", s)
	}
	return r.parseHostPath(s, hostport, repo, 443)
}

// gitSSHUser is what an ssh remote's user may be: a login name, never
// one that starts with "-" (an option to ssh) or holds a quote.
var gitSSHUser = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,31}$`)

// parseSSHURL reads the rest of an ssh:// url: USER@HOST[:PORT]/PATH.
func (r *GitRemote) parseSSHURL(s, rest string) error {
	auth, repo, ok := strings.Cut(rest, "/")
	if !ok || repo == "" {
		return fmt.Errorf("%q: name a repository path after the host", s)
	}
	user, hostport, ok := strings.Cut(auth, "@")
	if !ok {
		return fmt.Errorf("%q: name the ssh user (ssh://git@HOST/PATH)", s)
	}
	if !gitSSHUser.MatchString(user) {
		return fmt.Errorf("%q: ssh user %s must match %s", s, QuoteShort(user), gitSSHUser)
	}
	if strings.ContainsAny(hostport, "@*") {
		return fmt.Errorf("%q: one exact host, without wildcard or a second @", s)
	}
	r.SSH = &GitSSH{User: user}
	return r.parseHostPath(s, hostport, repo, 22)
}

// parseHostPath reads a url's HOST[:PORT] (port def when none) and its
// repository path pattern.
func (r *GitRemote) parseHostPath(s, hostport, repo string, def int) error {
	hp, err := ParseHostPort(hostport)
	if err != nil {
		return err
	}
	r.Host, r.Port = hp.Host, hp.Port
	if r.Port == 0 {
		r.Port = def
	}
	repo = strings.TrimSuffix(repo, ".git")
	if len(repo) > maxGitPath {
		return fmt.Errorf("repository path longer than %d bytes", maxGitPath)
	}
	for seg := range strings.SplitSeq(repo, "/") {
		if !gitSegment.MatchString(seg) || seg == "." || seg == ".." || strings.Trim(seg, "*?") == "" && seg != "*" {
			return fmt.Errorf("%q: path segment %q must be a name or a pattern of %s", s, seg, gitSegment)
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("%q: path segment %q: %w", s, seg, err)
		}
	}
	r.Path = repo
	return nil
}

func (b *builder) gitPush(remote string, f *gitPushFile, at func(...any) []any) *GitPush {
	p := &GitPush{Kinds: map[GitKind]GitDecision{}, ConfirmTimeout: DefaultConfirmTimeout}
	if len(f.Refs) == 0 {
		b.failAt(b.at(at()...), "git remote %q: push needs refs: the patterns of the refs it may update", remote)
		return p
	}
	if len(f.Refs) > MaxGitRefPatterns {
		b.failAt(b.at(at("refs")...), "git remote %q: push: more than %d ref patterns", remote, MaxGitRefPatterns)
		return p
	}
	for j, pat := range f.Refs {
		_, err := path.Match(pat, "")
		if !gitRefPattern.MatchString(pat) || err != nil || strings.Contains(pat, "..") || strings.Contains(pat, "//") || strings.HasSuffix(pat, "/") {
			b.failAt(b.at(at("refs", j)...), "git remote %q: push ref pattern %q must be refs/… of %s", remote, pat, gitRefPattern)
		}
		p.Refs = append(p.Refs, pat)
	}
	for _, k := range []struct {
		kind GitKind
		val  string
	}{{GitCreate, f.Create}, {GitFastForward, f.FastForward}, {GitForce, f.Force}, {GitDelete, f.Delete}, {GitTag, f.Tag}} {
		switch d := GitDecision(k.val); d {
		case "":
		case GitAllow, GitConfirm, GitDeny:
			p.Kinds[k.kind] = d
		default:
			b.failAt(b.at(at(string(k.kind))...), "git remote %q: push %s must be allow, confirm or deny, got %q", remote, k.kind, k.val)
		}
	}
	if f.ConfirmTimeout != "" {
		d, err := time.ParseDuration(f.ConfirmTimeout)
		if err != nil || d <= 0 || d > MaxTimeout {
			b.failAt(b.at(at("confirm_timeout")...), "git remote %q: confirm_timeout %q must be a duration between 1ns and %s", remote, f.ConfirmTimeout, MaxTimeout)
		}
		p.ConfirmTimeout = d
	}
	return p
}
