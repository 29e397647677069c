package gitproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"

	"coily.dev/coily/egress"
	"coily.dev/coily/keystore/credref"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// upstream is how git reaches one remote's repository: its URL and the
// environment every git talking to it runs with, and what revokes the
// token in it when it was minted for the request (a GitHub App's).
type upstream struct {
	url string
	env []string
	// ssh is an ssh upstream's key and address; nil for https.
	ssh *sshUpstream
	// revoke revokes a token minted for the request; nil when none was.
	revoke func()
	// An https upstream's pinned address ("ip:port"), TLS and
	// Authorization header, for a push the proxy forwards (forward.go);
	// tls is nil when the CA file cannot be read (git push says why).
	addr string
	tls  *tls.Config
	auth string
}

// close revokes the upstream's minted token, if it has one, once.
func (u *upstream) close() {
	if u != nil && u.revoke != nil {
		u.revoke()
		u.revoke = nil
	}
}

// upstream resolves the remote's host (once, classified as egress
// classifies a destination: a non-public address needs the remote's
// allow_cidrs), fetches its credential or mints its GitHub App's token
// for the request's repository (contents: write when write, else read;
// the caller closes the upstream, which revokes it), and returns the
// environment that makes git reach exactly that address, over https
// only, without following a redirect, without user or system
// configuration, and with the token in an extra header scoped to the
// upstream's URL: in git's environment, never its argv. An ssh remote is
// reached over ssh only, at the same address, its key offered by an
// agent of each run (runUpstream, ssh.go).
func (p *Proxy) upstream(ctx context.Context, rq *request, write bool) (*upstream, error) {
	rem, repo := rq.remote, rq.target.Repo
	addr, err := p.resolve(ctx, rem, rem.Host)
	if err != nil {
		return nil, err
	}
	if rem.SSH != nil {
		s, err := p.sshUpstream(ctx, rem, addr)
		if err != nil {
			return nil, err
		}
		return &upstream{url: rem.URL(repo), env: append(p.gitEnv(), configEnv(sshConfig())...), ssh: s}, nil
	}
	pin := addr.String()
	if addr.Is6() {
		pin = "[" + pin + "]"
	}
	base := "https://" + rem.Host + "/"
	if rem.Port != 443 {
		base = "https://" + rem.Host + ":" + strconv.Itoa(rem.Port) + "/"
	}
	cfg := [][2]string{
		{"http.followRedirects", "false"},
		{"protocol.allow", "never"},
		{"protocol.https.allow", "always"},
		{"credential.helper", ""},
		{"http.curloptResolve", fmt.Sprintf("%s:%d:%s", rem.Host, rem.Port, pin)},
	}
	if rem.CAFile != "" {
		cfg = append(cfg, [2]string{"http.sslCAInfo", rem.CAFile})
	}
	up := &upstream{url: rem.URL(repo)}
	token := ""
	switch {
	case rem.Credential != (credref.Ref{}):
		if token, err = p.credential(ctx, rem.Credential); err != nil {
			return nil, refusal.Wrap(refusal.CredentialUnavailable, err, "git remote %q: its credential is unavailable", rem.Name)
		}
	case rem.GitHubApp != nil:
		tok, revoke, err := p.appToken(ctx, rq, write)
		if err != nil {
			return nil, err
		}
		token, up.revoke = tok.Value, revoke
	}
	if token != "" {
		up.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
		cfg = append(cfg, [2]string{"http." + base + ".extraHeader", "Authorization: " + up.auth})
	}
	up.env = append(p.gitEnv(), configEnv(cfg)...)
	up.addr = netip.AddrPortFrom(addr, uint16(rem.Port)).String()
	up.tls, _ = tlsConfig(rem.Host, rem.CAFile)
	return up, nil
}

// resolve returns the address the remote's host (its upstream's, or its
// GitHub App's API's) is reached at.
func (p *Proxy) resolve(ctx context.Context, rem *policy.GitRemote, host string) (netip.Addr, error) {
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, refusal.Wrap(refusal.Internal, err, "upstream %s does not resolve", host)
	}
	var class egress.Class
	for _, a := range addrs {
		a = a.Unmap()
		class = egress.Classify(a)
		if class == egress.Public || slices.ContainsFunc(rem.AllowCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return a, nil
		}
	}
	return netip.Addr{}, refusal.New(refusal.PolicyDeny, "upstream %s resolves to %s (%s), which git remote %q's allow_cidrs does not name",
		host, addrs[0].Unmap(), class, rem.Name)
}

// gitEnv is the environment of every git the proxy runs: no user or
// system configuration, no prompt, a private empty HOME.
func (p *Proxy) gitEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.home, "XDG_CONFIG_HOME=" + p.home, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_NO_REPLACE_OBJECTS=1"}
}

// configEnv is git configuration given through the environment
// (GIT_CONFIG_COUNT), where no other process's argv shows it.
func configEnv(kv [][2]string) []string {
	out := []string{"GIT_CONFIG_COUNT=" + strconv.Itoa(len(kv))}
	for i, e := range kv {
		out = append(out, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, e[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, e[1]))
	}
	return out
}

// maxGitOutput bounds what the proxy reads of one git's output.
const maxGitOutput = 1 << 20

// run runs git with args under env, bounded by the upstream timeout, and
// returns its standard output; a failure carries its standard error.
func (p *Proxy) run(ctx context.Context, env []string, args ...string) ([]byte, error) {
	return p.runInput(ctx, env, nil, args...)
}

// runInput is run with in as git's standard input.
func (p *Proxy) runInput(ctx context.Context, env []string, in io.Reader, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.UpstreamTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.git, args...)
	cmd.Env, cmd.Dir, cmd.Stdin = env, p.home, in
	var out, errb capped
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &gitError{args: args, err: err, stderr: errb.String()}
	}
	return out.Bytes(), nil
}

// runUpstream runs git against up under env: for an ssh upstream, with
// an agent holding the key for this one run, and a host key the remote
// does not pin refused by name.
func (p *Proxy) runUpstream(ctx context.Context, up *upstream, env []string, args ...string) ([]byte, error) {
	if up.ssh == nil {
		return p.run(ctx, env, args...)
	}
	sshEnv, end, err := up.ssh.session(p)
	if err != nil {
		return nil, err
	}
	out, err := p.run(ctx, append(env[:len(env):len(env)], sshEnv...), args...)
	if rep := end(); rep.Signed == 0 {
		if r := sshRefusal(up.ssh.remote, err); r != nil {
			return out, r
		}
	}
	return out, err
}

// gitError is a git that failed, with what it said.
type gitError struct {
	args   []string
	err    error
	stderr string
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", e.args[min(len(e.args)-1, 2)], e.err, bytes.TrimSpace([]byte(e.stderr)))
}

func (e *gitError) Unwrap() error { return e.err }

// capped is a buffer that keeps the first maxGitOutput bytes. It holds
// its buffer in a field, not embedded: an embedded bytes.Buffer's
// ReadFrom would be the one exec copies through, past Write's bound.
type capped struct{ b bytes.Buffer }

func (c *capped) Write(b []byte) (int, error) {
	if room := maxGitOutput - c.b.Len(); room > 0 {
		c.b.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (c *capped) Bytes() []byte  { return c.b.Bytes() }
func (c *capped) String() string { return c.b.String() }

// credential fetches a remote's token. A dynamic secret's lease is left
// to its TTL: the token serves the exchanges of one request.
func (p *Proxy) credential(ctx context.Context, ref credref.Ref) (string, error) {
	if p.cfg.Keystore == nil {
		return "", errors.New("no keystore is configured")
	}
	set, err := p.cfg.Keystore.Fetch(ctx, map[string]credref.Ref{"token": ref})
	if err != nil {
		return "", err
	}
	return set.Values["token"], nil
}
